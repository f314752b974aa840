"""The inventory adapter, the planner client and the planner service against the real API server.

The local cluster's kube-scheduler allocates real ResourceClaims against the simulated ResourceSlices;
the service serves HTTPS and authorizes its callers with real TokenReviews (for the planner's
audience) and SubjectAccessReviews; callers send ServiceAccount tokens from TokenRequests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes.client import (
    ApiClient,
    AuthenticationV1TokenRequest,
    Configuration,
    CoreV1Api,
    RbacAuthorizationV1Api,
    V1TokenRequestSpec,
)
from kubernetes.client.rest import ApiException

from activities.builders.claim import memory_request_mib
from activities.inventory import read_inventory
from activities.planner_client import (
    HttpPlanner,
    make_planner,
    plan_in_process,
    server_verification,
    token_audiences,
)
from devstack.cluster.inventory import load_inventory
from devstack.cluster.launcher import LocalCluster
from inference_api.plan import LaunchPlan, LaunchPlanRequest, OrderFacts, PlanOutcome
from inference_api.reasons import Reason
from inference_api.settings import PLANNER_AUDIENCE, ModuleSettings
from inference_api.types import GROUP, VERSION, AcceleratorPolicy, PlacementType, SharingMode
from planner.cel_selectors import select_devices
from planner.inventory import DeviceAllocation
from planner.quantity import Quantity
from planner.service import KubernetesAccessReviewer, create_app
from tests.chart.helm import Helm
from tests.cluster.helpers import create_order, dynamic, get, kwok_pod, pod_running
from tests.planner_service import running_service
from tests.polling import wait_until as eventually
from tests.security.leaks import assert_clean, needles
from tests.security.tls import Material
from worker.observer.inventory import InventoryInformers

pytestmark = pytest.mark.cluster

RESOURCE = "resource.k8s.io/v1"
D = "gpu.deckhouse.io"
ORDER_LABEL = "ai.deckhouse.io/inference-service"
PATH = "/api/v1/launch-plan"

DEFAULT_LLM = AcceleratorPolicy(
    allowedSharingModes=[SharingMode.SHARED, SharingMode.DEDICATED],
    allowedPlacementTypes=[PlacementType.WHOLE_DEVICE, PlacementType.PARTITION],
    maxAcceleratorCount=1,
)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return Material.make(tmp_path_factory.mktemp("planner-tls"))


@pytest.fixture(scope="module")
def service_url(kube_admin: ApiClient, tls: Material) -> Iterator[str]:
    """The service in this process over HTTPS, reading the inventory and reviewing callers as the
    cluster admin."""
    app = create_app(lambda: read_inventory(kube_admin), KubernetesAccessReviewer(kube_admin))
    with running_service(app, tls=(tls.server.cert, tls.server.key)) as url:
        yield url


@pytest.fixture(scope="module")
def caller_token(local_cluster: LocalCluster, kube_admin: ApiClient) -> str:
    """A planner-audience token of a ServiceAccount allowed the planner subresource (as the chart
    allows the worker)."""
    namespace = local_cluster.create_namespace(f"planner-callers-{uuid.uuid4().hex[:6]}", users=())
    role = f"planner-caller-{namespace}"
    local_cluster.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": ["ai.deckhouse.io"],
                        "resources": ["inferenceserviceclasses/planner"],
                        "verbs": ["create"],
                    }
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "caller", "namespace": namespace}],
            },
        ]
    )
    return _service_account_token(kube_admin, namespace, "caller")


@pytest.fixture
def http_planner(service_url: str, tls: Material, caller_token: str) -> Iterator[HttpPlanner]:
    verify = server_verification(str(tls.server.ca))
    planner = HttpPlanner(service_url, lambda: caller_token, 30, ModuleSettings(), verify=verify)
    eventually(lambda: planner.request(REQUESTS[-1]), timeout=30, what="the caller's ClusterRoleBinding to allow it")
    yield planner
    planner.close()


def claim_template(name: str, namespace: str, device_class: str, **exactly: Any) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}]}
            }
        },
    }


def pinned(expression: str) -> dict[str, Any]:
    return {"selectors": [{"cel": {"expression": expression}}]}


def allocated(kube_admin: ApiClient, pod: str, namespace: str, claim_name: str | None = None) -> dict[str, Any]:
    """The single allocation result of the pod's claim (made from a template unless named) once it runs."""
    dyn = dynamic(kube_admin)
    running = eventually(partial(pod_running, dyn, pod, namespace), timeout=90, what=f"{pod} Running")
    claim_name = claim_name or running["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = get(dyn, RESOURCE, "ResourceClaim", claim_name, namespace)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    result_: dict[str, Any] = result
    return result_


# ------------------------------------------------------------------------------ inventory


def test_read_inventory_sees_every_simulated_device_and_class(kube_admin: ApiClient) -> None:
    inv = load_inventory()
    snap = read_inventory(kube_admin)
    assert {(d.node, d.name) for d in snap.devices} == {(d.node, d.name) for d in inv.devices}
    by_key = {(d.node, d.name): d for d in snap.devices}
    for sim in inv.devices:
        d = by_key[(sim.node, sim.name)]
        assert (d.productName, d.hardwareFamily, d.memoryMiB) == (
            sim.product_name,
            sim.hardware_family,
            sim.memory_gib * 1024,
        )
        assert d.placement == PlacementType(sim.placement)
        assert d.migProfile == sim.mig_profile
        assert d.allowMultipleAllocations == sim.shareable
        assert d.attributes == sim.attributes
    classes = {c.name: c for c in snap.deviceClasses}
    for dc in inv.device_classes:
        assert classes[dc.name].selectors == [dc.cel]
        chosen = select_devices(classes[dc.name], snap.devices)
        assert chosen.decidable, chosen.error
        assert {(d.node, d.name) for d in chosen.devices} == {(d.node, d.name) for d in inv.devices_of_class(dc.name)}


def order_owner(api: ApiClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """An order made for the pod to belong to: the planner believes an order's label on a pod only along
    its controller ownerReference chain to that order (issue 33)."""
    order = create_order(api, namespace, name, model="a/b")
    return [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "name": name,
            "uid": order["metadata"]["uid"],
            "controller": True,
        }
    ]


def test_read_inventory_sees_the_allocations_the_scheduler_made(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    """A pod of an order (label on the pod, not on its claim) holding 20Gi of a shared H100, and a plain
    pod holding a dedicated H100 through a claim of its own."""
    local_cluster.apply(
        [
            claim_template(
                "shared",
                namespace,
                "nvidia-hopper-s3-shared",
                capacity={"requests": {f"{D}/memory": "20Gi"}},
                **pinned(f'device.attributes["{D}"].index == 1'),
            ),
            {
                **kwok_pod(
                    "llm-x-0", namespace, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "shared"}]
                ),
                "metadata": {
                    "name": "llm-x-0",
                    "namespace": namespace,
                    "labels": {ORDER_LABEL: "llm-x"},
                    "ownerReferences": order_owner(kube_admin, namespace, "llm-x"),
                },
            },
            {
                "apiVersion": RESOURCE,
                "kind": "ResourceClaim",
                "metadata": {"name": "plain", "namespace": namespace},
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "nvidia-h100-dedicated"}}]}
                },
            },
            kwok_pod("worker", namespace, resourceClaims=[{"name": "gpu", "resourceClaimName": "plain"}]),
        ]
    )
    shared = allocated(kube_admin, "llm-x-0", namespace)
    dedicated = allocated(kube_admin, "worker", namespace, "plain")
    assert (shared["pool"], shared["device"]) == ("gpu-h100-0", "gpu-1")

    snap = read_inventory(kube_admin)
    by_key = {(d.pool, d.name): d for d in snap.devices}
    held = by_key[(shared["pool"], shared["device"])].allocations
    assert DeviceAllocation(holder=f"{namespace}/llm-x", sharePercent=0, memoryMiB=20 * 1024) in held
    held = by_key[(dedicated["pool"], dedicated["device"])].allocations
    assert held == [DeviceAllocation(holder=f"{namespace}/plain", sharePercent=100)]


# ------------------------------------------------------------------ in-process == HTTP


REQUESTS = [
    LaunchPlanRequest(facts=OrderFacts(modelName="Qwen/Qwen2.5-32B-Instruct-AWQ"), acceleratorPolicy=DEFAULT_LLM),
    # 22 GiB on 16 GiB T4s: tensor parallel over two cards of one node.
    LaunchPlanRequest(
        facts=OrderFacts(modelName="Qwen/Qwen2.5-7B-Instruct"),
        acceleratorPolicy=AcceleratorPolicy(
            allowedDeviceClasses=["nvidia-t4-mps-physical"],
            allowedSharingModes=[SharingMode.SHARED],
            maxAcceleratorCount=2,
        ),
        holder="ns/t4",
    ),
    LaunchPlanRequest(facts=OrderFacts(modelName="acme/giant-405B"), acceleratorPolicy=DEFAULT_LLM),
    LaunchPlanRequest(
        facts=OrderFacts(modelName="acme/x-7B"),
        acceleratorPolicy=AcceleratorPolicy(allowedDeviceClasses=["no-such-class"]),
    ),
    LaunchPlanRequest(facts=OrderFacts(modelName="acme/llm-7B")),  # no policy: one whole, dedicated device
]


def test_in_process_and_http_give_the_same_outcome(kube_admin: ApiClient, http_planner: HttpPlanner) -> None:
    outcomes: list[PlanOutcome] = []
    for request in REQUESTS:
        # Namespaces of earlier tests are being deleted in the background: compare across a quiet moment.
        for _ in range(10):
            before = plan_in_process(request, kube_admin)
            remote = http_planner.request(request)
            after = plan_in_process(request, kube_admin)
            if before == after:
                break
        assert remote == before
        outcomes.append(remote)
    reasons = [o.refusal.reason if o.refusal else None for o in outcomes]
    assert reasons == [
        None,
        None,
        Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
        Reason.PLACEMENT_UNDECIDABLE,
        None,
    ]
    t4 = outcomes[1].plan
    assert t4 is not None
    assert t4.deviceCount == 2
    assert "--tensor-parallel-size" in t4.recipe.args
    dedicated = outcomes[4].plan
    assert dedicated is not None
    assert dedicated.sharingMode == SharingMode.DEDICATED
    assert dedicated.sharePercent == 100


# ------------------------------------------------------------------------- authorization


def _post(url: str, token: str | None, ca: Path) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    verify = server_verification(str(ca))
    return httpx.post(url + PATH, content=REQUESTS[0].model_dump_json(), headers=headers, timeout=30, verify=verify)


@pytest.fixture
def cluster_roles(kube_admin: ApiClient) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Creates cluster-scoped RBAC objects and deletes them afterwards."""
    rbac = RbacAuthorizationV1Api(kube_admin)
    made: list[tuple[str, str]] = []

    def create(obj: dict[str, Any]) -> None:
        if obj["kind"] == "ClusterRole":
            rbac.create_cluster_role(obj)
        else:
            rbac.create_cluster_role_binding(obj)
        made.append((obj["kind"], obj["metadata"]["name"]))

    yield create
    for kind, name in reversed(made):
        try:
            if kind == "ClusterRole":
                rbac.delete_cluster_role(name)
            else:
                rbac.delete_cluster_role_binding(name)
        except ApiException as err:
            if err.status != 404:
                raise


def _service_account_token(
    kube_admin: ApiClient, namespace: str, name: str, audiences: tuple[str, ...] = (PLANNER_AUDIENCE,)
) -> str:
    """A TokenRequest's token (the ServiceAccount is made first unless it exists); ``audiences=()``:
    the API server's own."""
    core = CoreV1Api(kube_admin)
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise
    spec = V1TokenRequestSpec(audiences=list(audiences), expiration_seconds=600)
    issued = core.create_namespaced_service_account_token(name, namespace, AuthenticationV1TokenRequest(spec=spec))
    token: str = issued.status.token
    return token


def test_callers_are_authorized_like_an_extension_api_server(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    service_url: str,
    tls: Material,
    namespace: str,
    cluster_roles: Callable[[dict[str, Any]], None],
) -> None:
    ca = tls.server.ca
    # Tokens not bound to the planner's audience are not accepted, whoever holds them: the cluster
    # admin's and people's (audience-agnostic static tokens), a ServiceAccount's token for the API server.
    api_server_token = _service_account_token(kube_admin, namespace, "caller", audiences=())
    for who, token in [
        *[(user, local_cluster.token(user)) for user in ("admin", "ns-user", "module-admin")],
        ("a token for the API server", api_server_token),
    ]:
        response = _post(service_url, token, ca)
        assert response.status_code == 401, who
        assert f'for audience "{PLANNER_AUDIENCE}"' in response.json()["message"]
        assert token not in response.text

    for missing in (None, "not-a-token"):
        response = _post(service_url, missing, ca)
        assert response.status_code == 401
        assert response.json()["error"] == "Unauthorized"

    # A ServiceAccount granted create on inferenceserviceclasses/planner (as the chart grants the worker).
    role = f"planner-caller-{namespace}"
    cluster_roles(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": ["ai.deckhouse.io"],
                    "resources": ["inferenceserviceclasses/planner"],
                    "verbs": ["create"],
                }
            ],
        }
    )
    cluster_roles(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "caller", "namespace": namespace}],
        }
    )
    granted = _service_account_token(kube_admin, namespace, "caller")
    other = _service_account_token(kube_admin, namespace, "bystander")
    response = eventually(
        lambda: r if (r := _post(service_url, granted, ca)).status_code == 200 else None,
        timeout=30,
        what="the granted ServiceAccount is allowed",
    )
    assert PlanOutcome.model_validate_json(response.content).plan is not None
    # Authenticated for the audience, but not allowed the subresource: 403, naming who.
    response = _post(service_url, other, ca)
    assert response.status_code == 403
    body = response.json()
    assert body["error"] == "Forbidden"
    assert (
        f'user "system:serviceaccount:{namespace}:bystander" may not create inferenceserviceclasses/planner'
        in (body["message"])
    )


def test_openapi_and_healthz_over_https(service_url: str, tls: Material) -> None:
    verify = server_verification(str(tls.server.ca))
    assert service_url.startswith("https://")
    assert httpx.get(service_url + "/healthz", verify=verify).text == "ok\n"
    response = httpx.get(service_url + "/openapi.json", verify=verify)
    assert response.status_code == 200
    document = response.json()
    assert PATH in document["paths"]
    assert document["paths"][PATH]["post"]["security"] == [{"kubernetesBearer": []}]
    # openapi-spec-validator is not a declared dev dependency yet (pyproject.toml is shared).
    pytest.importorskip("openapi_spec_validator").validate(document)


# -------------------------------------------------------------------- two half-card orders


def _plan_of(outcome: PlanOutcome) -> LaunchPlan:
    assert outcome.plan is not None, outcome.refusal
    return outcome.plan


def test_two_half_card_orders_land_on_the_same_card(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    http_planner: HttpPlanner,
    namespace: str,
) -> None:
    """Order A is planned and allocated for real (a pod with the claim template the builder writes);
    order B, planned next, goes to the card the scheduler gave A. A 58 % order no longer fits there."""
    pair = f"planner-pair-{uuid.uuid4().hex[:6]}"
    expression = " && ".join(
        [
            f'device.driver == "{D}"',
            f'device.attributes["{D}"].productName == "NVIDIA H100 80GB HBM3"',
            f'device.attributes["{D}"].placement == "WholeDevice"',
            f'device.attributes["{D}"].shareable == true',
            f'device.attributes["{D}"].index >= 2',
            f'device.attributes["{D}"].index <= 3',
        ]
    )
    dyn = dynamic(kube_admin)
    classes = dyn.resources.get(api_version=RESOURCE, kind="DeviceClass")
    body = {
        "apiVersion": RESOURCE,
        "kind": "DeviceClass",
        "metadata": {"name": pair},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }
    dyn.create(classes, body=body)
    try:
        policy = AcceleratorPolicy(
            allowedDeviceClasses=[pair],
            allowedSharingModes=[SharingMode.SHARED],
            allowedPlacementTypes=[PlacementType.WHOLE_DEVICE],
            maxAcceleratorCount=1,
        )

        def request(model: str, order: str, current: LaunchPlan | None = None) -> LaunchPlanRequest:
            return LaunchPlanRequest(
                facts=OrderFacts(modelName=model),
                acceleratorPolicy=policy,
                holder=f"{namespace}/{order}",
                className="half-cards",
                currentPlan=current,
            )

        a = _plan_of(http_planner.request(request("acme/llm-16B", "order-a")))
        assert (a.nodeName, a.sharingMode, a.sharePercent) == ("gpu-h100-0", SharingMode.SHARED, 46)
        assert a.deviceNames[0] in {"gpu-2", "gpu-3"}

        # What the order's ResourceClaimTemplate asks for (activities/builders/claim.py), claims labelled.
        template = claim_template(
            "order-a-claim",
            namespace,
            a.deviceClass,
            allocationMode="ExactCount",
            count=a.deviceCount,
            capacity={"requests": {f"{D}/memory": f"{memory_request_mib(a)}Mi"}},
        )
        template["spec"]["metadata"] = {"labels": {ORDER_LABEL: "order-a"}}
        pod = kwok_pod(
            "order-a-0", namespace, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "order-a-claim"}]
        )
        pod["metadata"]["labels"] = {ORDER_LABEL: "order-a"}
        local_cluster.apply([template, pod])
        result = allocated(kube_admin, "order-a-0", namespace)
        card = result["device"]
        assert Quantity.parse(result["consumedCapacity"][f"{D}/memory"]).mib() == a.memoryRequestMiB

        b = _plan_of(http_planner.request(request("acme/llm-16B", "order-b")))
        assert (b.nodeName, b.deviceNames, b.sharePercent) == ("gpu-h100-0", [card], 46)
        assert b.deviceNames == _plan_of(plan_in_process(request("acme/llm-16B", "order-b"), kube_admin)).deviceNames

        # A replan of A does not count its own claim against it, and keeps it where it is.
        again = _plan_of(http_planner.request(request("acme/llm-16B", "order-a", current=a)))
        assert again.deviceNames == [card]

        # 46 % + 58 % of the memory does not fit one card: a bigger order takes the other one.
        c = _plan_of(http_planner.request(request("acme/llm-20B", "order-c")))
        assert c.sharePercent == 58
        assert c.deviceNames != [card]
        assert c.deviceNames[0] in {"gpu-2", "gpu-3"}
    finally:
        dyn.delete(classes, name=pair)


# -------------------------------------------------------------------- the chart's identities


def _client_with_token(admin: ApiClient, token: str) -> ApiClient:
    source = admin.configuration
    configuration = Configuration()
    configuration.host = source.host
    configuration.ssl_ca_cert = source.ssl_ca_cert
    configuration.verify_ssl = source.verify_ssl
    configuration.api_key = {"BearerToken": f"Bearer {token}"}
    return ApiClient(configuration)


def test_the_charts_planner_and_worker_roles_suffice(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    namespace: str,
    tls: Material,
    helm: Helm,
    cluster_roles: Callable[[dict[str, Any]], None],
) -> None:
    """The service runs as a ServiceAccount holding the chart's d8:ai-inference:planner rules and is
    called by one holding d8:ai-inference:worker's: it reads the inventory (pods included, for holders),
    reviews its caller, and plans; a person is still refused."""
    from tests.chart.helm import find

    docs = helm.render()
    tokens: dict[str, str] = {}
    for component in ("planner", "worker"):
        role = f"{namespace}-{component}"
        rules = find(docs, "ClusterRole", f"d8:ai-inference:{component}")["rules"]
        cluster_roles(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": rules,
            }
        )
        cluster_roles(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": component, "namespace": namespace}],
            }
        )
        # The planner's token talks to the API server; the worker's to the planner (its audience).
        audiences = () if component == "planner" else (PLANNER_AUDIENCE,)
        tokens[component] = _service_account_token(kube_admin, namespace, component, audiences)

    # An order's replica whose claim carries no label: only its pod says whose it is.
    local_cluster.apply(
        [
            claim_template("tpl", namespace, "nvidia-t4-mps-physical", capacity={"requests": {f"{D}/memory": "4Gi"}}),
            {
                **kwok_pod("llm-t-0", namespace, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "tpl"}]),
                "metadata": {
                    "name": "llm-t-0",
                    "namespace": namespace,
                    "labels": {ORDER_LABEL: "llm-t"},
                    "ownerReferences": order_owner(kube_admin, namespace, "llm-t"),
                },
            },
        ]
    )
    result = allocated(kube_admin, "llm-t-0", namespace)

    with _client_with_token(kube_admin, tokens["planner"]) as planner_api:

        def holders() -> set[str] | None:
            snap = read_inventory(planner_api)
            device = next(d for d in snap.devices if (d.pool, d.name) == (result["pool"], result["device"]))
            found = {a.holder for a in device.allocations}
            return found if f"{namespace}/llm-t" in found else None

        eventually(holders, timeout=30, what="the planner's ServiceAccount sees the holder")
        # What `ai-inference planner` runs: informers on every kind, the nodes and all pods included.
        informers = InventoryInformers.for_cluster(planner_api).start()
        try:
            eventually(lambda: informers.synced, timeout=30, what="the planner's informers synced with its role")
            nodes = informers.snapshot().nodes
            assert nodes is not None
            assert {n.name for n in nodes} >= {result["pool"]}
        finally:
            informers.stop()
        app = create_app(lambda: read_inventory(planner_api), KubernetesAccessReviewer(planner_api))
        with running_service(app, tls=(tls.server.cert, tls.server.key)) as url:
            response = eventually(
                lambda: r if (r := _post(url, tokens["worker"], tls.server.ca)).status_code == 200 else None,
                timeout=30,
                what="the worker's ServiceAccount is allowed",
            )
            assert PlanOutcome.model_validate_json(response.content).plan is not None
            assert _post(url, local_cluster.token("ns-user"), tls.server.ca).status_code == 401


# ------------------------------------------------------------ the command, as the local stack runs it


def test_the_planner_command_serves_https_to_the_local_stacks_worker_token(
    local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm, tmp_path: Path
) -> None:
    """``ai-inference planner --tls-cert-file --tls-key-file`` as ``dev up`` starts it, called as the
    local stack's worker calls it: a TokenRequest of the chart's worker ServiceAccount for the
    planner's audience, the chart's worker role. Neither the token nor the serving key reaches its log."""
    from devstack.cluster.paths import REPO_ROOT
    from devstack.stack import WORKER_ROLE, DevStack, free_port

    stack = DevStack(tmp_path / "dev")
    served = stack.planner_tls()
    # The chart's worker role, as `dev up` installs it.
    local_cluster.apply(
        [d for d in helm.render() if d["kind"] == "ClusterRole" and d["metadata"]["name"] == WORKER_ROLE]
    )
    token_file = stack.issue_planner_token(local_cluster)
    token = token_file.read_text()
    assert token_audiences(token) == [PLANNER_AUDIENCE]
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"

    port = free_port()
    command = [sys.executable, "-m", "worker.cli", "planner", "--port", str(port)]
    command += ["--kubeconfig", str(local_cluster.kubeconfig("admin"))]
    command += ["--tls-cert-file", str(served.cert), "--tls-key-file", str(served.key)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_INFERENCE_")}
    log = tmp_path / "planner.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    try:
        settings = ModuleSettings(
            planner={"baseURL": f"https://127.0.0.1:{port}", "caFile": str(served.ca), "tokenFile": str(token_file)}
        )
        planner: Any = make_planner(settings, kube_admin)  # the HttpPlanner behind the PlanFunction
        outcome = eventually(
            lambda: planner.request(REQUESTS[0]), timeout=60, what="the planner command to plan for the worker's token"
        )
        assert outcome.plan is not None
        planner.close()
    finally:
        process.terminate()
        process.wait(15)
    text = log.read_text()
    assert "planner: planned" in text, text[-2000:]
    assert_clean(text, needles(tokens=[token], key_files=[served.key]), "the planner's log")
