"""The worker's ServiceAccount against the real API server, with the chart installed.

* Its least-privilege ClusterRole suffices: every step of an order (the real activities, read,
  finalizer, apply, re-apply, prune, status, event, finalize) runs with its own token.
* The worker guard (a ValidatingAdmissionPolicy) refuses what RBAC cannot: a write into a protected
  namespace, and any change to an object the worker did not make (a user's Secret). Its reads are
  RBAC's: a Secret by name in any namespace (docs/admin-guide.md says why), never a list of them —
  the prune above reads the Secrets an order may own by name.

Writes meant to be refused are dry runs: admission judges them, nothing is stored if it does not.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import config as kube_config
from kubernetes.client import (
    ApiClient,
    AuthenticationV1TokenRequest,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
    V1TokenRequestSpec,
)

from activities.builders.common import LABEL_MANAGED_BY, MANAGED_BY
from activities.order import OrderActivities
from devstack.cluster.launcher import LocalCluster
from inference_api.payloads import ApplyInput, ModelResolution, OrderEvent, OrderRead, OrderRef, StatusUpdate
from inference_api.reasons import EventReason
from inference_api.settings import ModuleSettings
from inference_api.types import (
    CLASSES,
    GROUP,
    ORDERS,
    VERSION,
    EndpointType,
    InferenceService,
    InferenceServiceClass,
    Phase,
)
from tests import factories as f
from tests.chart.helm import NAMESPACE as MODULE_NAMESPACE
from tests.chart.helm import Helm
from tests.polling import wait_until
from tests.security.impersonation import STATEFULSET_CONTROLLER, api_status, impersonating

pytestmark = pytest.mark.cluster

MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEVICE_CLASS = "nvidia-h100-mps-mig"
DRY = "All"


@pytest.fixture(scope="module")
def worker_api(local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm) -> Iterator[ApiClient]:
    """A client of the chart's worker ServiceAccount (its own token, for the API server)."""
    with helm.installed(local_cluster):
        issued = CoreV1Api(kube_admin).create_namespaced_service_account_token(
            "ai-inference-worker",
            MODULE_NAMESPACE,
            AuthenticationV1TokenRequest(spec=V1TokenRequestSpec(audiences=[], expiration_seconds=600)),
        )
        configuration = Configuration()
        kube_config.load_kube_config(
            config_file=str(local_cluster.kubeconfig("admin")), client_configuration=configuration
        )
        configuration.refresh_api_key_hook = None  # or the kubeconfig's token comes back
        configuration.api_key = {"BearerToken": f"Bearer {issued.status.token}"}
        with ApiClient(configuration) as api:
            yield api


def _class(name: str, cls: Any) -> dict[str, Any]:
    body: dict[str, Any] = cls.model_dump(mode="json", exclude_none=True)
    body["metadata"] = {"name": name}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServiceClass", **body}


def test_the_workers_role_suffices_for_every_step_of_an_order(
    worker_api: ApiClient, kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    namespace = make_namespace("worker-role", users=())
    admin = CustomObjectsApi(kube_admin)
    external, internal = (f"worker-role-{kind}-{uuid.uuid4().hex[:6]}" for kind in ("external", "internal"))
    admin.create_cluster_custom_object(GROUP, VERSION, CLASSES, _class(external, f.external_token_certmanager()))
    admin.create_cluster_custom_object(GROUP, VERSION, CLASSES, _class(internal, f.cluster_local_none()))
    try:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": "steady", "namespace": namespace},
            "spec": {"inferenceServiceClassName": external, "model": {"src": "HuggingFace", "ref": {"name": MODEL}}},
        }
        order = InferenceService.model_validate(
            admin.create_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, body)
        )
        assert order.metadata.uid
        ref = OrderRef(namespace=namespace, name="steady", uid=order.metadata.uid)

        def no_planner(_: Any) -> Any:
            raise AssertionError("not planned here")

        worker = OrderActivities(worker_api, ModuleSettings(), planner=no_planner)
        snapshot = worker.read_order(OrderRead(**ref.model_dump()))
        assert snapshot.order is not None
        assert snapshot.cls is not None
        worker.ensure_finalizer(ref)
        request = ApplyInput(
            ref=ref,
            order=snapshot.order,
            cls=snapshot.cls,
            plan=f.plan(share=50, device_class=DEVICE_CLASS),
            resolution=ModelResolution(servedName=MODEL, source=MODEL),
            endpointType=EndpointType.CHAT,
        )
        assert worker.apply_request(request).authSecretName == "steady-auth"
        worker.apply_request(request)  # a re-apply patches what stands
        worker.publish_status(StatusUpdate(ref=ref, phase=Phase.PENDING, reason="Applying"))
        # One of the module's own Event reasons: the worker records no other (activities/trusted_status.py).
        worker.record_event(OrderEvent(ref=ref, reason=EventReason.SETTLED_REGION_KEPT, message="every step ran"))
        recorded = CoreV1Api(kube_admin).list_namespaced_event(
            namespace, field_selector=f"involvedObject.name=steady,reason={EventReason.SETTLED_REGION_KEPT}"
        )
        assert [e.message for e in recorded.items] == ["every step ran"]
        # The class turns ClusterLocal without a token: the Ingress and the Secret are pruned.
        local = InferenceServiceClass.model_validate(admin.get_cluster_custom_object(GROUP, VERSION, CLASSES, internal))
        worker.apply_request(request.model_copy(update={"cls": local}))
        core = CoreV1Api(kube_admin)
        assert api_status(lambda: core.read_namespaced_secret("steady-auth", namespace))[0] == 404
        # A finalize of an order the API server does not delete changes nothing; once it is deleted, the
        # worker's role suffices to take its finalizer off (and the order goes).
        worker.finalize_order(ref)
        stored = admin.get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "steady")
        assert stored["status"]["phase"] == "Pending"
        assert stored["metadata"].get("finalizers")
        admin.delete_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "steady")
        worker.finalize_order(ref)
        assert (
            api_status(lambda: admin.get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "steady"))[0]
            == 404
        )
    finally:
        for name in (external, internal):
            admin.delete_cluster_custom_object(GROUP, VERSION, CLASSES, name)


def test_the_worker_guard_refuses_what_rbac_cannot(
    worker_api: ApiClient, kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    namespace = make_namespace("worker-guard", users=())
    worker, admin = CoreV1Api(worker_api), CoreV1Api(kube_admin)

    def secret(name: str, labelled: bool) -> dict[str, Any]:
        labels = {LABEL_MANAGED_BY: MANAGED_BY} if labelled else {}
        return {"metadata": {"name": name, "labels": labels}, "stringData": {"token": "hf_x"}}

    # The API server learns of the policy through an informer: a moment after the install.
    status, body = wait_until(
        lambda: (
            r
            if (
                r := api_status(
                    lambda: worker.create_namespaced_secret("kube-system", secret("guarded", True), dry_run=DRY)
                )
            )[0]
            == 403
            else None
        ),
        timeout=30,
        what="the worker guard to refuse a write into kube-system",
    )
    assert "may not write into namespace kube-system" in body

    # An object it did not make, in an order's namespace: readable (RBAC), not writable (the guard).
    admin.create_namespaced_secret(namespace, secret("hf-token", False))
    assert api_status(lambda: worker.read_namespaced_secret("hf-token", namespace))[0] == 200
    assert api_status(lambda: worker.list_namespaced_secret(namespace))[0] == 403
    patch = {"metadata": {"labels": {LABEL_MANAGED_BY: MANAGED_BY}}}
    for what, call in {
        "patch": lambda: worker.patch_namespaced_secret("hf-token", namespace, patch, dry_run=DRY),
        "delete": lambda: worker.delete_namespaced_secret("hf-token", namespace, dry_run=DRY),
        "create unlabelled": lambda: worker.create_namespaced_secret(namespace, secret("x", False), dry_run=DRY),
    }.items():
        status, body = api_status(call)
        assert status == 403, (what, status, body)
        assert "managed-by=ai-inference" in body, (what, status, body)

    # What orders own stays the worker's to write; and the guard is the worker's alone.
    assert api_status(lambda: worker.create_namespaced_secret(namespace, secret("mine", True), dry_run=DRY))[0] == 200
    assert (
        api_status(lambda: admin.create_namespaced_secret("kube-system", secret("theirs", False), dry_run=DRY))[0]
        == 200
    )


@pytest.fixture(scope="module")
def watcher_api(worker_api: ApiClient, local_cluster: LocalCluster, kube_admin: ApiClient) -> Iterator[ApiClient]:
    """A client of the chart's watcher ServiceAccount (the chart installed by ``worker_api``)."""
    issued = CoreV1Api(kube_admin).create_namespaced_service_account_token(
        "ai-inference-watcher",
        MODULE_NAMESPACE,
        AuthenticationV1TokenRequest(spec=V1TokenRequestSpec(audiences=[], expiration_seconds=600)),
    )
    configuration = Configuration()
    kube_config.load_kube_config(config_file=str(local_cluster.kubeconfig("admin")), client_configuration=configuration)
    configuration.refresh_api_key_hook = None
    configuration.api_key = {"BearerToken": f"Bearer {issued.status.token}"}
    with ApiClient(configuration) as api:
        yield api


def test_the_watcher_may_force_delete_only_the_modules_pods(
    watcher_api: ApiClient, kube_admin: ApiClient, local_cluster: LocalCluster, make_namespace: Callable[..., str]
) -> None:
    """The observer's force delete of an order's pod on a lost node (observer.forceDeletePodsOnLostNodes)
    and its Event: granted by its ClusterRole; held by the watcher guard to the module's pods outside
    the protected namespaces. Dry runs: admission and RBAC judge them, nothing is deleted."""
    namespace = make_namespace("watcher-guard", users=())
    watcher, admin = CoreV1Api(watcher_api), CoreV1Api(kube_admin)

    def pod(name: str, labelled: bool) -> dict[str, Any]:
        labels = {LABEL_MANAGED_BY: MANAGED_BY} if labelled else {}
        return {
            "metadata": {"name": name, "labels": labels},
            # No node will take it: it stays Pending, nothing runs.
            "spec": {"nodeSelector": {"watcher-guard": "nowhere"}, "containers": [{"name": "c", "image": "x"}]},
        }

    def gated(body: dict[str, Any]) -> dict[str, Any]:
        body["spec"]["schedulingGates"] = [{"name": "ai.deckhouse.io/replica-placement"}]
        return body

    def force_delete(name: str, where: str) -> tuple[int, str]:
        return api_status(lambda: watcher.delete_namespaced_pod(name, where, grace_period_seconds=0, dry_run=DRY))

    # The module's marks are written by the StatefulSet controller (the marks guard refuses them to
    # anyone else, the admin included): the labelled pods are made as it.
    with impersonating(local_cluster, STATEFULSET_CONTROLLER) as controller:
        CoreV1Api(controller).create_namespaced_pod(namespace, pod("replica-0", True))
        CoreV1Api(controller).create_namespaced_pod(namespace, gated(pod("gated-0", True)))
        guarded = f"guarded-{uuid.uuid4().hex[:6]}"
        CoreV1Api(controller).create_namespaced_pod("kube-system", pod(guarded, True))
    admin.create_namespaced_pod(namespace, pod("users-own", False))
    admin.create_namespaced_pod(namespace, gated(pod("users-gated", False)))
    try:
        status, body = wait_until(
            lambda: r if (r := force_delete("users-own", namespace))[0] == 403 else None,
            timeout=30,
            what="the watcher guard to refuse a delete of a pod the module did not make",
        )
        assert "deletes only pods labelled app.kubernetes.io/managed-by=ai-inference" in body
        # The replica placer's patch (worker/observer/replica_placer.py): the gate removed and the placement
        # recorded, on the module's gated pod; on a user's pod, refused; any other change, refused.
        ungate = [
            {"op": "replace", "path": "/spec/schedulingGates", "value": []},
            {"op": "add", "path": "/metadata/annotations", "value": {"ai.deckhouse.io/replica-placement": "{}"}},
        ]

        def placer_patch(name: str, body: Any) -> tuple[int, str]:
            return api_status(lambda: watcher.patch_namespaced_pod(name, namespace, body, dry_run=DRY))

        assert placer_patch("gated-0", ungate) == (200, placer_patch("gated-0", ungate)[1])
        status, body = placer_patch("users-gated", ungate)
        assert status == 403, body
        assert "writes only pods labelled app.kubernetes.io/managed-by=ai-inference" in body
        relabel = [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]
        status, body = placer_patch("gated-0", relabel)
        assert status == 403, body
        assert "only removes the replica-placement gate" in body
        add_gate = [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "another"}}]
        assert placer_patch("gated-0", add_gate)[0] == 422  # the API server adds no gate after creation
        condition = {"status": {"conditions": [{"type": "ai.deckhouse.io/ReplicaPlaced", "status": "False"}]}}
        assert (
            api_status(lambda: watcher.patch_namespaced_pod_status("gated-0", namespace, condition, dry_run=DRY))[0]
            == 200
        )
        assert (
            api_status(lambda: watcher.patch_namespaced_pod_status("users-gated", namespace, condition, dry_run=DRY))[0]
            == 403
        )
        status, body = force_delete(guarded, "kube-system")
        assert status == 403, body
        assert "may not delete pods in namespace kube-system" in body
        assert force_delete("replica-0", namespace)[0] == 200
        # Its other writes are still none: no pod created or changed.
        assert api_status(lambda: watcher.create_namespaced_pod(namespace, pod("x", True), dry_run=DRY))[0] == 403
        patch = {"metadata": {"labels": {"x": "y"}}}
        assert api_status(lambda: watcher.patch_namespaced_pod("replica-0", namespace, patch, dry_run=DRY))[0] == 403
        image = {"spec": {"containers": [{"name": "c", "image": "y"}]}}
        assert api_status(lambda: watcher.patch_namespaced_pod("replica-0", namespace, image, dry_run=DRY))[0] == 403
        event = {
            "metadata": {"generateName": "replica-0."},
            "involvedObject": {"kind": "Pod", "name": "replica-0", "namespace": namespace},
            "reason": "PodForceDeleted",
            "message": "dry run",
            "type": "Warning",
        }
        assert api_status(lambda: watcher.create_namespaced_event(namespace, event, dry_run=DRY))[0] in (200, 201)
    finally:
        admin.delete_namespaced_pod(guarded, "kube-system", grace_period_seconds=0)
