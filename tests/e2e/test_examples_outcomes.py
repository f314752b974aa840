"""Every file of deploy/examples/, applied to the local stack as docs/examples.md says, followed to
the outcome the docs promise.

tests/docs/test_examples.py keeps the files and the page identical and has the API server accept
them (dry run); here they are applied for real with the pinned kubectl, by the people the page
implies — the classes by the module administrator (``module-admin``), the PriorityClasses by the
cluster administrator, the orders and the gated order's Secret by the namespace user (``ns-user``)
into ``support`` and ``analytics`` — with the module running (one e2e stand: the real watcher,
worker, planner, API server and Temporal; stand-in runtimes; the stand-in catalog lookup loaded with
the local run's ``deploy/dev/catalog-models.yaml``, which knows ``qwen2-5-8b-instruct-awq``) and the
bundled ``default-llm`` as the chart renders it. Then:

* the page's three orders reach Ready and answer the OpenAI contract; the page's "Read the result"
  and "Call the endpoint" commands are run as written (kubectl as the namespace user; the curls
  against the stand-in runtime that plays the order's pods, since the endpoint's URL is the
  cluster's); the gated order waits with ``AuthSecretNotFound`` until its Secret is there;
* each example class is Ready and does what its section says, shown by orders of it: the internal
  one publishes the Service over plain HTTP with no Ingress, no token and no autoscaler, one whole
  accelerator per order; the external one an Ingress with the host, TLS and issuer the page names,
  a token and an autoscaler 1..4; the strict one keeps its orders on its device class and priority
  class and refuses a model above 1B (``ParameterCountNotAllowed``); the embeddings class serves
  embeddings and refuses a chat model (``EndpointTypePolicyConflict``); a class refuses a
  namespace it does not admit (``NamespaceNotAllowed``).

The ModuleConfigs are Deckhouse objects with no API here (tests/docs/test_examples.py checks their
settings; ``catalog.mode: None`` refusing a catalog order is tests/e2e/test_convergence.py's).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes.client import ApiClient, AutoscalingV2Api, CoreV1Api, CustomObjectsApi, NetworkingV1Api, SchedulingV1Api
from kubernetes.client.exceptions import ApiException

from activities.builders.common import LABEL_ORDER
from devstack.cluster.launcher import LocalCluster
from devstack.stack import CATALOG_FIXTURES
from devstack.standins.catalog_service import CatalogServiceProcess
from devstack.standins.fleet import PROBE_URL_ANNOTATION
from inference_api.types import CLASSES, GROUP, ORDERS, VERSION
from tests.chart.helm import Helm, find
from tests.e2e.stand import MakeStand, Stand
from tests.examples import EXAMPLE_CLASSES, EXAMPLE_PRIORITY_CLASSES, EXAMPLES_DIR, REPO_ROOT, example_docs
from tests.polling import until

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

EXAMPLES_DOC = REPO_ROOT / "docs" / "examples.md"
NAMESPACES = ("support", "analytics")
SMALL_CHAT = "Qwen/Qwen2.5-0.5B-Instruct"
LARGE_CHAT = "Qwen/Qwen2.5-32B-Instruct-AWQ"
HF_TOKEN = "hf_example_token_for_the_test"
# The orders the page's classes are shown with (the page carries no order of them): name, namespace,
# class, model.
CLASS_ORDERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "internal-chat": ("support", "llm-internal", {"src": "HuggingFace", "ref": {"name": SMALL_CHAT}}),
    "internal-elsewhere": ("analytics", "llm-internal", {"src": "HuggingFace", "ref": {"name": SMALL_CHAT}}),
    "external-chat": ("analytics", "llm-chat-external", {"src": "HuggingFace", "ref": {"name": SMALL_CHAT}}),
    "strict-small": ("support", "llm-strict", {"src": "HuggingFace", "ref": {"name": SMALL_CHAT}}),
    "strict-large": ("support", "llm-strict", {"src": "HuggingFace", "ref": {"name": LARGE_CHAT}}),
    "embed-e5": (
        "analytics",
        "embeddings-only",
        {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": "multilingual-e5-large"}},
    ),
    "embed-chat-model": (
        "analytics",
        "embeddings-only",
        {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": "qwen2-5-8b-instruct-awq"}},
    ),
}


def page_commands(section: str) -> list[str]:
    """The shell lines of the ```bash block under ``## <section>`` of docs/examples.md, continuations joined."""
    page = EXAMPLES_DOC.read_text()
    match = re.search(rf"^## {re.escape(section)}\n.*?^```bash\n(.*?)^```\n", page, re.M | re.S)
    assert match, f"docs/examples.md has no bash block under '## {section}'"
    text = match.group(1).replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@dataclass
class Examples:
    cluster: LocalCluster
    api: ApiClient
    stand: Stand
    catalog: CatalogServiceProcess
    made_classes: list[str] = field(default_factory=list)
    made_priority_classes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.custom = CustomObjectsApi(self.api)
        self.core = CoreV1Api(self.api)

    def kubectl(self, *args: str, user: str = "ns-user", input: str | None = None) -> str:
        return self.cluster.kubectl(*args, user=user, input=input).stdout

    def apply(self, name: str, user: str) -> None:
        """``kubectl apply -f deploy/examples/<name>``, as ``user``."""
        self.kubectl("apply", "-f", str(EXAMPLES_DIR / name), user=user)

    def order(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, name)
        except ApiException as err:
            if err.status == 404:
                return {}
            raise
        return found

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        status: dict[str, Any] = self.order(namespace, name).get("status") or {}
        return status

    def conditions(self, namespace: str, name: str) -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in self.status(namespace, name).get("conditions") or []}

    def describe(self, namespace: str, name: str) -> str:
        status = self.status(namespace, name)
        conditions = "; ".join(
            f"{c['type']}={c['status']} {c.get('reason')}: {c.get('message', '')[:200]}"
            for c in status.get("conditions") or []
        )
        return f"{namespace}/{name}: phase={status.get('phase')} reason={status.get('reason')} [{conditions}]"

    async def until_phase(
        self, namespace: str, name: str, phase: str, reason: str | None, timeout: float = 120
    ) -> None:
        def check() -> bool:
            status = self.status(namespace, name)
            return status.get("phase") == phase and (reason == "any" or status.get("reason") == reason)

        await until(
            check,
            timeout=timeout,
            interval=0.5,
            in_thread=True,
            what=lambda: f"{phase}/{reason}, now {self.describe(namespace, name)}",
        )

    def runtime_url(self, namespace: str, name: str) -> str:
        """Where the stand-in runtime playing the order's pods answers (the Service's annotation)."""
        service = self.core.read_namespaced_service(name, namespace)
        url: str = (service.metadata.annotations or {})[PROBE_URL_ANNOTATION]
        return url

    async def until_scheduled(self, namespace: str, name: str, timeout: float = 120) -> None:
        """Until a replica of the order is on a node: its device claim is allocated."""

        def scheduled() -> bool:
            pods = self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_ORDER}={name}").items
            return any(pod.spec.node_name for pod in pods)

        await until(
            scheduled,
            timeout=timeout,
            interval=0.5,
            in_thread=True,
            what=lambda: f"a replica of {namespace}/{name} scheduled, now {self.describe(namespace, name)}",
        )

    def class_ready(self, name: str) -> tuple[str, str, str] | None:
        try:
            cls = self.custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
        except ApiException:
            return None
        ready = next((c for c in (cls.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)
        return (ready["status"], ready["reason"], ready.get("message", "")) if ready else None


def call(url: str, token: str | None = None, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """An HTTP call as the page's curl makes it: GET, or POST of a JSON body; (status, JSON answer)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def order_body(name: str) -> dict[str, Any]:
    namespace, class_name, model = CLASS_ORDERS[name]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"inferenceServiceClassName": class_name, "model": model},
    }


def _delete_quietly(delete: Callable[[], object]) -> None:
    with contextlib.suppress(ApiException):
        delete()


@pytest_asyncio.fixture
async def examples(
    make_stand: MakeStand, local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> AsyncIterator[Examples]:
    """The module running, the bundled class and the example classes and priority classes applied,
    the namespaces of the examples made (``ns-user`` edits there). On the way out every order in
    those namespaces is deleted while the worker still runs (their finalizers go), then the
    objects this fixture made."""
    with CatalogServiceProcess(CATALOG_FIXTURES) as catalog:
        stand = await make_stand(
            {
                "aiModels": {
                    "catalogLookup": {
                        "baseURL": catalog.base_url,
                        "timeoutSeconds": 2,
                        "notReadyRequeueSeconds": 1,
                        "allowInsecureHttp": True,
                    }
                }
            }
        )
        ex = Examples(local_cluster, kube_admin, stand, catalog)
        for namespace in NAMESPACES:
            local_cluster.create_namespace(namespace, users=("ns-user",))
        scheduling = SchedulingV1Api(kube_admin)
        # The bundled class as the chart renders it (a chart test of the session may have installed it).
        if ex.class_ready("default-llm") is None:
            rendered = find(helm.render(), "InferenceServiceClass", "default-llm")
            ex.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, rendered)
            ex.made_classes.append("default-llm")
        existing_classes = {
            c["metadata"]["name"] for c in ex.custom.list_cluster_custom_object(GROUP, VERSION, CLASSES)["items"]
        }
        existing_priorities = {p.metadata.name for p in scheduling.list_priority_class().items}
        ex.made_classes += [c for c in EXAMPLE_CLASSES.values() if c not in existing_classes]
        ex.made_priority_classes += [p for p, _ in EXAMPLE_PRIORITY_CLASSES.values() if p not in existing_priorities]
        # The administrator's part: the priority classes (cluster administrator), then the classes
        # (module administrator).
        for name in EXAMPLE_PRIORITY_CLASSES:
            ex.apply(name, user="admin")
        for name in EXAMPLE_CLASSES:
            ex.apply(name, user="module-admin")
        try:
            yield ex
        finally:
            for namespace in NAMESPACES:
                for item in ex.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS)["items"]:
                    _delete_quietly(
                        partial(
                            ex.custom.delete_namespaced_custom_object,
                            GROUP,
                            VERSION,
                            namespace,
                            ORDERS,
                            item["metadata"]["name"],
                        )
                    )

            def orders_gone() -> bool:
                return not any(
                    ex.custom.list_namespaced_custom_object(GROUP, VERSION, ns, ORDERS)["items"] for ns in NAMESPACES
                )

            await until(orders_gone, timeout=60, interval=0.5, in_thread=True, what="the examples' orders deleted")
            _delete_quietly(lambda: ex.core.delete_namespaced_secret("hf-token", "support"))
            for name in ex.made_classes:
                _delete_quietly(partial(ex.custom.delete_cluster_custom_object, GROUP, VERSION, CLASSES, name))
            for name in ex.made_priority_classes:
                _delete_quietly(partial(scheduling.delete_priority_class, name))


# ------------------------------------------------------------------------------- the page's orders


async def test_the_pages_orders_reach_ready_and_answer_as_the_page_says(examples: Examples) -> None:
    ex = examples
    started = time.monotonic()
    # The gated order first without its Secret: the page says it waits with AuthSecretNotFound.
    secret_doc, gated_doc = example_docs("order-gated-huggingface.yaml")
    ex.kubectl("apply", "-f", "-", input=yaml.safe_dump(gated_doc))
    ex.apply("order-minimal.yaml", user="ns-user")
    ex.apply("order-catalog-chat.yaml", user="ns-user")

    await ex.until_phase("support", "llama-chat", "Pending", "AuthSecretNotFound")
    resolved = ex.conditions("support", "llama-chat")["ModelResolved"]
    assert (resolved["status"], resolved["reason"]) == ("False", "AuthSecretNotFound"), resolved
    assert "hf-token" in resolved["message"], resolved
    assert ex.stand.apps.list_namespaced_stateful_set("support", field_selector="metadata.name=llama-chat").items == []
    # "Replace <HUGGING_FACE_TOKEN> with your token before you apply it": the whole file, then.
    text = (EXAMPLES_DIR / "order-gated-huggingface.yaml").read_text()
    assert secret_doc["stringData"]["token"] == "<HUGGING_FACE_TOKEN>"
    ex.kubectl("apply", "-f", "-", input=text.replace("<HUGGING_FACE_TOKEN>", HF_TOKEN))

    for name in ("support-llm", "llama-chat", "catalog-chat"):
        await ex.until_phase("support", name, "Ready", None, timeout=180)
    print(f"\nthe page's three orders Ready after {time.monotonic() - started:.1f}s")

    # "Read the result of an order", as written, by the namespace user.
    answers: dict[str, str] = {}
    for line in page_commands("Read the result of an order"):
        argv = shlex.split(line)
        assert argv[0] == "kubectl", line
        answers[line] = ex.kubectl(*argv[1:])
    outputs = list(answers.values())
    whole = yaml.safe_load(outputs[0])
    assert whole["metadata"]["name"] == "support-llm"
    assert outputs[1] == "Ready\n"
    assert outputs[2] == "https://support-llm.support.ai.example.com\n"
    assert outputs[3] == "Chat\n"
    resolved_status = json.loads(outputs[4])
    assert resolved_status["deviceClass"], resolved_status
    assert resolved_status["acceleratorProductName"], resolved_status
    conditions = dict(line.split("=", 1) for line in outputs[5].splitlines())
    for type_ in ("ClassResolved", "ModelResolved", "Planned", "WorkloadReady", "Ready"):
        assert conditions[type_].startswith("True "), outputs[5]
    assert conditions["Ready"] == "True ProbeSucceeded", outputs[5]

    # "Call the endpoint": URL, SECRET and TOKEN as the page reads them; the curls against the
    # stand-in runtime that plays the pods behind the URL.
    lines = page_commands("Call the endpoint")
    url = ex.kubectl(*shlex.split(lines[0].split("$(", 1)[1].rstrip(")"))[1:])
    assert url == "https://support-llm.support.ai.example.com"
    secret = ex.kubectl(*shlex.split(lines[1].split("$(", 1)[1].rstrip(")"))[1:])
    assert secret == "support-llm-auth"
    kubectl_part = lines[2].split("$(", 1)[1].split("|", 1)[0].replace('"$SECRET"', secret)
    token = base64.b64decode(ex.kubectl(*shlex.split(kubectl_part)[1:])).decode()
    assert token
    runtime = ex.runtime_url("support", "support-llm")
    curls = [shlex.split(line) for line in lines if line.startswith("curl")]
    assert [c[2] for c in curls] == ["$URL/v1/models", "$URL/v1/chat/completions"]
    status, models = call(curls[0][2].replace("$URL", runtime), token)
    assert status == 200, models
    assert [m["id"] for m in models["data"]] == [LARGE_CHAT]
    body = json.loads(curls[1][curls[1].index("--json") + 1])
    assert body["model"] == LARGE_CHAT
    status, completion = call(curls[1][2].replace("$URL", runtime), token, body)
    assert status == 200, completion
    assert completion["object"] == "chat.completion"
    assert completion["model"] == LARGE_CHAT
    assert completion["choices"][0]["message"]["role"] == "assistant"
    # The token is what opens it.
    assert call(f"{runtime}/v1/models")[0] == 401

    # The bundled class's exposure: External, HTTPS through cert-manager's issuer selfsigned.
    ingress = NetworkingV1Api(ex.api).read_namespaced_ingress("support-llm", "support")
    assert ingress.metadata.annotations["cert-manager.io/cluster-issuer"] == "selfsigned"
    assert [r.host for r in ingress.spec.rules] == ["support-llm.support.ai.example.com"]

    # The gated order serves the repository it names; the catalog order the catalog's servedName.
    for name, served, scope in (
        ("llama-chat", "meta-llama/Llama-3.1-8B", None),
        ("catalog-chat", "Qwen/Qwen2.5-7B-Instruct-AWQ", "Cluster"),
    ):
        status_now = ex.status("support", name)
        assert status_now["model"]["endpointType"] == "Chat", name
        assert (status_now.get("constraints") or {}).get("modelScope") == scope, status_now
        order_token = base64.b64decode(
            ex.core.read_namespaced_secret(status_now["authSecretName"], "support").data["token"]
        ).decode()
        code, listed = call(f"{ex.runtime_url('support', name)}/v1/models", order_token)
        assert code == 200, listed
        assert [m["id"] for m in listed["data"]] == [served], name
    # The model download of the gated order reads the Secret the order names.
    sts = ex.stand.apps.read_namespaced_stateful_set("llama-chat", "support")
    refs = json.dumps(ex.api.sanitize_for_serialization(sts.spec.template.spec))
    assert '"name": "hf-token"' in refs, "the gated order's workload does not read its Secret"


# ------------------------------------------------------------------------------ the page's classes


async def test_the_example_classes_do_what_their_sections_say(examples: Examples) -> None:
    ex = examples
    started = time.monotonic()

    def classes_ready() -> bool:
        return all((ex.class_ready(c) or ("",))[0] == "True" for c in EXAMPLE_CLASSES.values())

    await until(
        classes_ready,
        timeout=60,
        interval=0.5,
        in_thread=True,
        what=lambda: f"the example classes Ready, now {[ex.class_ready(c) for c in EXAMPLE_CLASSES.values()]}",
    )
    # cert-manager is not installed here: the issuer could not be checked, and the message says so.
    assert "letsencrypt" in (ex.class_ready("llm-chat-external") or ("", "", ""))[2]

    # The refusals first (they plan nothing), then the orders that serve one at a time: the stand
    # plans in-process, with no bookings (docs/planner.md, "Where"), so orders planned in the same
    # instant could be put on one device before either's claim is allocated.
    serving = ("strict-small", "internal-chat", "external-chat", "embed-e5")
    for name in CLASS_ORDERS:
        if name not in serving:
            ex.kubectl("apply", "-f", "-", input=yaml.safe_dump(order_body(name)))
    for name in serving:
        ex.kubectl("apply", "-f", "-", input=yaml.safe_dump(order_body(name)))
        await ex.until_scheduled(CLASS_ORDERS[name][0], name)

    # Refused, with the reasons the guides document.
    await ex.until_phase("analytics", "internal-elsewhere", "Pending", "NamespaceNotAllowed")
    await ex.until_phase("support", "strict-large", "Pending", "ParameterCountNotAllowed")
    await ex.until_phase("analytics", "embed-chat-model", "Pending", "EndpointTypePolicyConflict")
    for namespace, name, condition in (
        ("analytics", "internal-elsewhere", "ClassResolved"),
        ("support", "strict-large", "ModelResolved"),
        ("analytics", "embed-chat-model", "ModelResolved"),
    ):
        assert ex.conditions(namespace, name)[condition]["status"] == "False", ex.describe(namespace, name)
        assert ex.stand.apps.list_namespaced_stateful_set(namespace, field_selector=f"metadata.name={name}").items == []

    for name in serving:
        await ex.until_phase(CLASS_ORDERS[name][0], name, "Ready", None, timeout=120)
    print(f"\nthe example classes' orders settled after {time.monotonic() - started:.1f}s")
    autoscalers = {h.metadata.name for ns in NAMESPACES for h in _hpas(ex, ns)}
    ingresses = NetworkingV1Api(ex.api)

    # llm-internal: no ingress, no certificate, no token; one replica, a whole accelerator.
    internal = ex.status("support", "internal-chat")
    assert internal["endpoint"] == {"type": "ClusterLocal", "url": "http://internal-chat.support.svc"}
    assert "authSecretName" not in internal
    assert ingresses.list_namespaced_ingress("support", field_selector="metadata.name=internal-chat").items == []
    assert "internal-chat" not in autoscalers
    assert (internal["constraints"]["minReplicas"], internal["constraints"]["maxReplicas"]) == (1, 1)
    assert (internal["resolved"]["placementMode"], internal["resolved"]["sharePercent"]) == ("WholeDevice", 100)
    assert ex.stand.apps.read_namespaced_stateful_set("internal-chat", "support").spec.replicas == 1
    # "On a class with authentication: None there is no Secret and no Authorization header."
    code, listed = call(f"{ex.runtime_url('support', 'internal-chat')}/v1/models")
    assert code == 200, listed
    assert [m["id"] for m in listed["data"]] == [SMALL_CHAT]

    # llm-chat-external: the Ingress, its host and TLS through the issuer the class names; a token;
    # an autoscaler 1..4.
    external = ex.status("analytics", "external-chat")
    host = "external-chat.analytics.ai.example.com"
    assert external["endpoint"] == {"type": "External", "url": f"https://{host}"}
    assert external["authSecretName"] == "external-chat-auth"
    ingress = ingresses.read_namespaced_ingress("external-chat", "analytics")
    assert ingress.metadata.annotations["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert [(t.hosts, t.secret_name) for t in ingress.spec.tls] == [([host], "external-chat-tls")]
    ((rule_host, paths),) = [(r.host, r.http.paths) for r in ingress.spec.rules]
    assert rule_host == host
    assert [(p.path, p.path_type, p.backend.service.name) for p in paths] == [("/v1", "Prefix", "external-chat")]
    assert "external-chat" in autoscalers
    assert (external["constraints"]["minReplicas"], external["constraints"]["maxReplicas"]) == (1, 4)
    token = base64.b64decode(ex.core.read_namespaced_secret("external-chat-auth", "analytics").data["token"]).decode()
    runtime = ex.runtime_url("analytics", "external-chat")
    assert call(f"{runtime}/v1/models")[0] == 401
    code, completion = call(
        f"{runtime}/v1/chat/completions", token, {"model": SMALL_CHAT, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert code == 200, completion
    assert completion["choices"][0]["message"]["content"]

    # llm-strict: the one device class it names, the priority class it names.
    strict = ex.status("support", "strict-small")
    assert strict["resolved"]["deviceClass"] == "nvidia-t4-mps-physical"
    assert strict["constraints"]["priorityClassName"] == "inference-normal"
    sts = ex.stand.apps.read_namespaced_stateful_set("strict-small", "support")
    assert sts.spec.template.spec.priority_class_name == "inference-normal"
    refusal = ex.conditions("support", "strict-large")["ModelResolved"]["message"]
    assert "1B" in refusal, refusal

    # embeddings-only: the one contract; a chat model is refused rather than served as chat.
    e5 = ex.status("analytics", "embed-e5")
    assert e5["model"]["endpointType"] == "Embeddings"
    code, embedded = call(
        f"{ex.runtime_url('analytics', 'embed-e5')}/v1/embeddings",
        body={"model": "intfloat/multilingual-e5-large", "input": "ping"},
    )
    assert code == 200, embedded
    assert embedded["data"][0]["embedding"]


def _hpas(ex: Examples, namespace: str) -> list[Any]:
    return list(AutoscalingV2Api(ex.api).list_namespaced_horizontal_pod_autoscaler(namespace).items)
