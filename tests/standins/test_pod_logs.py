"""Pod logs on the local control plane: kube-apiserver relays pods/log to the node's "kubelet", which is
the stand-in fleet's log API (``devstack.standins.kubelet_api``), on the port kwok publishes for every node.

The pod here is bound to a kwok node by the test and its containers' output is written where the fleet
keeps it (``engine_root/<pod uid>/``); the read goes client -> kube-apiserver -> the fleet, as
``kubectl logs`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from activities.builders.common import FETCHER_CONTAINER, LABEL_MANAGED_BY, MANAGED_BY, RUNTIME_CONTAINER
from activities.builders.endpoint_front import FRONT_CONTAINER
from devstack.cluster.inventory import KWOK_ANNOTATION
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet

pytestmark = pytest.mark.cluster

FETCHER_LOG = "".join(f"fetching shard {i} of 5\n" for i in range(1, 6)) + "model ready in /models/model\n"
ENGINE_LOG = "INFO starting engine\nINFO loading weights\nINFO serving on :8000\n"


def kwok_node(core: CoreV1Api) -> Any:
    return next(n for n in core.list_node().items if (n.metadata.annotations or {}).get(KWOK_ANNOTATION) == "fake")


def make_pod(core: CoreV1Api, namespace: str, name: str, node: str) -> str:
    """A pod already bound to ``node``, with the module's init container and containers; its uid."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {
            "nodeName": node,
            "initContainers": [{"name": FETCHER_CONTAINER, "image": "registry.example/fetcher:0"}],
            "containers": [
                {"name": RUNTIME_CONTAINER, "image": "registry.example/vllm:0"},
                {"name": FRONT_CONTAINER, "image": "registry.example/vllm:0"},
            ],
        },
    }
    return str(core.create_namespaced_pod(namespace, body).metadata.uid)


@pytest.fixture
def fleet(kube_admin: ApiClient, tmp_path: Path) -> Any:
    fleet = StandInFleet(kube_admin, engine_root=tmp_path / "engines").start()
    try:
        yield fleet
    finally:
        fleet.stop()


def test_the_node_publishes_the_fleets_kubelet_port_and_keeps_its_internal_ip(
    local_cluster: LocalCluster, kube_admin: ApiClient
) -> None:
    node = kwok_node(CoreV1Api(kube_admin))
    addresses = {a.type: a.address for a in node.status.addresses}
    assert addresses["InternalIP"].startswith("172.31."), "pods' hostIP stays the node's made-up address"
    assert addresses["InternalDNS"] == "localhost"
    assert local_cluster.kubelet_port
    assert node.status.daemon_endpoints.kubelet_endpoint.port == local_cluster.kubelet_port


def test_pod_logs_are_read_through_the_api_server_from_the_fleet(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    make_namespace: Callable[..., str],
    fleet: StandInFleet,
) -> None:
    assert fleet.kubelet is not None, "the fleet serves the nodes' kubelet API"
    assert fleet.kubelet.port == local_cluster.kubelet_port
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("pod-logs")
    uid = make_pod(core, namespace, "replica-0", kwok_node(core).metadata.name)
    folder = fleet.engine_root / uid
    folder.mkdir(parents=True)
    (folder / "model-fetcher.log").write_text(FETCHER_LOG)

    tail = core.read_namespaced_pod_log("replica-0", namespace, container=FETCHER_CONTAINER, tail_lines=2)
    assert tail == "".join(FETCHER_LOG.splitlines(keepends=True)[-2:])
    assert tail == "fetching shard 5 of 5\nmodel ready in /models/model\n"
    whole = core.read_namespaced_pod_log("replica-0", namespace, container=FETCHER_CONTAINER)
    assert whole == FETCHER_LOG
    assert (
        core.read_namespaced_pod_log("replica-0", namespace, container=FETCHER_CONTAINER, limit_bytes=8)
        == (FETCHER_LOG[:8])
    )
    # follow on a container that no longer runs: what it wrote, then the stream ends.
    followed = core.read_namespaced_pod_log("replica-0", namespace, container=FETCHER_CONTAINER, follow=True)
    assert followed == FETCHER_LOG

    # The engine's output is served under the runtime container's name, once it has any.
    with pytest.raises(ApiException) as waiting:
        core.read_namespaced_pod_log("replica-0", namespace, container=RUNTIME_CONTAINER)
    assert waiting.value.status == 400
    assert "waiting to start" in str(waiting.value.body)
    (folder / "engine.log").write_text(ENGINE_LOG)
    assert core.read_namespaced_pod_log("replica-0", namespace, container=RUNTIME_CONTAINER, tail_lines=1) == (
        "INFO serving on :8000\n"
    )

    # A container the pod does not have: the API server refuses it before asking the node.
    with pytest.raises(ApiException) as unknown:
        core.read_namespaced_pod_log("replica-0", namespace, container="no-such-container")
    assert unknown.value.status in (400, 404)

    # What `kubectl logs` does, as a namespace user.
    out = local_cluster.kubectl(
        "logs", "replica-0", "-n", namespace, "-c", FETCHER_CONTAINER, "--tail=2", user="ns-user"
    ).stdout
    assert out == tail


def test_the_next_fleet_answers_though_the_api_server_kept_its_connection_to_the_last(
    kube_admin: ApiClient, make_namespace: Callable[..., str], tmp_path: Path
) -> None:
    """kube-apiserver keeps its connections to a kubelet alive: a fleet that stops closes the ones it
    accepted, or the next fleet's reads would be answered by the stopped one (from its own files)."""
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("pod-logs-next")
    uid = make_pod(core, namespace, "replica-0", kwok_node(core).metadata.name)
    for turn in ("first", "second"):
        fleet = StandInFleet(kube_admin, engine_root=tmp_path / turn).start()
        try:
            assert fleet.kubelet is not None
            (fleet.engine_root / uid).mkdir(parents=True)
            (fleet.engine_root / uid / "model-fetcher.log").write_text(f"the {turn} fleet\n")
            read = core.read_namespaced_pod_log("replica-0", namespace, container=FETCHER_CONTAINER, tail_lines=1)
            assert read == f"the {turn} fleet\n"
        finally:
            fleet.stop()
