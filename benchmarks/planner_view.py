"""The planner service's inventory view after one object changed, at N orders: memoized vs full rebuild.

    .venv/bin/python -m benchmarks.planner_view [--orders 200 1000] [--repeat 20]

A synthetic informer state like the end-to-end scale benchmark's at N orders (its fleet,
``benchmarks.scale.fleet_for``: H100 nodes of 4 shared and 4 whole cards, ~40 orders a node, one MIG,
one T4 and one CPU node): each order one allocated ResourceClaim on a shared H100 (memory and share
consumed), one pod bound to that node with CPU and memory requests and the order label, and one
ResourceClaimTemplate with its planned-placements annotation. Then, ``--repeat`` times, one order's
claim is modified (a new resourceVersion) and ``InventoryInformers.view()`` is timed — the memoized
view re-derives that claim alone — and, in the same run, the full rebuild from every cached object
(``worker.observer.inventory.build_view`` with no memo: what ``view()`` did before). It prints the
median CPU time (``time.process_time``: the machine may be busy) of each, per N, and their
ratio. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from activities.builders.common import LABEL_ORDER
from worker.observer.informer import Listed, Resource, Watched
from worker.observer.inventory import (
    CLAIM_TEMPLATE,
    DEVICE_CLASS,
    NODE,
    ORDER_POD,
    PHYSICAL_GPU,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    InventoryInformers,
)

DRIVER = "gpu.deckhouse.io"
SHARED_CLASS = "nvidia-hopper-s3-shared"
NAMESPACE = "bench"


def fleet_objects(orders: int) -> dict[str, list[dict[str, Any]]]:
    """The scale benchmark's fleet for ``orders`` as API objects: classes, slices, PhysicalGPUs, Nodes."""
    from benchmarks.scale import fleet_for
    from devstack.cluster.inventory import (
        device_class_object,
        node_object,
        physical_gpu_object,
        resource_slice_object,
        sized_inventory,
    )

    inv = sized_inventory(fleet_for(orders))
    out = {
        DEVICE_CLASS: [device_class_object(c) for c in inv.device_classes],
        RESOURCE_SLICE: [resource_slice_object(n) for n in inv.nodes if n.devices],
        PHYSICAL_GPU: [physical_gpu_object(g) for g in inv.physical_gpus],
        NODE: [node_object(n) for n in inv.nodes],
    }
    # As the API server returns them: each with its uid and resourceVersion.
    return {kind: [_versioned(o, f"{kind}-{o['metadata']['name']}") for o in objs] for kind, objs in out.items()}


def _versioned(obj: dict[str, Any], uid: str, rv: int = 1) -> dict[str, Any]:
    obj["metadata"] = {**obj["metadata"], "uid": uid, "resourceVersion": str(rv)}
    return obj


def shared_h100s(slices: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """(node, device) of every shared H100 the slices publish."""
    return [
        (s["spec"]["nodeName"], d["name"])
        for s in slices
        for d in s["spec"]["devices"]
        if d.get("allowMultipleAllocations") and d["attributes"]["productName"]["string"].startswith("NVIDIA H100")
    ]


def order_objects(i: int, node: str, device: str) -> dict[str, dict[str, Any]]:
    """Order ``i``'s claim (allocated on ``node``/``device``), pod and claim template."""
    name = f"order-{i}"
    exactly = {
        "deviceClassName": SHARED_CLASS,
        "count": 1,
        "capacity": {"requests": {f"{DRIVER}/memory": "4Gi"}},
    }
    requests = [{"name": "gpu", "exactly": exactly}]
    claim = {
        "metadata": {"name": f"{name}-0-gpu-x1", "namespace": NAMESPACE, "labels": {LABEL_ORDER: name}},
        "spec": {"devices": {"requests": requests}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": node,
                            "device": device,
                            "consumedCapacity": {f"{DRIVER}/memory": "4Gi", f"{DRIVER}/sharePercent": "5"},
                        }
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": f"{name}-0", "uid": f"pod-{i}"}],
        },
    }
    pod = {
        "metadata": {"name": f"{name}-0", "namespace": NAMESPACE, "labels": {LABEL_ORDER: name}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"resources": {"requests": {"cpu": "3500m", "memory": "8Gi"}}},
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            ],
        },
        "status": {"phase": "Running"},
    }
    template = {
        "metadata": {
            "name": f"{name}-gpu",
            "namespace": NAMESPACE,
            "labels": {LABEL_ORDER: name},
            "annotations": {"ai.deckhouse.io/planned-placements": json.dumps([{"node": node, "devices": [device]}])},
        },
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
    return {
        RESOURCE_CLAIM: _versioned(claim, f"claim-{i}"),
        ORDER_POD: _versioned(pod, f"pod-{i}"),
        CLAIM_TEMPLATE: _versioned(template, f"template-{i}"),
    }


def informer_state(orders: int) -> dict[str, list[dict[str, Any]]]:
    """Every kind's objects at ``orders`` orders, the orders spread over the shared H100s in turn."""
    state = fleet_objects(orders)
    for kind in (RESOURCE_CLAIM, ORDER_POD, CLAIM_TEMPLATE):
        state[kind] = []
    places = shared_h100s(state[RESOURCE_SLICE])
    for i in range(orders):
        node, device = places[i % len(places)]
        for kind, obj in order_objects(i, node, device).items():
            state[kind].append(obj)
    return state


def loaded(state: dict[str, list[dict[str, Any]]]) -> InventoryInformers:
    """Informers (not started) whose caches hold ``state``, as after every kind's first list."""
    informers = InventoryInformers([Resource(kind, lambda **_: None) for kind in state])
    for kind, items in state.items():
        informers.deliver(Listed(kind, items))
    return informers


def bump(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with a new resourceVersion (what a MODIFIED event brings)."""
    meta = obj["metadata"]
    return {**obj, "metadata": {**meta, "resourceVersion": str(int(meta["resourceVersion"]) + 1)}}


def measure(orders: int, repeat: int) -> tuple[float, float]:
    """(median seconds of ``view()`` after one claim changed, median seconds of the full rebuild)."""
    from worker.observer.inventory import build_view

    state = informer_state(orders)
    informers = loaded(state)
    informers.view()  # the first build: every object derived once
    claims = state[RESOURCE_CLAIM]
    incremental: list[float] = []
    full: list[float] = []
    for r in range(repeat):
        i = (r * 7919) % orders
        claims[i] = bump(claims[i])
        informers.deliver(Watched(RESOURCE_CLAIM, "MODIFIED", claims[i]))
        started = time.process_time()
        informers.view()
        incremental.append(time.process_time() - started)
        started = time.process_time()
        build_view(informers.objects(), informers.drivers)
        full.append(time.process_time() - started)
    return statistics.median(incremental), statistics.median(full)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.planner_view", description=__doc__.split("\n")[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[200, 1000], help="order counts (default 200 1000)")
    parser.add_argument("--repeat", type=int, default=20, help="changes timed per order count (default 20)")
    args = parser.parse_args(argv)
    print("planner inventory view after one ResourceClaim changed (CPU ms, median of each)")
    print(f"{'orders':>7} {'view() ms':>10} {'full rebuild ms':>16} {'ratio':>7}")
    for orders in args.orders:
        incremental, full = measure(orders, args.repeat)
        ratio = full / incremental if incremental else float("inf")
        print(f"{orders:>7} {incremental * 1000:>10.2f} {full * 1000:>16.2f} {ratio:>6.1f}x")


if __name__ == "__main__":
    main()
