"""Planner benchmark: throughput on a large fleet and placement quality on small packing instances.

    .venv/bin/python -m tests.planner.bench_planner [--seconds 3] [--bookings 100 300 1000] [--instances 200]

(a) Throughput. 1,000 MPS-shareable H100 (125 nodes x 8) carrying 10,000 standing allocations (10 a
    device, 5 % each, various memory); orders of three models (a compiled recipe of 24 GiB, one of
    20 GiB, a fallback of 39 GiB) planned one after another, each on a snapshot object of its own as
    the planner service reads a new inventory for every request. Reported: the first plan's latency
    (cold: the selectors are judged and the recipes resolved) and plans per second after it (warm:
    selector verdicts and recipe resolutions are cached across plans, the snapshot index is built by
    every plan — nothing is cached per snapshot).

(c) Plans under bookings. The planner service counts every plan it answered whose claims the cluster
    has not allocated yet (``planner.bookings``) against each later plan: 1,000 orders created at
    once leave hundreds of bookings outstanding while their pods are scheduled. A fleet as the e2e
    scale benchmark sizes it for 1,000 orders (25 nodes x 4 shared H100, 5 standing allocations a
    device); per plan, the bookings reserved on the snapshot (``reserve``) then the plan made on it,
    against the same plan on the bare snapshot (the baseline, measured in the same run).

(b) Placement quality. An instance is a sequence of orders (fallback models of various sizes, so of
    various shares) arriving one by one on identical empty H100s. Each order is planned by
    ``plan_launch`` on the snapshot holding every order placed before it, and its plan becomes an
    allocation. The share rule makes an order take ``ceil(100 x need / device)`` percent, and both
    the share and the memory must fit, so the instance is bin packing of integer shares into
    devices of 100. Two measures, each against the exact optimum (exhaustive search) and against
    first-fit-decreasing (FFD) run on the same orders:

    * devices used — enough devices for every order; fewer is better; ratio = optimum / used.
    * orders placed — few devices, more orders than fit; an order with no room is refused and the
      next one comes; more is better; ratio = placed / optimum (the largest number of the orders
      that fit together).

    The planner sees orders in arrival order (it is online); FFD sees them all, sorted. Both random
    arrival and decreasing arrival (where best fit becomes best-fit-decreasing) are reported.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inference_api.plan import OrderFacts, RuntimeFallbackFlag
from planner.bookings import Booking, reserve
from planner.inventory import Device, DeviceAllocation, DeviceClass, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch
from tests.planner.helpers import H100, SHARED, WHOLE, cel, policy

CLASS = "nvidia-hopper-s3-shared"
CLASSES = [
    DeviceClass(name=CLASS, selectors=[cel(hardwareFamily="hopper", placement="WholeDevice", shareable=True)]),
    DeviceClass(name="nvidia-h100-dedicated", selectors=[cel(productName=H100, shareable=False)]),
]
POLICY = policy(classes=[CLASS], sharing=SHARED, placement=WHOLE)
H100_MIB = 80 * 1024


def h100(node: str, name: str, allocations: Sequence[DeviceAllocation] = ()) -> Device:
    return Device(
        name=name,
        node=node,
        productName=H100,
        memoryMiB=H100_MIB,
        hardwareFamily="hopper",
        allowMultipleAllocations=True,
        attributes={"sharingMode": "MPS", "shareable": True},
        capacity={"gpu.deckhouse.io/sharePercent": 100},
        allocations=list(allocations),
    )


def request(model: str, inventory: InventorySnapshot, holder: str) -> PlanningRequest:
    return PlanningRequest(
        facts=OrderFacts(modelName=model),
        acceleratorPolicy=POLICY,
        inventory=inventory,
        runtimeFallback=RuntimeFallbackFlag(enabled=True),
        className="bench",
        holder=holder,
    )


# ------------------------------------------------------------------ (a) throughput


def fleet(devices: int = 1000, allocations_per_device: int = 10, seed: int = 1) -> InventorySnapshot:
    rng = random.Random(seed)
    out: list[Device] = []
    for i in range(devices):
        held = [
            DeviceAllocation(holder=f"ns/order-{i}-{j}", sharePercent=5, memoryMiB=rng.randrange(1, 6) * 1024)
            for j in range(allocations_per_device)
        ]
        out.append(h100(f"node-{i // 8}", f"gpu-{i % 8}", held))
    return InventorySnapshot(devices=out, deviceClasses=CLASSES)


MODELS = ["Qwen/Qwen2.5-32B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct", "org/Model-17B"]


def throughput(seconds: float) -> tuple[float, float, int]:
    """(first plan seconds, warm plans per second, warm plans made)."""
    # Equal content, distinct objects: a plan cannot tell them from a fresh read of the inventory.
    requests = [request(m, fleet(), f"ns/new-{i}") for i, m in enumerate(MODELS)]
    start = time.perf_counter()
    first = plan_launch(requests[0])
    first_s = time.perf_counter() - start
    assert first.plan is not None, first.refusal
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for r in requests:
            outcome = plan_launch(r)
            assert outcome.plan is not None, outcome.refusal
        count += len(requests)
        now = time.perf_counter()
        if now >= deadline:
            break
    return first_s, count / (now - start), count


# ------------------------------------------------------------------ (b) quality

# Fallback needs: N B parameters x 2 bytes x 1.2 + 1 GiB, on an 80 GiB H100.
SIZES = [2, 3, 4, 5, 7, 9, 11, 14, 17, 20, 24, 28]


@dataclass(frozen=True)
class Order:
    model: str
    share: int  # percent of an H100 the share rule gives it


def order_shares() -> dict[str, int]:
    empty = InventorySnapshot(devices=[h100("n", "gpu-0")], deviceClasses=CLASSES)
    shares: dict[str, int] = {}
    for size in SIZES:
        model = f"org/Model-{size}B"
        outcome = plan_launch(request(model, empty, "ns/probe"))
        assert outcome.plan is not None, outcome.refusal
        shares[model] = outcome.plan.sharePercent
    return shares


def place_with_planner(orders: Sequence[Order], devices: int) -> tuple[int, int]:
    """Plan the orders one by one; each plan becomes an allocation. (placed, devices used)."""
    held: dict[str, list[DeviceAllocation]] = {f"gpu-{i}": [] for i in range(devices)}
    placed = 0
    for i, order in enumerate(orders):
        inventory = InventorySnapshot(
            devices=[h100("node-0", name, allocations) for name, allocations in held.items()], deviceClasses=CLASSES
        )
        outcome = plan_launch(request(order.model, inventory, f"ns/o{i}"))
        if outcome.plan is None:
            continue
        p = outcome.plan
        assert p.deviceCount == 1
        held[p.deviceNames[0]].append(
            DeviceAllocation(holder=f"ns/o{i}", sharePercent=p.sharePercent, memoryMiB=p.memoryRequestMiB)
        )
        placed += 1
    return placed, sum(1 for a in held.values() if a)


def ffd(sizes: Sequence[int], bins: int | None) -> tuple[int, int]:
    """First-fit-decreasing into bins of 100 (unbounded when ``bins`` is None). (placed, bins used)."""
    loads: list[int] = []
    placed = 0
    for s in sorted(sizes, reverse=True):
        for j, load in enumerate(loads):
            if load + s <= 100:
                loads[j] += s
                break
        else:
            if bins is None or len(loads) < bins:
                loads.append(s)
            else:
                continue
        placed += 1
    return placed, len(loads)


def packs(sizes: Sequence[int], bins: int) -> bool:
    """Exhaustive: do the items fit into ``bins`` bins of 100?"""
    items = sorted(sizes, reverse=True)
    if sum(items) > 100 * bins:
        return False
    loads = [0] * bins

    def place(k: int) -> bool:
        if k == len(items):
            return True
        seen: set[int] = set()
        for j in range(bins):
            if loads[j] in seen or loads[j] + items[k] > 100:
                continue
            seen.add(loads[j])  # bins of equal load are interchangeable
            loads[j] += items[k]
            if place(k + 1):
                return True
            loads[j] -= items[k]
        return False

    return place(0)


def optimal_bins(sizes: Sequence[int]) -> int:
    low = max(1, -(-sum(sizes) // 100))
    while not packs(sizes, low):
        low += 1
    return low


def optimal_count(sizes: Sequence[int], bins: int) -> int:
    """The most items that fit together: when k items fit, the k smallest do too."""
    ordered = sorted(sizes)
    best = 0
    for k in range(1, len(ordered) + 1):
        if not packs(ordered[:k], bins):
            break
        best = k
    return best


@dataclass
class Tally:
    planner: list[float]
    ffd: list[float]
    below_ffd: int = 0
    optimal: int = 0

    def line(self, label: str) -> str:
        n = len(self.planner)
        return (
            f"  {label:<34} planner mean {statistics.mean(self.planner):6.1%}  worst {min(self.planner):6.1%}  "
            f"optimal in {self.optimal}/{n}  | FFD mean {statistics.mean(self.ffd):6.1%}  worst {min(self.ffd):6.1%}"
            f"  | planner < FFD in {self.below_ffd}/{n}"
        )


def quality(instances: int, seed: int = 7) -> list[str]:
    shares = order_shares()
    models = list(shares)
    rng = random.Random(seed)
    tallies = {key: Tally([], []) for key in ("bins/random", "bins/decreasing", "count/random", "count/decreasing")}
    for _ in range(instances):
        n = rng.randint(6, 11)
        orders = [Order(m, shares[m]) for m in (rng.choice(models) for _ in range(n))]
        sizes = [o.share for o in orders]
        opt_bins = optimal_bins(sizes)
        _, ffd_bins = ffd(sizes, None)
        # Fixed fleet: fewer devices than the orders need, so some are refused.
        fleet_size = max(1, opt_bins - 1)
        opt_count = optimal_count(sizes, fleet_size)
        ffd_count, _ = ffd(sizes, fleet_size)
        for arrival in ("random", "decreasing"):
            seq = orders if arrival == "random" else sorted(orders, key=lambda o: -o.share)
            placed_all, used = place_with_planner(seq, len(orders))
            assert placed_all == len(orders)
            t = tallies[f"bins/{arrival}"]
            t.planner.append(opt_bins / used)
            t.ffd.append(opt_bins / ffd_bins)
            t.below_ffd += used > ffd_bins
            t.optimal += used == opt_bins
            placed, _ = place_with_planner(seq, fleet_size)
            t = tallies[f"count/{arrival}"]
            t.planner.append(placed / opt_count)
            t.ffd.append(ffd_count / opt_count)
            t.below_ffd += placed < ffd_count
            t.optimal += placed == opt_count
    share_table = ", ".join(f"{m.split('-')[-1]}={s}%" for m, s in shares.items())
    return [
        f"  order shares of an H100: {share_table}",
        tallies["bins/random"].line("devices used, random arrival"),
        tallies["bins/decreasing"].line("devices used, decreasing arrival"),
        tallies["count/random"].line("orders placed, random arrival"),
        tallies["count/decreasing"].line("orders placed, decreasing arrival"),
    ]


# ------------------------------------------------------------------ (c) bookings


def booked(count: int, seed: int = 3) -> list[Booking]:
    """``count`` outstanding bookings of small shares; half name the devices their plan chose."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        named = i % 2 == 0
        node = f"node-{rng.randrange(25)}"
        out.append(
            Booking(
                holder=f"ns/booked-{i}",
                deviceClass=CLASS,
                deviceCount=1,
                sharePercent=3,
                memoryMiB=1024,
                replicas=1,
                bookedAt=float(i),
                node=node if named else None,
                devices=(f"gpu-{rng.randrange(4)}",) if named else (),
            )
        )
    return out


def per_plan(plan: Callable[[], object], seconds: float) -> float:
    """Seconds a plan (at least three, then as many as ``seconds`` allows)."""
    count = 0
    start = time.perf_counter()
    while True:
        plan()
        count += 1
        elapsed = time.perf_counter() - start
        if count >= 3 and elapsed >= seconds:
            return elapsed / count


def plans_under_bookings(outstanding: Sequence[int], seconds: float) -> list[str]:
    snapshot = InventorySnapshot(
        devices=[h100(f"node-{i // 4}", f"gpu-{i % 4}", d.allocations) for i, d in enumerate(fleet(100, 5).devices)],
        deviceClasses=CLASSES,
    )

    def bare() -> object:
        outcome = plan_launch(request(MODELS[1], snapshot.model_copy(), "ns/new"))
        assert outcome.plan is not None, outcome.refusal
        return outcome

    baseline = per_plan(bare, seconds)
    lines = [f"  no bookings (baseline)  {baseline * 1000:8.2f} ms a plan"]
    for count in outstanding:
        bookings = booked(count)

        def with_bookings(bookings: list[Booking] = bookings) -> object:
            reservation = reserve(snapshot, bookings, ())
            assert not reservation.unplaced, f"{len(reservation.unplaced)} bookings had no room"
            outcome = plan_launch(request(MODELS[1], reservation.snapshot, "ns/new"))
            assert outcome.plan is not None, outcome.refusal
            return outcome

        took = per_plan(with_bookings, seconds)
        ratio = took / baseline
        lines.append(f"  {count:>5} bookings          {took * 1000:8.2f} ms a plan  ({ratio:5.1f}x the baseline)")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to measure warm throughput")
    parser.add_argument(
        "--bookings", type=int, nargs="*", default=[100, 300, 1000], help="outstanding bookings per (c) case"
    )
    parser.add_argument("--instances", type=int, default=200, help="packing instances")
    args = parser.parse_args(argv)

    first_s, per_second, count = throughput(args.seconds)
    print("(a) throughput: 1,000 GPUs, 10,000 standing allocations")
    print(f"  first plan (cold)  {first_s * 1000:8.1f} ms")
    print(
        f"  warm               {per_second:8.1f} plans/s  ({count} plans, {1000 / per_second:.1f} ms each: "
        "verdicts and recipes cached, the snapshot indexed by each plan)"
    )
    print("(c) plans under bookings: 100 shared H100 (25 nodes x 4), 5 standing allocations a device")
    for line in plans_under_bookings(args.bookings, args.seconds):
        print(line)
    print(f"(b) placement quality: {args.instances} instances of 6-11 orders, ratio to the exact optimum")
    for line in quality(args.instances):
        print(line)


if __name__ == "__main__":
    main()
