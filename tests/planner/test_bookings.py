"""Bookings (planner/bookings.py): answered plans counted against later plans until their claims are allocated."""

from __future__ import annotations

import itertools
import random

import pytest

from inference_api.plan import PlanOutcome
from inference_api.reasons import Reason
from inference_api.types import AcceleratorPolicy, PlacementType
from planner.bookings import Booking, Need, OrderClaim, needs, outstanding, prune, reserve
from planner.inventory import DeviceAllocation, DeviceClass, InventorySnapshot, occupancy, related_devices
from planner.nodes import ENDPOINT_FRONT_DEMAND
from tests.planner.helpers import (
    DEDICATED,
    H100,
    SHARED,
    SIM_CLASSES,
    WHOLE,
    cel,
    device,
    hold,
    plan,
    planned,
    policy,
    refused,
    sim_snapshot,
)

BIG = "acme/llm-20B"  # 58 % of an H100: two do not fit one
SMALL = "Qwen/Qwen2.5-32B-Instruct-AWQ"  # compiled: 24 GiB, 30 % of an H100
SHARED_CLASS = "nvidia-hopper-s3-shared"  # the four shareable H100 of gpu-h100-0
ONE_CARD = "one-card"


def one_card_snapshot(
    cards: int = 1, allocations: dict[str, list[DeviceAllocation]] | None = None
) -> InventorySnapshot:
    """``cards`` shareable H100 on node n1, all of the one class ``one-card``."""
    taken = allocations or {}
    return InventorySnapshot(
        devices=[
            device(f"gpu-{i}", "n1", H100, "hopper", 80, shareable=True, allocations=taken.get(f"n1/gpu-{i}", ()))
            for i in range(cards)
        ],
        deviceClasses=[DeviceClass(name=ONE_CARD, selectors=[cel(productName=H100)])],
    )


ONE_CARD_POLICY = policy(classes=[ONE_CARD], sharing=SHARED, placement=WHOLE)


def shared_booking(holder: str = "ns/a", memory: int = 24 * 1024, share: int = 30, **kw: object) -> Booking:
    fields: dict[str, object] = {
        "holder": holder,
        "deviceClass": SHARED_CLASS,
        "deviceCount": 1,
        "sharePercent": share,
        "memoryMiB": memory,
        "replicas": 1,
        "bookedAt": 0.0,
        "node": "gpu-h100-0",
        "devices": ("gpu-0",),
    }
    fields.update(kw)
    return Booking(**fields)  # type: ignore[arg-type]


def claim(holder: str = "ns/a", name: str = "a-0-gpu", allocated: bool = False, **kw: object) -> OrderClaim:
    fields: dict[str, object] = {"deviceClass": SHARED_CLASS, "deviceCount": 1, "memoryMiB": 24 * 1024}
    fields.update(kw)
    return OrderClaim(holder=holder, name=name, allocated=allocated, **fields)  # type: ignore[arg-type]


def allocations_of(snapshot: InventorySnapshot, key: str) -> list[DeviceAllocation]:
    return next(d for d in snapshot.devices if d.key == key).allocations


# --------------------------------------------------------------------------- of_plan, matches


def test_a_shared_plan_books_its_memory_request_and_the_devices_it_named() -> None:
    p = planned(plan(SMALL, policy(classes=[SHARED_CLASS], sharing=SHARED, placement=WHOLE)))
    booking = Booking.of_plan("ns/a", p, now=12.5)
    assert booking == Booking(
        holder="ns/a",
        deviceClass=SHARED_CLASS,
        deviceCount=1,
        sharePercent=30,
        memoryMiB=24 * 1024,
        replicas=1,
        bookedAt=12.5,
        node=p.nodeName,
        devices=tuple(p.deviceNames),
        # The pod's requests, held on the node until the pod is bound.
        # The pod: the engine's requests and the endpoint front's.
        podCpuMilli=4000 + ENDPOINT_FRONT_DEMAND.cpuMilli,
        podMemoryMiB=int(p.memory.removesuffix("Gi")) * 1024 + ENDPOINT_FRONT_DEMAND.memoryMiB,
    )


def test_a_whole_device_plan_books_the_whole_device() -> None:
    p = planned(plan("acme/llm-7B", policy(classes=["nvidia-h100-dedicated"], sharing=DEDICATED)))
    booking = Booking.of_plan("ns/a", p, now=0, replicas=3)
    assert (booking.sharePercent, booking.memoryMiB, booking.replicas) == (100, None, 3)


@pytest.mark.parametrize(
    ("request_mib", "model_mib", "expected"),
    [(1000, 2000, 1000), (None, 2000, 2000), (None, None, 24 * 1024)],
)
def test_a_share_books_what_the_claim_template_asks(
    request_mib: int | None, model_mib: int | None, expected: int
) -> None:
    p = planned(plan(SMALL, policy(classes=[SHARED_CLASS], sharing=SHARED, placement=WHOLE)))
    p = p.model_copy(update={"memoryRequestMiB": request_mib, "modelMemoryMiB": model_mib})
    # With neither, the share of the device's memory, rounded up: 30 % of 80 GiB.
    assert Booking.of_plan("ns/a", p, now=0).memoryMiB == expected


def test_a_claim_matches_a_booking_by_order_class_count_and_memory() -> None:
    booking = shared_booking()
    assert booking.matches(claim())
    assert not booking.matches(claim(holder="ns/b"))
    assert not booking.matches(claim(deviceClass="other"))
    assert not booking.matches(claim(deviceCount=2))
    assert not booking.matches(claim(memoryMiB=1024))
    assert not booking.matches(claim(memoryMiB=None))


# --------------------------------------------------------------------------- outstanding, prune


def test_outstanding_is_the_replicas_not_allocated_yet() -> None:
    booking = shared_booking(replicas=3)
    assert outstanding(booking, []) == 3
    assert outstanding(booking, [claim(name="c0"), claim(name="c1")]) == 3  # pending: not yet
    assert outstanding(booking, [claim(name="c0", allocated=True), claim(name="c1")]) == 2
    others = [claim(name="x", allocated=True, holder="ns/b"), claim(name="y", allocated=True, memoryMiB=1)]
    assert outstanding(booking, others) == 3
    allocated = [claim(name=f"c{i}", allocated=True) for i in range(4)]
    assert outstanding(booking, allocated) == 0


def test_prune_drops_settled_and_expired_bookings_and_keeps_the_rest() -> None:
    settled = shared_booking("ns/settled", bookedAt=60.0)
    expired = shared_booking("ns/old", bookedAt=0.0)
    fresh = shared_booking("ns/fresh", bookedAt=50.0)
    claims = [claim(holder="ns/settled", allocated=True), claim(holder="ns/fresh")]
    result = prune([settled, expired, fresh], claims, now=100.0, ttl=100.0)
    assert result.kept == (fresh,)
    assert result.dropped == {"ns/settled": "allocated", "ns/old": "expired"}
    # Just under the TTL it is kept.
    assert prune([expired], [], now=99.9, ttl=100.0).kept == (expired,)


# ----------------------------------------------------------------------------------- needs


def test_needs_reserve_outstanding_replicas_first_named_then_free() -> None:
    booking = shared_booking(replicas=2)
    first, second = needs([booking], [])
    assert (first.node, first.devices) == ("gpu-h100-0", ("gpu-0",))
    assert (second.node, second.devices) == (None, ())
    assert first.sharePercent == second.sharePercent == 30


def test_needs_oldest_booking_first() -> None:
    old, new = shared_booking("ns/old", bookedAt=1.0), shared_booking("ns/new", bookedAt=2.0)
    assert [n.holder for n in needs([new, old], [])] == ["ns/old", "ns/new"]


def test_a_booking_covers_its_own_pending_claims_and_no_more() -> None:
    booking = shared_booking(replicas=1)
    claims = [claim(name="a-0"), claim(name="a-1"), claim(name="a-old", memoryMiB=1024)]
    found = needs([booking], claims)
    # The booking's one replica (named), then a-1 (beyond the booking) and the old plan's claim.
    assert [(n.holder, n.memoryMiB, n.devices) for n in found] == [
        ("ns/a", 24 * 1024, ("gpu-0",)),
        ("ns/a", 24 * 1024, ()),
        ("ns/a", 1024, ()),
    ]
    # An unbooked claim's share is sized on the device it lands on; a whole claim takes a device.
    assert found[1].sharePercent is None


def test_unbooked_pending_claims_are_reserved_allocated_ones_are_not() -> None:
    claims = [claim(holder="ns/b", name="b-0"), claim(holder="ns/c", name="c-0", memoryMiB=None), claim(allocated=True)]
    assert needs([], claims) == [
        Need("ns/b", SHARED_CLASS, 1, None, 24 * 1024),
        Need("ns/c", SHARED_CLASS, 1, 100, None),
    ]


# --------------------------------------------------------------------------------- reserve


def test_nothing_to_reserve_is_the_same_snapshot() -> None:
    snapshot = sim_snapshot()
    assert reserve(snapshot, [], [claim(allocated=True)]).snapshot is snapshot


def test_a_booking_is_held_on_the_device_its_plan_named() -> None:
    snapshot = sim_snapshot()
    result = reserve(snapshot, [shared_booking(devices=("gpu-2",))], [])
    assert allocations_of(result.snapshot, "gpu-h100-0/gpu-2") == [
        DeviceAllocation(holder="ns/a", sharePercent=30, memoryMiB=24 * 1024)
    ]
    assert result.unplaced == ()
    assert [keys for _, keys in result.placed] == [("gpu-h100-0/gpu-2",)]
    # The input snapshot is not changed.
    assert allocations_of(snapshot, "gpu-h100-0/gpu-2") == []


def test_a_booking_whose_named_device_filled_up_goes_to_the_fullest_device_that_holds_it() -> None:
    full = [DeviceAllocation(holder="ns/x", sharePercent=80, memoryMiB=64 * 1024)]
    half = [DeviceAllocation(holder="ns/y", sharePercent=50, memoryMiB=40 * 1024)]
    snapshot = sim_snapshot({"gpu-h100-0/gpu-0": full, "gpu-h100-0/gpu-3": half})
    result = reserve(snapshot, [shared_booking(devices=("gpu-0",))], [])
    # gpu-3 (40 GiB free) is the best fit; gpu-1 and gpu-2 are empty.
    assert [keys for _, keys in result.placed] == [("gpu-h100-0/gpu-3",)]


def test_a_named_device_outside_the_class_or_gone_is_not_used() -> None:
    snapshot = sim_snapshot()
    gone = reserve(snapshot, [shared_booking(devices=("gpu-99",))], [])
    outside = reserve(snapshot, [shared_booking(devices=("gpu-5",))], [])  # an exclusive H100
    for result in (gone, outside):
        (keys,) = [k for _, k in result.placed]
        assert keys[0] in {f"gpu-h100-0/gpu-{i}" for i in range(4)}


def test_bookings_fill_a_card_then_the_next() -> None:
    bookings = [shared_booking(f"ns/o{i}", bookedAt=float(i), devices=("gpu-0",)) for i in range(4)]
    result = reserve(sim_snapshot(), bookings, [])
    placed = [keys[0] for _, keys in result.placed]
    # 3 x 30 % on gpu-0; the fourth does not fit there (120 %) and takes the fullest other: an empty one.
    assert placed[:3] == ["gpu-h100-0/gpu-0"] * 3
    assert placed[3] != "gpu-h100-0/gpu-0"


def test_share_and_memory_are_both_checked() -> None:
    # 90 % of the compute held with little memory: a 30 % booking does not fit for the share.
    compute = [DeviceAllocation(holder="ns/x", sharePercent=90, memoryMiB=1024)]
    # 70 GiB held with a 0 % share (a memory-only claim): a 24 GiB booking does not fit for memory.
    memory = [DeviceAllocation(holder="ns/y", sharePercent=0, memoryMiB=70 * 1024)]
    snapshot = one_card_snapshot(2, {"n1/gpu-0": compute, "n1/gpu-1": memory})
    booking = shared_booking(deviceClass=ONE_CARD, node="n1", devices=("gpu-0",))
    result = reserve(snapshot, [booking], [])
    assert result.placed == ()
    assert result.unplaced != ()


def test_a_booking_with_room_nowhere_is_left_out_and_reported() -> None:
    snapshot = one_card_snapshot(1, {"n1/gpu-0": [DeviceAllocation(holder="ns/x", sharePercent=100)]})
    booking = shared_booking(deviceClass=ONE_CARD, node="n1", devices=("gpu-0",))
    result = reserve(snapshot, [booking], [])
    assert result.unplaced == tuple(needs([booking], []))
    assert allocations_of(result.snapshot, "n1/gpu-0") == [DeviceAllocation(holder="ns/x", sharePercent=100)]


def test_a_booking_of_a_class_the_cluster_does_not_have_is_left_out() -> None:
    result = reserve(sim_snapshot(), [shared_booking(deviceClass="gone")], [])
    assert len(result.unplaced) == 1


def test_a_class_whose_selector_cannot_be_judged_holds_nothing() -> None:
    broken = DeviceClass(name="broken", selectors=['device.attributes["gpu.deckhouse.io"].nope == 1'])
    snapshot = sim_snapshot(classes=[*SIM_CLASSES, broken])
    result = reserve(snapshot, [shared_booking(deviceClass="broken", devices=())], [])
    assert len(result.unplaced) == 1


def test_a_whole_device_booking_needs_an_empty_device() -> None:
    dedicated = "nvidia-h100-dedicated"
    booking = shared_booking(deviceClass=dedicated, sharePercent=100, memoryMiB=None, devices=("gpu-4",))
    taken = {"gpu-h100-0/gpu-4": [DeviceAllocation(holder="ns/x", sharePercent=100)]}
    result = reserve(sim_snapshot(taken), [booking], [])
    ((_, keys),) = result.placed
    assert keys[0] in {"gpu-h100-0/gpu-5", "gpu-h100-0/gpu-6", "gpu-h100-0/gpu-7"}
    assert allocations_of(result.snapshot, keys[0]) == [DeviceAllocation(holder="ns/a", sharePercent=100)]


def test_a_memory_request_on_a_device_that_cannot_be_shared_takes_it_whole() -> None:
    dedicated = "nvidia-h100-dedicated"
    booking = shared_booking(deviceClass=dedicated, devices=("gpu-4",))
    result = reserve(sim_snapshot(), [booking], [])
    assert allocations_of(result.snapshot, "gpu-h100-0/gpu-4") == [DeviceAllocation(holder="ns/a", sharePercent=100)]


def test_several_devices_come_from_one_node() -> None:
    snapshot = InventorySnapshot(
        devices=[
            device(f"gpu-{i}", node, H100, "hopper", 80, shareable=True) for node in ("n1", "n2") for i in range(2)
        ]
        + [device("gpu-9", "n3", H100, "hopper", 80, shareable=True)],
        deviceClasses=[DeviceClass(name=ONE_CARD, selectors=[cel(productName=H100)])],
    )
    taken = [DeviceAllocation(holder="ns/x", sharePercent=50, memoryMiB=40 * 1024)]
    snapshot.devices[2] = snapshot.devices[2].model_copy(update={"allocations": taken})  # n2/gpu-0
    booking = shared_booking(deviceClass=ONE_CARD, deviceCount=2, node=None, devices=(), memory=30 * 1024, share=38)
    ((_, keys),) = reserve(snapshot, [booking], []).placed
    # n3 has one device; n2 is the fuller node with room on two devices.
    assert sorted(keys) == ["n2/gpu-0", "n2/gpu-1"]
    named = shared_booking(deviceClass=ONE_CARD, deviceCount=2, node="n1", devices=("gpu-0", "gpu-1"))
    ((_, keys),) = reserve(snapshot, [named], []).placed
    assert keys == ("n1/gpu-0", "n1/gpu-1")


def card_and_partition() -> InventorySnapshot:
    """A whole H100 (n1/gpu-0) and a partition of it (n1/gpu-0-mig-0), both of ONE_CARD."""
    whole = device("gpu-0", "n1", H100, "hopper", 80, shareable=False)
    part = device(
        "gpu-0-mig-0", "n1", H100, "hopper", 40, shareable=True, placement=PlacementType.PARTITION
    ).model_copy(update={"parentDevice": "gpu-0"})
    return InventorySnapshot(
        devices=[whole, part], deviceClasses=[DeviceClass(name=ONE_CARD, selectors=[cel(productName=H100)])]
    )


def test_a_partition_and_its_whole_device_exclude_each_other() -> None:
    snapshot = card_and_partition()
    on_part = shared_booking("ns/p", deviceClass=ONE_CARD, node="n1", devices=("gpu-0-mig-0",), memory=10240, share=25)
    on_whole = shared_booking(
        "ns/w", deviceClass=ONE_CARD, node="n1", devices=("gpu-0",), memoryMiB=None, sharePercent=100, bookedAt=1.0
    )
    result = reserve(snapshot, [on_part, on_whole], [])
    assert [n.holder for n in result.unplaced] == ["ns/w"]


def test_a_reservation_on_a_partition_takes_its_whole_device_from_later_bookings() -> None:
    # The first booking looks at both devices (best fit), so what each holds is known before it lands
    # on the partition; the whole device must not keep looking empty to the booking after it.
    snapshot = card_and_partition()
    anywhere = shared_booking("ns/p", deviceClass=ONE_CARD, node=None, devices=(), memory=10240, share=25)
    on_whole = shared_booking(
        "ns/w", deviceClass=ONE_CARD, node="n1", devices=("gpu-0",), memoryMiB=None, sharePercent=100, bookedAt=1.0
    )
    result = reserve(snapshot, [anywhere, on_whole], [])
    assert [(n.holder, keys) for n, keys in result.placed] == [("ns/p", ("n1/gpu-0-mig-0",))]
    assert [n.holder for n in result.unplaced] == ["ns/w"]


def test_an_unbooked_claim_is_sized_on_the_device_it_lands_on() -> None:
    pending = claim(holder="ns/b", name="b-0", memoryMiB=8 * 1024, deviceClass="nvidia-t4-mps-physical")
    result = reserve(sim_snapshot(), [], [pending])
    ((_, keys),) = result.placed
    # 8 GiB of a 16 GiB T4: 50 %.
    assert allocations_of(result.snapshot, keys[0]) == [
        DeviceAllocation(holder="ns/b", sharePercent=50, memoryMiB=8 * 1024)
    ]
    whole = claim(holder="ns/c", name="c-0", memoryMiB=None, deviceClass="nvidia-h100-dedicated")
    ((_, keys),) = reserve(sim_snapshot(), [], [whole]).placed
    assert allocations_of(reserve(sim_snapshot(), [], [whole]).snapshot, keys[0]) == [
        DeviceAllocation(holder="ns/c", sharePercent=100)
    ]


# ---------------------------------------------------------------------------- with the plans


def plan_booked(
    model: str,
    holder: str,
    bookings: list[Booking],
    snapshot: InventorySnapshot,
    accelerator_policy: AcceleratorPolicy = ONE_CARD_POLICY,
) -> PlanOutcome:
    """What the service does for one request: drop the order's booking, reserve the others', plan, book."""
    others = [b for b in bookings if b.holder != holder]
    outcome = plan(model, accelerator_policy, reserve(snapshot, others, []).snapshot, holder=holder)
    bookings[:] = others
    if outcome.plan is not None:
        bookings.append(Booking.of_plan(holder, outcome.plan, now=float(len(others))))
    return outcome


def test_two_orders_that_do_not_fit_one_card_together_get_different_answers() -> None:
    snapshot = one_card_snapshot(1)
    # Without bookings both are planned on the one card (the bug).
    assert planned(plan(BIG, ONE_CARD_POLICY, snapshot, holder="ns/a")).deviceNames == ["gpu-0"]
    assert planned(plan(BIG, ONE_CARD_POLICY, snapshot, holder="ns/b")).deviceNames == ["gpu-0"]
    bookings: list[Booking] = []
    a = planned(plan_booked(BIG, "ns/a", bookings, snapshot))
    assert (a.deviceNames, a.sharePercent) == (["gpu-0"], 58)
    refused(plan_booked(BIG, "ns/b", bookings, snapshot), Reason.NO_CAPACITY)
    # A second card: B goes there.
    two = one_card_snapshot(2)
    bookings = []
    planned(plan_booked(BIG, "ns/a", bookings, two))
    assert planned(plan_booked(BIG, "ns/b", bookings, two)).deviceNames == ["gpu-1"]


def test_a_replan_does_not_count_its_own_booking() -> None:
    snapshot = one_card_snapshot(1)
    bookings: list[Booking] = []
    a = planned(plan_booked(BIG, "ns/a", bookings, snapshot))
    # The service drops the order's booking before it plans; even unfiltered, the holder is its own.
    again = planned(plan(BIG, ONE_CARD_POLICY, reserve(snapshot, bookings, []).snapshot, holder="ns/a"))
    assert again.deviceNames == a.deviceNames


def test_a_booking_weighs_exactly_what_its_allocation_will() -> None:
    """Planning on a booking and planning on the allocation its claim gets give the same answers."""
    rng = random.Random(13)
    models = [SMALL, BIG, "acme/llm-7B", "acme/llm-13B"]
    for _ in range(5):
        arrivals = [rng.choice(models) for _ in range(8)]
        snapshot = sim_snapshot()
        bookings: list[Booking] = []
        allocated: dict[str, list[DeviceAllocation]] = {}
        pol = policy(classes=[SHARED_CLASS], sharing=SHARED, placement=WHOLE)
        for i, model in enumerate(arrivals):
            holder = f"ns/o{i}"
            booked = plan_booked(model, holder, bookings, snapshot, accelerator_policy=pol)
            real = plan(model, pol, sim_snapshot(allocated), holder=holder)
            assert booked == real
            if real.plan is not None:
                for key, held in hold(real.plan, holder).items():
                    allocated.setdefault(key, []).extend(held)


def test_no_device_is_over_committed_by_any_sequence_of_bookings() -> None:
    rng = random.Random(7)
    snapshot = sim_snapshot()
    for _ in range(20):
        bookings = [
            Booking(
                holder=f"ns/o{i}",
                deviceClass=rng.choice([c.name for c in SIM_CLASSES]),
                deviceCount=rng.choice([1, 1, 2]),
                sharePercent=(share := rng.choice([10, 30, 50, 100])),
                memoryMiB=None if share == 100 else rng.choice([2048, 8192, 24576]),
                replicas=rng.choice([1, 2]),
                bookedAt=float(i),
                node=rng.choice(["gpu-h100-0", "gpu-t4-0", None]),
                devices=tuple(rng.sample([f"gpu-{j}" for j in range(8)], 1)),
            )
            for i in range(12)
        ]
        result = reserve(snapshot, bookings, [])
        assert len(result.placed) + len(result.unplaced) == sum(b.replicas for b in bookings)
        related = related_devices(result.snapshot)
        for d in result.snapshot.devices:
            occ = occupancy(d, frozenset(), related.get(d.key, ()))
            assert occ.sharePercent <= 100
            assert sum(a.sharePercent for a in d.allocations) <= 100
            assert d.memoryMiB is None or occ.memoryMiB <= d.memoryMiB
            if not d.allowMultipleAllocations:
                assert len(d.allocations) <= 1
        for need, keys in result.placed:
            assert len(keys) == need.deviceCount
            assert len({k.split("/")[0] for k in keys}) == 1


def test_reserving_depends_on_booking_time_not_on_the_order_given() -> None:
    bookings = [shared_booking(f"ns/o{i}", bookedAt=float(i), devices=()) for i in range(6)]
    orders = list(itertools.permutations(bookings))[::97]
    results = {reserve(sim_snapshot(), list(order), []).snapshot.model_dump_json() for order in orders}
    assert len(orders) > 5
    assert len(results) == 1


def _naive_prune(bookings: list[Booking], claims: list[OrderClaim], now: float, ttl: float) -> tuple[object, ...]:
    """prune as it was before claims were indexed by holder: every booking against every claim."""
    kept, dropped = [], {}
    for booking in bookings:
        if now - booking.bookedAt >= ttl:
            dropped[booking.holder] = "expired"
        elif max(0, booking.replicas - sum(1 for c in claims if c.allocated and booking.matches(c))) == 0:
            dropped[booking.holder] = "allocated"
        else:
            kept.append(booking)
    return tuple(kept), dropped


def _naive_needs(bookings: list[Booking], claims: list[OrderClaim]) -> list[Need]:
    """needs as it was before claims were indexed by holder."""
    out: list[Need] = []
    pending = sorted((c for c in claims if not c.allocated), key=lambda c: (c.holder, c.name))
    covered: set[tuple[str, str]] = set()
    for booking in sorted(bookings, key=lambda b: (b.bookedAt, b.holder)):
        count = max(0, booking.replicas - sum(1 for c in claims if c.allocated and booking.matches(c)))
        for i in range(count):
            node, devices = booking.placement(i)
            out.append(
                Need(
                    booking.holder,
                    booking.deviceClass,
                    booking.deviceCount,
                    booking.sharePercent,
                    booking.memoryMiB,
                    node,
                    devices,
                )
            )
        mine = [c for c in pending if booking.matches(c)]
        covered.update((c.holder, c.name) for c in mine[:count])
    for c in pending:
        if (c.holder, c.name) not in covered:
            out.append(Need(c.holder, c.deviceClass, c.deviceCount, 100 if c.memoryMiB is None else None, c.memoryMiB))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_prune_and_needs_by_holder_answer_as_every_booking_against_every_claim(seed: int) -> None:
    rng = random.Random(seed)
    holders = [f"ns/o{i}" for i in range(8)]
    bookings = [
        shared_booking(
            holder,
            memoryMiB=rng.choice([None, 4096, 8192]),
            replicas=rng.randint(1, 3),
            bookedAt=rng.choice([0.0, 5.0, 50.0]),
            deviceCount=rng.choice([1, 2]),
        )
        for holder in rng.sample(holders, 6)
    ]
    claims = [
        claim(
            rng.choice(holders),
            f"c{i}",
            allocated=rng.random() < 0.5,
            memoryMiB=rng.choice([None, 4096, 8192]),
            deviceCount=rng.choice([1, 2]),
            deviceClass=rng.choice([SHARED_CLASS, "other"]),
            reserved=rng.random() < 0.1,
        )
        for i in range(rng.randint(0, 25))
    ]
    rng.shuffle(claims)
    pruned = prune(bookings, claims, now=60.0, ttl=30.0)
    assert (pruned.kept, dict(pruned.dropped)) == _naive_prune(bookings, claims, 60.0, 30.0)
    assert needs(bookings, claims) == _naive_needs(bookings, claims)
