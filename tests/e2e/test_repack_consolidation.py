"""Stranded capacity won back: two shares on two Tesla T4s consolidated onto one, made before it breaks
(issue 37 item 5).

The stand of tests/e2e (real control plane and DRA allocator, Temporal, watcher and observer, worker,
planner in-process) with the stand-in fleet and its stand-in runtime. The class allows a 25 % share of a
T4 only, one fixed replica, ``moves: MakeBeforeBreak``; the observer's repack runs every 2 s.

The two placements are forced with blocker claims (each held by a pod), pinned to a T4 by a CEL selector
on the device's ``uuid`` attribute, as the planner pins its own (``planner.planning.device_selector``):

1. T4-b, T4-c and T4-d are taken whole (a claim naming no capacity gets the card to itself): order A
   lands on T4-a, the only T4 with room.
2. A filler claims the rest of T4-a's memory (the device's memory less what A's claim consumed); T4-b's
   blocker goes: order B lands on T4-b, the only T4 with room.
3. The filler goes. A and B each hold 25 % of a T4 of their own, T4-c and T4-d stay taken: the repack
   moves one share onto the other's T4 (its StatefulSet surges a replica there, then the first ordinal
   rises past the old one, which goes), and a whole T4 comes free.

All along, a client sends chat completions to both orders the way kube-proxy routes them: only while the
order's Service has a ready endpoint (its EndpointSlices), one request after another, each noting the
pod it was routed to. The stand-in runtime is one per order, not per pod (``StandInFleet._serve_ready``),
so what a request proves here is that a ready endpoint was there and the order answered; a watch of the
EndpointSlices records every set of ready endpoints in turn, which the sampling could miss. Checked: no
request to either order failed; the moved order's requests were routed to its old replica, then to its
new one; its Service always had a ready endpoint, and had both replicas ready at once before the old one
went; it was Ready throughout and says ``Moved``; both orders' claims are on one T4, the moved order's
set starts at ordinal 1 with one replica, the other order's set and endpoint were not touched, and the
T4 it left is free (no claim allocated on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
from kubernetes.utils import parse_quantity
from kubernetes.watch import Watch
from temporalio.testing import WorkflowEnvironment

from activities.builders.common import LABEL_ORDER
from devstack.cluster.inventory import DRIVER, MEMORY_CAPACITY
from devstack.cluster.launcher import LocalCluster
from inference_api.types import CLASSES, GROUP, VERSION
from tests.e2e.stand import Stand, open_stand
from tests.engine.serving import chat_body, request, token_of
from worker.observer.metrics import REPACK_DEVICES_FREED

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

T4_CLASS = "nvidia-t4-mps-physical"
T4_PRODUCT = "Tesla T4"
RESOURCE = "resource.k8s.io"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SMALL = {"src": "HuggingFace", "ref": {"name": MODEL}}
ORDER_A, ORDER_B = "share-a", "share-b"
MIB = 1024 * 1024
# The stand-in fleet's multiplexed runtime answers this for a path of no order: the instant its
# order's stand-in is replaced (a pod of the set's new revision runs: ``StandInFleet._rolled``).
NOT_SERVED = {"detail": "Not Found"}


def share_class(name: str) -> dict[str, Any]:
    """One fixed replica, ClusterLocal with a token; a 25 % share of a T4, moved made before it breaks."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
            "acceleratorPolicy": {
                "allowedDeviceClasses": [T4_CLASS],
                "allowedSharingModes": ["Shared"],
                "allowedPlacementTypes": ["WholeDevice"],
                "maxAcceleratorCount": 1,
                "minSharePercent": 25,
            },
            "exposurePolicy": {"type": "ClusterLocal", "authentication": "Token"},
            "updatePolicy": {"strategy": "RollingUpdate", "moves": "MakeBeforeBreak"},
        },
    }


@dataclass(frozen=True)
class T4:
    """A Tesla T4 as the cluster's ResourceSlices publish it."""

    pool: str
    device: str
    uuid: str
    memory: int  # bytes

    @property
    def key(self) -> tuple[str, str]:
        return self.pool, self.device


def published_t4s(api: ApiClient) -> list[T4]:
    """The whole T4s of the GPU driver's ResourceSlices, in pool and device order."""
    slices = CustomObjectsApi(api).list_cluster_custom_object(RESOURCE, "v1", "resourceslices")
    found = []
    for s in slices.get("items") or []:
        spec = s.get("spec") or {}
        if spec.get("driver") != DRIVER:
            continue
        for d in spec.get("devices") or []:
            attributes = d.get("attributes") or {}
            product = (attributes.get("productName") or {}).get("string")
            placement = (attributes.get("placement") or {}).get("string")
            if product != T4_PRODUCT or placement != "WholeDevice":
                continue
            memory = int(parse_quantity(d["capacity"][MEMORY_CAPACITY]["value"]))
            found.append(T4(spec["pool"]["name"], d["name"], attributes["uuid"]["string"], memory))
    return sorted(found, key=lambda t: t.key)


def blocker(namespace: str, name: str, t4: T4, memory_mib: int | None = None) -> list[dict[str, Any]]:
    """A claim of ``t4`` (the whole card, or ``memory_mib`` of its memory), held by a pod."""
    exactly: dict[str, Any] = {
        "deviceClassName": T4_CLASS,
        "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].uuid == {json.dumps(t4.uuid)}'}}],
    }
    if memory_mib is not None:
        exactly["capacity"] = {"requests": {MEMORY_CAPACITY: f"{memory_mib}Mi"}}
    return [
        {
            "apiVersion": f"{RESOURCE}/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "containers": [
                    {"name": "main", "image": "registry.example/none:0", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "terminationGracePeriodSeconds": 0,
            },
        },
    ]


def _claim(stand: Stand, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = stand.custom.get_namespaced_custom_object(
            RESOURCE, "v1", stand.namespace, "resourceclaims", name
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def _results(claim: dict[str, Any] | None) -> list[dict[str, Any]]:
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    results: list[dict[str, Any]] = (allocation.get("devices") or {}).get("results") or []
    return results


def blocker_on(stand: Stand, name: str) -> tuple[str, str] | None:
    """Where the blocker ``name`` is allocated, once its pod runs."""
    pods = stand.core.list_namespaced_pod(stand.namespace, field_selector=f"metadata.name={name}").items
    if not pods or pods[0].status.phase != "Running":
        return None
    results = _results(_claim(stand, name))
    return (results[0]["pool"], results[0]["device"]) if results else None


def remove_blocker(stand: Stand, name: str) -> None:
    with contextlib.suppress(ApiException):
        stand.core.delete_namespaced_pod(name, stand.namespace, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        stand.custom.delete_namespaced_custom_object(RESOURCE, "v1", stand.namespace, "resourceclaims", name)


def _pods(stand: Stand, order: str) -> dict[str, Any]:
    listed = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"{LABEL_ORDER}={order}")
    return {p.metadata.name: p for p in listed.items}


def replica_claims(stand: Stand, order: str) -> dict[str, dict[str, Any]]:
    """The order's pods (not being deleted) → their claim's first allocation result (absent: not yet)."""
    out: dict[str, dict[str, Any]] = {}
    for name, pod in _pods(stand, order).items():
        if pod.metadata.deletion_timestamp or not pod.status.resource_claim_statuses:
            continue
        results = _results(_claim(stand, pod.status.resource_claim_statuses[0].resource_claim_name))
        if results:
            out[name] = results[0]
    return out


def on_device(stand: Stand, order: str) -> tuple[str, str] | None:
    """(pool, device) of the order's one replica's claim; None while it has not exactly one."""
    claims = replica_claims(stand, order)
    if len(claims) != 1:
        return None
    (result,) = claims.values()
    return result["pool"], result["device"]


def claims_on(api: ApiClient, key: tuple[str, str]) -> list[str]:
    """Every claim of the cluster allocated on the device ``key``."""
    listed = CustomObjectsApi(api).list_cluster_custom_object(RESOURCE, "v1", "resourceclaims")
    return sorted(
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in listed.get("items") or []
        if any((r.get("pool"), r.get("device")) == key for r in _results(c))
    )


def others_on_t4s(stand: Stand, t4s: list[T4]) -> list[str]:
    """Claims of other namespaces on a T4 (a test before this one whose replicas still go)."""
    keys = {t.key for t in t4s}
    listed = stand.custom.list_cluster_custom_object(RESOURCE, "v1", "resourceclaims")
    return sorted(
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in listed.get("items") or []
        if c["metadata"]["namespace"] != stand.namespace
        and any((r.get("pool"), r.get("device")) in keys for r in _results(c))
    )


def first_ordinal(stand: Stand, order: str) -> int:
    sts = stand.apps.read_namespaced_stateful_set(order, stand.namespace)
    return int(sts.spec.ordinals.start or 0) if sts.spec.ordinals else 0


def ready_pods(stand: Stand, order: str) -> list[str]:
    """The pods behind the ready endpoints of the order's Service's EndpointSlices (what kube-proxy routes to)."""
    slices = DiscoveryV1Api(stand.api).list_namespaced_endpoint_slice(
        stand.namespace, label_selector=f"kubernetes.io/service-name={order}"
    )
    return sorted(
        e.target_ref.name if e.target_ref is not None else address
        for s in slices.items
        for e in s.endpoints or []
        if e.conditions is not None and e.conditions.ready
        for address in e.addresses
    )


@dataclass
class Sent:
    at: float
    order: str
    pod: str  # the ready endpoint's pod it was routed to; "" when the Service had none
    status: int
    ready: str  # the order's Ready condition when it was sent


@dataclass
class Traffic:
    """Chat completions to each order, routed as kube-proxy routes them, one after another."""

    stand: Stand
    orders: dict[str, tuple[str, str]]  # order → (its stand-in's URL, its token)
    model: str
    sent: list[Sent] = field(default_factory=list)
    swaps: int = 0  # requests asked again: the fleet was replacing the order's stand-in that instant
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def send(self, url: str, token: str) -> int:
        for _ in range(3):
            status, body = request(url, "/v1/chat/completions", token, chat_body(self.model), 30)
            if status != 404 or _json(body) != NOT_SERVED:
                return status
            self.swaps += 1
            time.sleep(0.05)
        return status

    def run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            for order, (url, token) in self.orders.items():
                ready = (self.stand.condition(order, "Ready") or {}).get("status")
                pods = ready_pods(self.stand, order)
                if not pods:
                    self.sent.append(Sent(time.monotonic(), order, "", 0, str(ready)))  # kube-proxy: refused
                    continue
                pod = pods[turn % len(pods)]
                self.sent.append(Sent(time.monotonic(), order, pod, self.send(url, token), str(ready)))
            turn += 1
            time.sleep(0.2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="traffic", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def of(self, order: str) -> list[Sent]:
        return [s for s in self.sent if s.order == order]


@dataclass
class ReadyHistory:
    """Each order's Service's ready endpoints (their pods), every set its EndpointSlices' watch shows in
    turn: complete, where the traffic only samples."""

    stand: Stand
    states: dict[str, list[frozenset[str]]] = field(default_factory=dict)
    _slices: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)  # slice → (service, pods)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def run(self) -> None:
        listing = DiscoveryV1Api(self.stand.api).list_namespaced_endpoint_slice
        version: str | None = None
        while not self._stop.is_set():
            # Short watches, each from where the last ended: the thread ends soon after stop().
            since = {"resource_version": version} if version else {}
            for event in Watch().stream(listing, self.stand.namespace, timeout_seconds=1, **since):
                obj = event["object"]
                version = obj.metadata.resource_version
                self._record(event["type"], obj)

    def _record(self, kind: str, obj: Any) -> None:
        service = (obj.metadata.labels or {}).get("kubernetes.io/service-name", "")
        if kind == "DELETED":
            self._slices.pop(obj.metadata.name, None)
        else:
            ready = frozenset(
                e.target_ref.name if e.target_ref is not None else e.addresses[0]
                for e in obj.endpoints or []
                if e.conditions is not None and e.conditions.ready
            )
            self._slices[obj.metadata.name] = (service, ready)
        now = frozenset(p for s, pods in self._slices.values() if s == service for p in pods)
        states = self.states.setdefault(service, [])
        if not states or states[-1] != now:
            states.append(now)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="endpoint-slices", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def of(self, order: str) -> list[frozenset[str]]:
        return list(self.states.get(order, []))


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


@pytest_asyncio.fixture
async def repack_stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment
) -> AsyncIterator[tuple[Stand, str]]:
    overrides = {"observer": {"repack": {"enabled": True, "intervalSeconds": 2}}}
    class_name = f"e2e-repack-{uuid.uuid4().hex[:6]}"
    custom = CustomObjectsApi(kube_admin)
    custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, share_class(class_name))
    try:
        async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as stand:
            yield stand, class_name
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)


async def serve(stand: Stand, order: str, class_name: str, timeout: float = 120) -> tuple[str, str]:
    """Order ``order``, Ready with one replica whose claim is allocated: (its stand-in's URL, its token)."""
    stand.create_order(order, SMALL, class_name=class_name)
    await stand.until_phase(order, "Ready", None, timeout=timeout)
    await stand.until(lambda: on_device(stand, order) is not None, timeout=30, what=f"{order}'s claim allocated")
    await stand.until(lambda: stand.fleet.runtime(stand.namespace, order) is not None, what=f"{order} served")
    await stand.until(lambda: ready_pods(stand, order) == [f"{order}-0"], timeout=30, what=f"{order}'s endpoint ready")
    runtime = stand.fleet.runtime(stand.namespace, order)
    assert runtime is not None
    return runtime.url, token_of(stand, order)


async def test_two_shares_on_two_t4s_are_consolidated_and_a_whole_t4_comes_free(
    repack_stand: tuple[Stand, str], local_cluster: LocalCluster
) -> None:
    stand, class_name = repack_stand
    started = time.monotonic()
    freed_before = REPACK_DEVICES_FREED._value.get()
    t4s = published_t4s(stand.api)
    assert len(t4s) >= 2, f"the lab publishes fewer than two T4s: {t4s}"
    t4_a, t4_b, *rest = t4s
    # Replicas of an earlier test that still go may hold T4 shares the orders would be planned onto.
    await stand.until(
        lambda: not others_on_t4s(stand, t4s), timeout=300, what=lambda: f"T4s free: {others_on_t4s(stand, t4s)}"
    )
    whole = {f"t4-whole-{t.device}": t for t in [t4_b, *rest]}
    filler = f"t4-rest-{t4_a.device}"
    try:
        # 1. Every T4 but T4-a taken whole: A lands on T4-a.
        local_cluster.apply([obj for name, t4 in whole.items() for obj in blocker(stand.namespace, name, t4)])
        await stand.until(
            lambda: all(blocker_on(stand, name) == t.key for name, t in whole.items()),
            timeout=60,
            what=lambda: f"every T4 but {t4_a.key} taken: {stand.workload_report()}",
        )
        url_a, token_a = await serve(stand, ORDER_A, class_name)
        assert on_device(stand, ORDER_A) == t4_a.key
        assert stand.status(ORDER_A)["resolved"]["sharePercent"] == 25, stand.status(ORDER_A)["resolved"]
        (claim_a,) = replica_claims(stand, ORDER_A).values()
        consumed = int(parse_quantity(claim_a["consumedCapacity"][MEMORY_CAPACITY]))

        # 2. The rest of T4-a's memory taken, T4-b freed: B lands on T4-b.
        rest_mib = (t4_a.memory - consumed) // MIB
        local_cluster.apply(blocker(stand.namespace, filler, t4_a, memory_mib=rest_mib))
        await stand.until(
            lambda: blocker_on(stand, filler) == t4_a.key,
            timeout=60,
            what=lambda: f"the rest of {t4_a.key} ({rest_mib} MiB) taken: {stand.workload_report()}",
        )
        freed_b = f"t4-whole-{t4_b.device}"
        remove_blocker(stand, freed_b)
        await stand.until(lambda: not claims_on(stand.api, t4_b.key), timeout=60, what=f"{t4_b.key} free")
        url_b, token_b = await serve(stand, ORDER_B, class_name)
        assert on_device(stand, ORDER_B) == t4_b.key
        assert on_device(stand, ORDER_A) == t4_a.key
        assert stand.status(ORDER_B)["resolved"]["sharePercent"] == 25, stand.status(ORDER_B)["resolved"]
        placed_at = time.monotonic() - started
        print(f"\nplaced in {placed_at:.0f}s: {ORDER_A} on {t4_a.key}, {ORDER_B} on {t4_b.key}")

        traffic = Traffic(stand, {ORDER_A: (url_a, token_a), ORDER_B: (url_b, token_b)}, MODEL)
        history = ReadyHistory(stand)
        history.start()
        try:
            await stand.until(
                lambda: history.of(ORDER_A) == [{f"{ORDER_A}-0"}] and history.of(ORDER_B) == [{f"{ORDER_B}-0"}],
                timeout=30,
                what=lambda: f"the Services' ready endpoints watched: {history.states}",
            )
            traffic.start()
            await asyncio.sleep(2)
            # 3. T4-a's filler goes: two 25 % shares on two T4s, the others taken. The repack consolidates.
            remove_blocker(stand, filler)
            moved_from = time.monotonic()

            def moved() -> str | None:
                """The order that moved, once its set starts at ordinal 1 with its one new replica Ready on
                the other order's T4 (and the other's replica where it was)."""
                for order, other in ((ORDER_A, ORDER_B), (ORDER_B, ORDER_A)):
                    if first_ordinal(stand, order) != 1 or set(_pods(stand, order)) != {f"{order}-1"}:
                        continue
                    ready = stand.condition(order, "Ready") or {}
                    there = on_device(stand, order)
                    if ready.get("status") == "True" and there is not None and there == on_device(stand, other):
                        return order
                return None

            await stand.until(
                lambda: moved() is not None,
                timeout=120,
                what=lambda: (
                    f"a share moved onto the other's T4:\n  {ORDER_A}: {stand.describe(ORDER_A)}\n  "
                    f"{ORDER_B}: {stand.describe(ORDER_B)}\n  {stand.workload_report()}"
                ),
            )
            took = time.monotonic() - moved_from
            await asyncio.sleep(3)  # requests after the old replica went
        finally:
            traffic.stop()
            history.stop()

        mover = moved()
        assert mover is not None
        stayer = ORDER_B if mover == ORDER_A else ORDER_A
        source = t4_a.key if mover == ORDER_A else t4_b.key
        target = t4_b.key if mover == ORDER_A else t4_a.key

        # Both shares on one T4, read back from the claims; the T4 the mover left is free.
        assert on_device(stand, mover) == target
        assert on_device(stand, stayer) == target
        await stand.until(
            lambda: not claims_on(stand.api, source),
            timeout=30,
            what=lambda: f"{source} free: {claims_on(stand.api, source)}",
        )

        # The observer's next pass saw the T4 empty: counted won back (the observer runs in this process).
        await stand.until(
            lambda: REPACK_DEVICES_FREED._value.get() - freed_before == 1,
            timeout=30,
            what=lambda: f"the freed T4 counted: {REPACK_DEVICES_FREED._value.get() - freed_before}",
        )

        # The mover's set: surged, then its first ordinal rose past the old replica; the stayer's untouched.
        sts = stand.apps.read_namespaced_stateful_set(mover, stand.namespace)
        assert sts.spec.ordinals is not None
        assert sts.spec.ordinals.start == 1
        assert sts.spec.replicas == 1
        assert first_ordinal(stand, stayer) == 0
        assert set(_pods(stand, stayer)) == {f"{stayer}-0"}
        assert stand.status(mover)["resolved"]["sharePercent"] == 25

        # No failed request, to either order; the mover's were routed to its old replica, then its new.
        failed = [s for s in traffic.sent if s.status != 200]
        assert not failed, f"{len(failed)} of {len(traffic.sent)} requests failed: {failed[:10]}"
        routed = [s.pod for s in traffic.of(mover)]
        old, new = f"{mover}-0", f"{mover}-1"
        assert old in routed, "no request reached the old replica: the traffic began too late"
        assert new in routed, "no request reached the new replica"
        assert routed[-1] == new
        assert max(i for i, pod in enumerate(routed) if pod == old) < len(routed) - 1
        assert {s.ready for s in traffic.of(mover)} == {"True"}, "the moved order was not Ready throughout"
        assert {s.pod for s in traffic.of(stayer)} == {f"{stayer}-0"}
        # Made before it broke: the mover's Service always had a ready endpoint, both replicas at once in
        # between; the stayer's kept its one.
        states = history.of(mover)
        assert states[0] == {old}, states
        assert frozenset() not in states, f"the moved order's Service had no ready endpoint: {states}"
        assert {old, new} in states, f"the old and new replicas were never ready together: {states}"
        assert states[-1] == {new}, states
        assert history.of(stayer) == [{f"{stayer}-0"}]

        events = stand.core.list_namespaced_event(
            stand.namespace, field_selector=f"involvedObject.name={mover},reason=Moved"
        ).items
        assert events, f"no Moved event on {mover}"
        assert f"joined others on {'/'.join(target)}" in events[0].message, events[0].message
        print(
            f"{mover} moved {source} -> {target} in {took:.0f}s; {len(traffic.sent)} requests, none failed "
            f"({routed.count(old)} to the old replica, {routed.count(new)} to the new; {traffic.swaps} asked "
            f"again while the stand-in was replaced); its ready endpoints {[sorted(x) for x in states]}; "
            f"whole test {time.monotonic() - started:.0f}s; event: {events[0].message}"
        )
    finally:
        for name in [*whole, filler]:
            remove_blocker(stand, name)
