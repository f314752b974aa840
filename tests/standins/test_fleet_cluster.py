"""The stand-in fleet against the real cluster: volume binding, the stale-verdict nudge, and what kwok
reports for a pod the fleet runs a real engine for.

The pods here name a scheduler that does not exist, so only the test writes their PodScheduled
condition: the stale state ("refused for an unbound volume", volume bound since) is set up
exactly instead of waiting for kube-scheduler to miss an event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from activities.builders.common import FETCHER_CONTAINER, LABEL_MANAGED_BY, MANAGED_BY, RUNTIME_CONTAINER
from activities.builders.endpoint_front import FRONT_CONTAINER
from devstack import tiny_model
from devstack.cluster.inventory import KWOK_ANNOTATION
from devstack.standins.fleet import StandInFleet
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

LABELS = {LABEL_MANAGED_BY: MANAGED_BY}
VOLUME_VERDICT = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
CAPACITY_VERDICT = "0/4 nodes are available: 4 cannot allocate all claims."


def make_claim(core: CoreV1Api, namespace: str, name: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    core.create_namespaced_persistent_volume_claim(namespace, body)


def make_refused_pod(core: CoreV1Api, namespace: str, name: str, claim: str, verdict: str) -> str:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
        "spec": {
            "schedulerName": "no-such-scheduler",
            "containers": [{"name": "main", "image": "registry.example/none:0"}],
            "volumes": [{"name": "model", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    created = core.create_namespaced_pod(namespace, body)
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": verdict}
    core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}})
    return str(created.metadata.uid)


def pod_uid(core: CoreV1Api, namespace: str, name: str) -> str | None:
    try:
        return str(core.read_namespaced_pod(name, namespace).metadata.uid)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def claim_bound(core: CoreV1Api, namespace: str, name: str) -> bool:
    return bool(core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound")


def test_a_pod_refused_for_a_volume_bound_since_is_made_again_and_no_other(
    kube_admin: ApiClient, make_namespace: Callable[..., str], request: pytest.FixtureRequest
) -> None:
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("fleet")
    fleet = StandInFleet(kube_admin, stale_verdict_seconds=0.5)
    request.addfinalizer(fleet.stop)
    for claim in ("model-stale-0", "model-full-0"):
        make_claim(core, namespace, claim)
    stale = make_refused_pod(core, namespace, "stale-0", "model-stale-0", VOLUME_VERDICT)
    full = make_refused_pod(core, namespace, "full-0", "model-full-0", CAPACITY_VERDICT)

    # The fleet binds the claims (the PV controller completes the binding).
    fleet.reconcile_once()
    wait_until(
        lambda: claim_bound(core, namespace, "model-stale-0") and claim_bound(core, namespace, "model-full-0"),
        timeout=30,
        what="claims bound",
    )
    # Seen once: not yet stale long enough.
    fleet.reconcile_once()
    assert pod_uid(core, namespace, "stale-0") == stale
    time.sleep(0.6)
    fleet.reconcile_once()

    wait_until(lambda: pod_uid(core, namespace, "stale-0") is None, timeout=30, what="stale pod deleted")
    # A pod refused for capacity is the planner's and the preemption's business, not the fleet's.
    assert pod_uid(core, namespace, "full-0") == full


def test_a_pod_whose_volume_is_not_bound_yet_is_left_alone(
    kube_admin: ApiClient, make_namespace: Callable[..., str], request: pytest.FixtureRequest
) -> None:
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("fleet-unbound")
    fleet = StandInFleet(kube_admin, stale_verdict_seconds=0)
    request.addfinalizer(fleet.stop)
    # No claim at all: nothing can bind, the verdict is still true.
    uid = make_refused_pod(core, namespace, "waiting-0", "model-waiting-0", VOLUME_VERDICT)
    fleet.reconcile_once()
    fleet.reconcile_once()
    assert pod_uid(core, namespace, "waiting-0") == uid


def make_bound_pod(
    core: CoreV1Api, namespace: str, name: str, repository: str, image: str = "registry.example/vllm:0"
) -> None:
    """A pod already bound to a kwok node, with the module's model fetcher naming ``repository`` and its
    two containers running ``image``."""
    nodes = core.list_node().items
    node = next(n.metadata.name for n in nodes if (n.metadata.annotations or {}).get(KWOK_ANNOTATION) == "fake")
    fetcher = {
        "name": FETCHER_CONTAINER,
        "image": "registry.example/fetcher:0",
        "env": [{"name": "MODEL_REPOSITORY", "value": repository}],
    }
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
        "spec": {
            "nodeName": node,
            "initContainers": [fetcher],
            "containers": [
                {"name": RUNTIME_CONTAINER, "image": image},
                {"name": FRONT_CONTAINER, "image": image},
            ],
        },
    }
    core.create_namespaced_pod(namespace, body)


def pod_state(core: CoreV1Api, namespace: str, name: str) -> tuple[str | None, str | None, list[bool]]:
    """(phase, the Ready condition's status, every container's ``ready``)."""
    status = core.read_namespaced_pod(name, namespace).status
    ready = next((c.status for c in status.conditions or [] if c.type == "Ready"), None)
    return status.phase, ready, [c.ready for c in status.container_statuses or []]


def kwok_started(core: CoreV1Api, namespace: str, ready: str, held: str) -> None:
    """Until kwok has made pod ``ready`` Running and Ready and started pod ``held``, then a few more of its
    turns: no fleet runs here, so nothing but kwok writes these pods, and ``held`` shows what kwok left."""
    wait_until(
        lambda: pod_state(core, namespace, ready) == ("Running", "True", [True, True]),
        timeout=30,
        what=lambda: f"kwok runs pod {ready}, Ready (now {pod_state(core, namespace, ready)})",
    )
    wait_until(
        lambda: pod_state(core, namespace, held)[0] == "Running",
        timeout=30,
        what=f"kwok starts pod {held}",
    )
    time.sleep(2)


def test_kwok_starts_a_real_engines_pod_but_leaves_its_readiness_to_the_engine(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    """kwok plays the node: a pod is Running and Ready at once. A pod the fleet runs a real engine for is
    Ready only when the engine answers (the fleet writes it), so kwok makes it Running, not Ready: else the
    StatefulSet and the EndpointSlices count a replica whose engine still loads (seen before the fix)."""
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("kwok-engine")
    make_bound_pod(core, namespace, "engine-0", tiny_model.REPOSITORY)
    make_bound_pod(core, namespace, "standin-0", "Qwen/Qwen2.5-0.5B-Instruct")
    kwok_started(core, namespace, ready="standin-0", held="engine-0")
    assert pod_state(core, namespace, "engine-0") == ("Running", "False", [False, False])
    status = core.read_namespaced_pod("engine-0", namespace).status
    assert status.pod_ip, "the engine's pod has an address like any pod kwok runs"
    waiting = {c.name: c.state.waiting.reason for c in status.container_statuses if c.state.waiting}
    assert waiting == {RUNTIME_CONTAINER: "ContainerCreating", FRONT_CONTAINER: "ContainerCreating"}


def test_kwok_never_makes_a_pod_ready_whose_image_cannot_be_pulled(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    """An image under a ``.invalid`` registry host is one no kubelet can pull (``fleet.unpullable``): kwok
    starts the pod but its containers wait ErrImagePull and it is never Ready. Before, kwok made it Ready
    at once, the observer told the order a replica was ready, and the order probed a replica that could
    not exist (CI: Ready said HealthCheckFailed beside the pull failure)."""
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("kwok-unpulled")
    make_bound_pod(core, namespace, "unpulled-0", "Qwen/Qwen2.5-0.5B-Instruct", image="registry.invalid/vllm:0")
    make_bound_pod(core, namespace, "pulled-0", "Qwen/Qwen2.5-0.5B-Instruct")
    kwok_started(core, namespace, ready="pulled-0", held="unpulled-0")
    assert pod_state(core, namespace, "unpulled-0") == ("Running", "False", [False, False])
    status = core.read_namespaced_pod("unpulled-0", namespace).status
    waiting = {c.name: c.state.waiting.reason for c in status.container_statuses if c.state.waiting}
    assert waiting == {RUNTIME_CONTAINER: "ErrImagePull", FRONT_CONTAINER: "ErrImagePull"}
    fetcher = [c.state.waiting.reason for c in status.init_container_statuses if c.state.waiting]
    assert fetcher == ["PodInitializing"]  # its own image pulls; it waits for the pod's
