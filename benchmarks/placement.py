"""Planned = allocated: the placement agreement across the end-to-end scale benchmark's orders, and the
planner service's latency while they are planned.

    .venv/bin/python -m benchmarks.placement [--orders 120] [--h100-nodes N] [--state-dir DIR] [--keep]

The stack is the scale benchmark's end-to-end tier (``benchmarks.scale.lean_stack_up``: the local
control plane with kube-scheduler's DRA allocator and kwok nodes, the Temporal dev server, the
planner service with its informers, one worker, one observer, the stand-in fleet). N orders of the
scale benchmark's small model are created at once, spread over three classes made from the bundled
``default-llm``: ``one`` (one replica), ``pair`` (minReplicas = maxReplicas = 2) and the bundled
class itself (autoscaled 1..2: one replica placed; steered, not pinned: its claim's prioritized list
tries the planned devices, then any device of the same kind).

Once every order is Ready, each order's claim template says where the plan put each replica
(the annotation ``ai.deckhouse.io/planned-placements``) and each of its ResourceClaims what the
scheduler allocated (``status.allocation.devices.results``: pool = node, device, and for a steered
order ``request``, the subrequest chosen: ``gpu/planned`` or ``gpu/any``). Figures, per class and for
pinned and autoscaled orders apart: replicas whose allocation is a planned device of a planned node,
orders whose allocations are exactly planned ones (each allocated replica matched by a planned
placement of its own), planned replicas not allocated, and the subrequests the allocator chose.
The planner service's ``ai_inference_planner_plan_seconds`` histogram gives the plans' latency (mean,
p50, p95, p99 from the buckets) and ``ai_inference_planner_plans_total`` the outcomes.
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import math
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from activities.builders.claim import ANNOTATION_PLANNED_PLACEMENTS, REPLICA_PLACEMENT_GATE, chosen_subrequest
from activities.builders.common import LABEL_ORDER
from activities.scaling import REPLICA_PLACED

# The replica placer's record on a placed pod (worker.observer.replica_placer.ANNOTATION_REPLICA_PLACEMENT;
# the benchmark reads it as any client would, without importing the worker).
ANNOTATION_REPLICA_PLACEMENT = "ai.deckhouse.io/replica-placement"

CLASSES = ("one", "pair", "default-llm")
SERVING = ("Ready", "Degraded")
# Replicas each order's plan places and reserves (maxReplicas).
PLANNED_REPLICAS = {"one": 1, "pair": 2, "default-llm": 1}


# ----------------------------------------------------------------------------- pure figures


Place = tuple[str, str]  # (node, device)


@dataclass
class Agreement:
    """Planned against allocated, for one class of orders."""

    orders: int = 0
    pinned: int = 0
    replicas: int = 0
    on_planned: int = 0
    exact_orders: int = 0
    # Planned replicas of pinned orders with no allocation (their pods wait: Pending).
    waiting: int = 0
    misses: list[str] = field(default_factory=list)
    # Allocation results by the subrequest the allocator chose (steered orders: planned / any).
    chosen: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        if not self.orders:
            return "no orders"
        share = 100 * self.on_planned / self.replicas if self.replicas else math.nan
        exact = 100 * self.exact_orders / self.pinned if self.pinned else math.nan
        return (
            f"{self.orders} orders ({self.pinned} with planned placements), {self.replicas} replicas allocated: "
            f"{self.on_planned} on a planned device ({share:.1f} %); {self.exact_orders} of {self.pinned} "
            f"orders allocated exactly as planned ({exact:.1f} %); {self.waiting} planned replica(s) not allocated"
            + (f"; subrequests chosen {dict(sorted(self.chosen.items()))}" if self.chosen else "")
        )

    def add(self, other: Agreement) -> None:
        for attr in ("orders", "pinned", "replicas", "on_planned", "exact_orders", "waiting"):
            setattr(self, attr, getattr(self, attr) + getattr(other, attr))
        self.chosen.update(other.chosen)


def planned_places(template: Mapping[str, Any]) -> list[Place] | None:
    """Each replica's planned (node, device) from the claim template's annotation; None: not pinned."""
    raw = ((template.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLANNED_PLACEMENTS)
    if raw is None:
        return None
    return [(p["node"], device) for p in json.loads(raw) for device in p["devices"]]


def allocated_places(claims: Iterable[Mapping[str, Any]]) -> list[Place]:
    """(node, device) of every allocated device of the claims (the simulated driver's pool is its node)."""
    out: list[Place] = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            out.append((str(result.get("pool")), str(result.get("device"))))
    return out


def chosen_subrequests(claims: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """How many allocated devices each subrequest got (``gpu/planned`` → ``planned``); a request without
    subrequests is not counted."""
    out: Counter[str] = Counter()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            sub = chosen_subrequest(str(result.get("request", "")))
            if sub is not None:
                out[sub] += 1
    return out


@dataclass
class Placed:
    """Every replica of the autoscaled orders against where the replica placer put it."""

    replicas: int = 0
    recorded: int = 0  # placed by the replica placer (its record on the pod)
    allocated_as_recorded: int = 0  # the claim's allocation is the recorded node and devices
    bound_as_recorded: int = 0  # the pod is bound to the recorded node
    waiting: int = 0  # gated, no room (ReplicaPlaced=False)
    misses: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.replicas} replicas running or waiting: {self.recorded} placed by the replica placer, "
            f"{self.allocated_as_recorded} allocated exactly where placed, {self.bound_as_recorded} bound to the "
            f"node placed on; {self.waiting} waiting for room"
        )


def placed_agreement(pods: Iterable[Mapping[str, Any]], claims: Mapping[str, Mapping[str, Any]], into: Placed) -> None:
    """Count the replicas (``pods``, as the API server returns them) of autoscaled orders: each pod's
    record (``ai.deckhouse.io/replica-placement``) against its claim's allocation (``claims`` by name)
    and the node it is bound to."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        into.replicas += 1
        if any(
            c.get("type") == REPLICA_PLACED and c.get("status") == "False" for c in status.get("conditions") or []
        ) and any(g.get("name") == REPLICA_PLACEMENT_GATE for g in spec.get("schedulingGates") or []):
            into.waiting += 1
            continue
        raw = (meta.get("annotations") or {}).get(ANNOTATION_REPLICA_PLACEMENT)
        if raw is None:
            into.misses.append(f"{meta.get('name')}: no placement recorded")
            continue
        record = json.loads(raw)
        into.recorded += 1
        given = status.get("resourceClaimStatuses") or []
        claim = claims.get(given[0].get("resourceClaimName", "")) if given else None
        allocated = allocated_places([claim]) if claim is not None else []
        if allocated == [(record["node"], d) for d in record["devices"]]:
            into.allocated_as_recorded += 1
        else:
            into.misses.append(f"{meta.get('name')}: placed {record}, allocated {allocated}")
        if spec.get("nodeName") == record["node"]:
            into.bound_as_recorded += 1


def agree(planned: Sequence[Place] | None, allocated: Sequence[Place], into: Agreement, name: str) -> None:
    """Count one order: every replica on a planned place; the allocations exactly planned ones (each
    allocated replica matched by a planned placement of its own; placements may be left for replicas
    not started)."""
    into.orders += 1
    into.replicas += len(allocated)
    if planned is None:
        return
    into.pinned += 1
    into.waiting += max(0, len(planned) - len(allocated))
    allowed = set(planned)
    into.on_planned += sum(1 for place in allocated if place in allowed)
    if not Counter(allocated) - Counter(planned):
        into.exact_orders += 1
    else:
        into.misses.append(f"{name}: planned {sorted(planned)}, allocated {sorted(allocated)}")


def histogram(page: str, name: str) -> tuple[list[tuple[float, float]], float, float]:
    """(cumulative buckets (le, count), sum, count) of a Prometheus histogram without labels."""
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for line in page.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((math.inf if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
        elif line.startswith(f"{name}_sum "):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith(f"{name}_count "):
            count = float(line.rsplit(" ", 1)[1])
    return sorted(buckets), total, count


def quantile(buckets: Sequence[tuple[float, float]], q: float) -> float:
    """The q-quantile from cumulative buckets, linear within the bucket (as PromQL's histogram_quantile)."""
    if not buckets or buckets[-1][1] == 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * ((rank - below) / (count - below) if count > below else 0)
        lower, below = le, count
    return lower


def difference(
    after: tuple[list[tuple[float, float]], float, float], before: tuple[list[tuple[float, float]], float, float]
) -> tuple[list[tuple[float, float]], float, float]:
    """What a histogram counted between two scrapes."""
    earlier = dict(before[0])
    return [(le, n - earlier.get(le, 0.0)) for le, n in after[0]], after[1] - before[1], after[2] - before[2]


# ------------------------------------------------------------------------------------- run


def _read_claims(custom: Any, namespace: str) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The orders' claim templates and their ResourceClaims, by order."""
    templates = {
        t["metadata"]["labels"].get(LABEL_ORDER): t
        for t in custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaimtemplates")[
            "items"
        ]
    }
    claims: dict[str, list[dict[str, Any]]] = {}
    for claim in custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")["items"]:
        order = ((claim.get("metadata") or {}).get("labels") or {}).get(LABEL_ORDER)
        if order:
            claims.setdefault(order, []).append(claim)
    return templates, claims


def unallocated(
    names: Iterable[str], templates: Mapping[str, Mapping[str, Any]], claims: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[str]:
    """The orders with fewer devices allocated than their template's planned placements name."""
    out = []
    for name in names:
        template = templates.get(name)
        planned = planned_places(template) if template is not None else None
        if planned is not None and len(allocated_places(claims.get(name, []))) < len(planned):
            out.append(name)
    return out


def classes_from(default_llm: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``one`` and ``pair``: the bundled class with its replicas fixed at one and two."""
    out = []
    for name, replicas in (("one", 1), ("pair", 2)):
        cls = copy.deepcopy(dict(default_llm))
        cls["metadata"] = {"name": name}
        cls["spec"]["scalingPolicy"] = {"minReplicas": replicas, "maxReplicas": replicas}
        out.append(cls)
    return out


async def run(
    orders: int,
    h100_nodes: int | None,
    state_dir: Path | None,
    keep: bool,
    timeout: float,
    settle: float = 60,
    scale_to: int = 2,
) -> int:
    from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi

    from benchmarks.scale import SMALL_MODEL, fleet_for, lean_stack_up, stack_down
    from devstack.stack import DevStack
    from inference_api.types import GROUP, ORDERS, VERSION

    own_dir = state_dir is None
    root = Path(tempfile.mkdtemp(prefix="placement-")) if state_dir is None else state_dir
    stack = DevStack(root)
    # The pairs take two replicas each: a fleet for the replicas, not the orders.
    # The autoscaled orders are scaled to ``scale_to`` once serving (what their HPA does under load).
    replicas = sum(PLANNED_REPLICAS[CLASSES[i % 3]] if i % 3 != 2 else max(1, scale_to) for i in range(orders))
    fleet = fleet_for(replicas, h100_nodes)
    say = lambda line: print(f"   {line}", file=sys.stderr, flush=True)  # noqa: E731
    print(f"placement agreement: {orders} orders ({replicas} replicas) on the local control plane")
    try:
        lean_stack_up(stack, fleet, say)
        cluster = stack.cluster()
        default_llm = next(o for o in stack.rendered_chart_objects() if o.get("kind") == "InferenceServiceClass")
        cluster.apply(classes_from(default_llm))
        namespace = f"placement-{uuid.uuid4().hex[:6]}"
        cluster.create_namespace(namespace, users=())
        planner = f"https://127.0.0.1:{stack.ports()['planner']}/metrics"
        ca = str(stack.planner_tls().ca)
        before_page = httpx.get(planner, verify=ca, timeout=30).text
        with cluster.api_client("admin") as api:
            custom = CustomObjectsApi(api)
            names = {f"order-{i}": CLASSES[i % 3] for i in range(orders)}
            started = time.perf_counter()
            for name, cls in names.items():
                body = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "InferenceService",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "inferenceServiceClassName": cls,
                        "model": {"src": "HuggingFace", "ref": {"name": SMALL_MODEL}},
                    },
                }
                await asyncio.to_thread(custom.create_namespaced_custom_object, GROUP, VERSION, namespace, ORDERS, body)
            waiting: Counter[str] = Counter()
            while True:
                items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS)["items"]
                # Ready, or Degraded and serving (a scale report's transient): what is measured is
                # where the running replicas' claims were allocated.
                ready = {o["metadata"]["name"] for o in items if (o.get("status") or {}).get("phase") in SERVING}
                waiting = Counter(
                    f"{(o.get('status') or {}).get('phase') or 'new'}/{(o.get('status') or {}).get('reason') or '-'}"
                    for o in items
                    if o["metadata"]["name"] not in ready
                )
                if len(ready) == len(names):
                    break
                if time.perf_counter() - started > timeout:
                    say(f"{len(ready)} of {orders} Ready after {timeout:.0f} s; waiting: {dict(waiting)}")
                    break
                await asyncio.sleep(2)
            batch = time.perf_counter() - started
            after_page = httpx.get(planner, verify=ca, timeout=30).text
            # An order serves once its first replica does: give the other planned replicas ``settle``
            # seconds to be allocated, so what is left waits for capacity, not for its turn.
            settled = time.perf_counter()
            while True:
                templates, claims = _read_claims(custom, namespace)
                short = unallocated(names, templates, claims)
                if not short or time.perf_counter() - settled > settle:
                    break
                await asyncio.sleep(2)
            settle_took = time.perf_counter() - settled
            # What each autoscaled order's HPA does under load: its StatefulSet's scale to ``scale_to``;
            # the replica placer places each replica added (then the pods bind and run).
            apps, core = AppsV1Api(api), CoreV1Api(api)
            autoscaled = [n for n, cls in names.items() if cls == "default-llm"]
            scaled_at = time.perf_counter()
            if scale_to > 1:
                for name in autoscaled:
                    for sts in apps.list_namespaced_stateful_set(
                        namespace, label_selector=f"{LABEL_ORDER}={name}"
                    ).items:
                        await asyncio.to_thread(
                            apps.patch_namespaced_stateful_set_scale,
                            sts.metadata.name,
                            namespace,
                            {"spec": {"replicas": scale_to}},
                        )
            placed = Placed()
            while True:
                pods = [
                    api.sanitize_for_serialization(p)
                    for p in core.list_namespaced_pod(namespace, label_selector=LABEL_ORDER).items
                ]
                auto_pods = [p for p in pods if p["metadata"]["labels"].get(LABEL_ORDER) in set(autoscaled)]
                running = [p for p in auto_pods if (p.get("status") or {}).get("phase") == "Running"]
                if len(running) >= len(autoscaled) * max(1, scale_to) or time.perf_counter() - scaled_at > settle:
                    break
                await asyncio.sleep(2)
            scale_took = time.perf_counter() - scaled_at
            templates, claims = _read_claims(custom, namespace)
            by_claim = {c["metadata"]["name"]: c for cs in claims.values() for c in cs}
            placed_agreement(auto_pods, by_claim, placed)
    finally:
        if not keep:
            stack_down(stack)
            if own_dir:
                shutil.rmtree(root, ignore_errors=True)
    figures = {cls: Agreement() for cls in CLASSES}
    for name, cls in names.items():
        template = templates.get(name)
        planned = planned_places(template) if template is not None else None
        agree(planned, allocated_places(claims.get(name, [])), figures[cls], name)
        figures[cls].chosen.update(chosen_subrequests(claims.get(name, [])))
    print(f"  fleet: {fleet.describe()} nodes; {len(ready)} of {orders} orders serving in {batch:.1f} s")
    print(
        f"  then {settle_took:.0f} s for the planned replicas' claims: "
        + (f"still not allocated: {', '.join(short)}" if short else "every planned replica allocated")
    )
    for cls in CLASSES:
        kind = {"one": "1 replica", "pair": "2 replicas", "default-llm": "autoscaled 1..2, steered"}[cls]
        print(f"  {cls} ({kind}): {figures[cls].line()}")
        for miss in figures[cls].misses[:5]:
            print(f"    {miss}")
    total = Agreement()
    for cls in ("one", "pair"):
        total.add(figures[cls])
    print(f"  fixed-size orders (one, pair): {total.line()}   (target: 100 %)")
    print(f"  autoscaled orders: {figures['default-llm'].line()}   (target: 100 %)")
    everything = Agreement()
    for cls in CLASSES:
        everything.add(figures[cls])
    print(f"  every order: {everything.line()}")
    print(
        f"  autoscaled orders scaled to {scale_to} ({scale_took:.0f} s to run): {placed.line()}   (target: every "
        "replica placed, allocated and bound where placed)"
    )
    for miss in placed.misses[:5]:
        print(f"    {miss}")
    buckets, seconds, count = difference(
        histogram(after_page, "ai_inference_planner_plan_seconds"),
        histogram(before_page, "ai_inference_planner_plan_seconds"),
    )
    if count:
        print(
            f"  planner service latency over {count:.0f} plans: mean {1000 * seconds / count:.1f} ms, "
            f"p50 {1000 * quantile(buckets, 0.5):.1f} ms, p95 {1000 * quantile(buckets, 0.95):.1f} ms, "
            f"p99 {1000 * quantile(buckets, 0.99):.1f} ms (from the histogram's buckets)"
        )
    outcomes = Counter[str]()
    for line in after_page.splitlines():
        if line.startswith("ai_inference_planner_plans_total{"):
            outcomes[line.split('outcome="', 1)[1].split('"', 1)[0]] += int(float(line.rsplit(" ", 1)[1]))
    print(f"  planner outcomes (since it started): {dict(outcomes)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=120)
    parser.add_argument("--h100-nodes", type=int, default=None, help="H100 nodes (default: ~40 replicas a node)")
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument(
        "--timeout", type=float, default=900, help="seconds to wait for every order to serve; then the figures"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=60,
        help="once every order serves, seconds more for the planned replicas' claims to be allocated",
    )
    parser.add_argument(
        "--scale-to", type=int, default=2, help="replicas each autoscaled order is scaled to once serving (1: none)"
    )
    args = parser.parse_args(argv)
    from benchmarks.scale import quiet_logs

    quiet_logs()
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(
            run(args.orders, args.h100_nodes, args.state_dir, args.keep, args.timeout, args.settle, args.scale_to)
        )
    return 130


if __name__ == "__main__":
    sys.exit(main())
