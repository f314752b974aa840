"""A stranded order moved onto a share, made before it breaks, with no failed request (issue 37 item 5).

The stand of tests/e2e (real control plane, Temporal, watcher, worker, planner in-process) with the
stand-in fleet running the real engine on the tiny model, and the pods' addresses made real
(``devstack.standins.pod_network``), so a request routed by the Service's EndpointSlice, as kube-proxy
routes it, reaches the replica's endpoint front and the engine behind it.

1. Every Tesla T4 is taken (one claim of a whole card each, held by a pod). The order's class allows
   a 25 % share of a T4 or a whole dedicated H100: it is planned onto a whole H100 (100 %).
2. The T4 claims go: a share is free, and the order is stranded on a whole device.
3. The observer's repack (``observer.repack``, every 2 s here) asks it to move. It plans beside what it
   holds, onto a 25 % share of a T4, and moves: its StatefulSet surges a second replica there, and once
   that replica is Ready the first ordinal rises past the old one, which goes.

All along, a client sends chat completions to the order's Service the way kube-proxy routes them (a
ready endpoint of its EndpointSlices, one request after another). Checked: no request failed; some
were answered by the old replica and later ones by the new; the order was Ready throughout and says
``Moved``; the new replica's claim is allocated on a T4; the old replica's model volume is gone; the
worker counted 0.75 devices won back.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, CustomObjectsApi, DiscoveryV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from activities.builders.common import LABEL_ORDER, MODEL_VOLUME, RUNTIME_PORT
from activities.metrics import GPUS_WON_BACK
from devstack.cluster.inventory import load_inventory
from devstack.cluster.launcher import LocalCluster
from devstack.vllm_cpu_env import VllmCpuEnv
from inference_api.types import CLASSES, GROUP, VERSION
from tests.e2e.stand import Stand, open_stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES, chat_body, request, serve_order

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

ORDER = "stranded"
T4_CLASS = "nvidia-t4-mps-physical"
H100_DEDICATED = "nvidia-h100-dedicated"
RESOURCE = "resource.k8s.io"


def move_class(name: str) -> dict[str, Any]:
    """One fixed replica, ClusterLocal with a token; a 25 % T4 share or a whole dedicated H100."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
            "acceleratorPolicy": {
                "allowedDeviceClasses": [T4_CLASS, H100_DEDICATED],
                "allowedSharingModes": ["Shared", "Dedicated"],
                "allowedPlacementTypes": ["WholeDevice"],
                "maxAcceleratorCount": 1,
                "minSharePercent": 25,
            },
            "exposurePolicy": {"type": "ClusterLocal", "authentication": "Token"},
            "updatePolicy": {"strategy": "RollingUpdate", "moves": "MakeBeforeBreak"},
        },
    }


def t4_blockers(namespace: str, count: int) -> list[dict[str, Any]]:
    """``count`` claims of a whole T4 each (no capacity asked: the card to itself), each held by a pod."""
    out: list[dict[str, Any]] = []
    for i in range(count):
        out.append(
            {
                "apiVersion": f"{RESOURCE}/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"t4-{i}", "namespace": namespace},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": T4_CLASS}}]}},
            }
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"t4-holder-{i}", "namespace": namespace},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "registry.example/none:0", "resources": {"claims": [{"name": "gpu"}]}}
                    ],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": f"t4-{i}"}],
                    "terminationGracePeriodSeconds": 0,
                },
            }
        )
    return out


@dataclass
class Traffic:
    """Chat completions to the order's Service, routed as kube-proxy routes them, one after another."""

    stand: Stand
    token: str
    model: str
    sent: list[tuple[float, str, int]] = field(default_factory=list)  # (when, endpoint address, status)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def ready_endpoints(self) -> list[str]:
        slices = DiscoveryV1Api(self.stand.api).list_namespaced_endpoint_slice(
            self.stand.namespace, label_selector=f"kubernetes.io/service-name={ORDER}"
        )
        return sorted(
            address
            for s in slices.items
            for e in s.endpoints or []
            if e.conditions is not None and e.conditions.ready
            for address in e.addresses
        )

    def run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            ready = self.ready_endpoints()
            if not ready:
                self.sent.append((time.monotonic(), "", 0))  # kube-proxy would refuse the connection
            else:
                address = ready[turn % len(ready)]
                turn += 1
                status, _ = request(
                    f"http://{address}:{RUNTIME_PORT}", "/v1/chat/completions", self.token, chat_body(self.model), 60
                )
                self.sent.append((time.monotonic(), address, status))
            time.sleep(0.2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="traffic", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=90)

    def failed(self) -> list[tuple[float, str, int]]:
        return [s for s in self.sent if s[2] != 200]


@pytest_asyncio.fixture
async def moving_stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, engine_env: VllmCpuEnv
) -> AsyncIterator[tuple[Stand, str]]:
    overrides = {**ENGINE_STAND_OVERRIDES, "observer": {"repack": {"enabled": True, "intervalSeconds": 2}}}
    class_name = f"e2e-move-{uuid.uuid4().hex[:6]}"
    custom = CustomObjectsApi(kube_admin)
    custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, move_class(class_name))
    try:
        async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as stand:
            stand.fleet.real_pod_addresses = True  # what kube-proxy routes to by the EndpointSlice
            yield stand, class_name
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)


def _pods(stand: Stand) -> dict[str, dict[str, Any]]:
    listed = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"{LABEL_ORDER}={ORDER}")
    return {p.metadata.name: stand.api.sanitize_for_serialization(p) for p in listed.items}


def _claim_device(stand: Stand, pod: dict[str, Any]) -> tuple[str, str] | None:
    """(pool, device) the pod's generated claim is allocated on."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    if not statuses:
        return None
    claim = CustomObjectsApi(stand.api).get_namespaced_custom_object(
        RESOURCE, "v1", stand.namespace, "resourceclaims", statuses[0]["resourceClaimName"]
    )
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return (results[0]["pool"], results[0]["device"]) if results else None


def _others_on_t4s(stand: Stand) -> list[str]:
    """Claims of other namespaces allocated on a T4 (a test before this one whose replicas still go)."""
    listed = CustomObjectsApi(stand.api).list_cluster_custom_object(RESOURCE, "v1", "resourceclaims")
    return sorted(
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in listed.get("items") or []
        if c["metadata"]["namespace"] != stand.namespace
        and any(
            str(r.get("pool", "")).startswith("gpu-t4")
            for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        )
    )


def _volume_exists(stand: Stand, name: str) -> bool:
    try:
        stand.core.read_namespaced_persistent_volume_claim(name, stand.namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


async def test_a_stranded_order_moves_to_a_share_with_no_failed_request(
    moving_stand: tuple[Stand, str], local_cluster: LocalCluster
) -> None:
    stand, class_name = moving_stand
    # The T4s free first: replicas of an earlier test that still go hold shares there, which the order
    # would be planned onto and a holder of a whole card could not take.
    await stand.until(lambda: not _others_on_t4s(stand), timeout=300, what=lambda: f"T4s free: {_others_on_t4s(stand)}")
    t4s = len(load_inventory().devices_of_class(T4_CLASS))
    blockers = t4_blockers(stand.namespace, t4s)
    local_cluster.apply(blockers)

    def holders_running() -> bool:
        pods = stand.core.list_namespaced_pod(stand.namespace).items
        return sum(1 for p in pods if p.metadata.name.startswith("t4-holder-") and p.status.phase == "Running") == t4s

    await stand.until(holders_running, timeout=60, what="every Tesla T4 taken")

    served = await serve_order(stand, ORDER, class_name=class_name)
    resolved = stand.status(ORDER)["resolved"]
    assert (resolved["deviceClass"], resolved["sharePercent"]) == (H100_DEDICATED, 100), resolved
    won_before = GPUS_WON_BACK._value.get()

    traffic = Traffic(stand, served.token, served.model)
    traffic.start()
    try:
        await asyncio.sleep(3)
        old_address = _pods(stand)[f"{ORDER}-0"]["status"]["podIP"]
        # The T4s free up: the order is stranded on a whole H100, and the repack asks it to move.
        for i in range(t4s):
            stand.core.delete_namespaced_pod(f"t4-holder-{i}", stand.namespace, grace_period_seconds=0)
            CustomObjectsApi(stand.api).delete_namespaced_custom_object(
                RESOURCE, "v1", stand.namespace, "resourceclaims", f"t4-{i}"
            )
        ready_seen: list[str] = []

        def moved() -> bool:
            status = stand.status(ORDER)
            ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
            ready_seen.append(str(ready.get("status")))
            pods = _pods(stand)
            return (
                (status.get("resolved") or {}).get("sharePercent") == 25
                and set(pods) == {f"{ORDER}-1"}
                and ready.get("status") == "True"
            )

        await stand.until(
            moved, timeout=900, what=lambda: f"the order moved: {stand.describe(ORDER)}\n{stand.workload_report()}"
        )
        await asyncio.sleep(15)  # past the old replica's preStop sleep and the engine's stop
    finally:
        traffic.stop()

    failed = traffic.failed()
    assert not failed, f"{len(failed)} of {len(traffic.sent)} requests failed during the move: {failed[:10]}"
    new_address = _pods(stand)[f"{ORDER}-1"]["status"]["podIP"]
    answered_by = [address for _, address, _ in traffic.sent]
    assert old_address in answered_by, "no request reached the old replica: the traffic began too late"
    assert new_address in answered_by, "no request reached the new replica"
    assert answered_by.index(new_address) < len(answered_by) - 1
    assert answered_by[-1] == new_address
    assert ready_seen
    assert set(ready_seen) == {"True"}, f"the order was not Ready throughout: {ready_seen}"

    sts = stand.apps.read_namespaced_stateful_set(ORDER, stand.namespace)
    assert sts.spec.ordinals.start == 1
    assert sts.spec.replicas == 1
    pool, _device = _claim_device(stand, _pods(stand)[f"{ORDER}-1"]) or ("", "")
    assert pool.startswith("gpu-t4"), f"the new replica's claim is not on a T4: {pool}"
    assert not _volume_exists(stand, f"{MODEL_VOLUME}-{ORDER}-0"), "the retired replica's model volume is left"
    assert _volume_exists(stand, f"{MODEL_VOLUME}-{ORDER}-1")
    assert GPUS_WON_BACK._value.get() - won_before == pytest.approx(0.75)
    events = stand.core.list_namespaced_event(
        stand.namespace, field_selector=f"involvedObject.name={ORDER},reason=Moved"
    ).items
    assert events, "no Moved event on the order"
    assert "0.75 device(s) won back" in events[0].message
    print(
        f"\nmoved with {len(traffic.sent)} requests, none failed: {answered_by.count(old_address)} answered by the "
        f"old replica, {answered_by.count(new_address)} by the new"
    )
