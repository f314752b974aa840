"""The planner service's bookings (BookingLedger) with a stand-in inventory, and the order claims the
informers read (worker/observer/inventory.py's ``order_claim``). Against the real API server:
test_bookings_cluster.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from starlette.testclient import TestClient

from activities.inventory import claim_key
from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome
from inference_api.reasons import Reason
from inference_api.settings import PlannerSettings
from planner.bookings import OrderClaim
from planner.inventory import DeviceAllocation, InventorySnapshot
from planner.recipes import load_recipe_book
from planner.service import BookingLedger, create_app
from tests.planner.helpers import SHARED, WHOLE, policy
from tests.planner.test_bookings import BIG, ONE_CARD, one_card_snapshot
from tests.planner_service.fakes import ALLOWED, FakeReviewer
from worker.observer.inventory import order_claim, order_claims

PATH = "/api/v1/launch-plan"
POLICY = policy(classes=[ONE_CARD], sharing=SHARED, placement=WHOLE)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """What the informers would show: a snapshot and the order claims of the same state."""

    def __init__(self, cards: int = 1) -> None:
        self.cards = cards
        self.allocations: dict[str, list[DeviceAllocation]] = {}
        self.claims: list[OrderClaim] = []
        self.views = 0

    def view(self) -> tuple[InventorySnapshot, Sequence[OrderClaim]]:
        self.views += 1
        return one_card_snapshot(self.cards, self.allocations), list(self.claims)

    def __call__(self) -> InventorySnapshot:
        return self.view()[0]

    def allocate(self, holder: str, outcome: PlanOutcome, name: str) -> None:
        """The order's claim, allocated where the plan said (the scheduler's choice, here)."""
        assert outcome.plan is not None
        p = outcome.plan
        self.claims = [c for c in self.claims if c.name != name]
        self.claims.append(OrderClaim(holder, name, p.deviceClass, p.deviceCount, p.memoryRequestMiB, allocated=True))
        for device in p.deviceNames:
            self.allocations.setdefault(f"{p.nodeName}/{device}", []).append(
                DeviceAllocation(holder=holder, sharePercent=0, memoryMiB=p.memoryRequestMiB)
            )

    def release(self, name: str) -> None:
        holder = next(c.holder for c in self.claims if c.name == name)
        self.claims = [c for c in self.claims if c.name != name]
        for key, held in self.allocations.items():
            self.allocations[key] = [a for a in held if a.holder != holder]


def request(holder: str | None, model: str = BIG) -> LaunchPlanRequest:
    return LaunchPlanRequest(facts=OrderFacts(modelName=model), acceleratorPolicy=POLICY, holder=holder)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def http(cluster: Cluster, clock: Clock) -> Iterator[TestClient]:
    with TestClient(create_app(cluster, FakeReviewer(), clock=clock, booking_ttl=600)) as client:
        yield client


def post(http: TestClient, body: LaunchPlanRequest) -> PlanOutcome:
    response = http.post(PATH, content=body.model_dump_json(), headers={"Authorization": f"Bearer {ALLOWED}"})
    assert response.status_code == 200, response.text
    return PlanOutcome.model_validate_json(response.content)


def test_the_second_of_two_orders_planned_back_to_back_is_refused(http: TestClient) -> None:
    assert post(http, request("ns/a")).plan is not None
    refusal = post(http, request("ns/b")).refusal
    assert refusal is not None
    assert refusal.reason is Reason.NO_CAPACITY


def test_allocated_claims_settle_the_booking_and_count_once(http: TestClient, cluster: Cluster) -> None:
    a = post(http, request("ns/a"))
    cluster.claims.append(OrderClaim("ns/a", "a-0-gpu", ONE_CARD, 1, a.plan.memoryRequestMiB if a.plan else None))
    assert post(http, request("ns/b")).refusal is not None  # a pending claim: still booked
    cluster.allocate("ns/a", a, "a-0-gpu")
    # Booking dropped, allocation counted: a 24 GiB order fits beside A (it would not, counted twice).
    assert post(http, request("ns/c", "Qwen/Qwen2.5-32B-Instruct-AWQ")).plan is not None
    assert post(http, request("ns/b")).refusal is not None
    cluster.release("a-0-gpu")
    assert post(http, request("ns/b")).plan is not None


def test_a_replan_replaces_the_orders_booking(http: TestClient) -> None:
    first = post(http, request("ns/a"))
    again = post(http, request("ns/a"))
    assert again == first
    assert post(http, request("ns/b")).refusal is not None


def test_a_refusal_books_nothing_and_a_refused_replan_frees_the_old_booking(http: TestClient) -> None:
    assert post(http, request("ns/a")).plan is not None
    # A replan of A that is refused (a model bigger than the card) drops A's booking.
    assert post(http, request("ns/a", "acme/giant-405B")).refusal is not None
    assert post(http, request("ns/b")).plan is not None


def test_a_booking_expires_after_the_ttl(http: TestClient, clock: Clock) -> None:
    assert post(http, request("ns/a")).plan is not None
    clock.now += 599
    assert post(http, request("ns/b")).refusal is not None
    clock.now += 1
    assert post(http, request("ns/b")).plan is not None


def test_a_request_without_a_holder_books_nothing(http: TestClient) -> None:
    assert post(http, request(None)).plan is not None
    assert post(http, request(None)).plan is not None
    assert post(http, request("ns/a")).plan is not None


def test_unbooked_pending_claims_count_after_a_restart(http: TestClient, cluster: Cluster) -> None:
    """A claim of an order no booking covers (the planner restarted after planning it) holds its class."""
    cluster.claims.append(OrderClaim("ns/old", "old-0-gpu", ONE_CARD, 1, 47 * 1024))
    assert post(http, request("ns/b")).refusal is not None
    # The order's own pending claim does not count against its replan.
    assert post(http, request("ns/old")).plan is not None


def test_a_plain_inventory_reader_gets_no_bookings(clock: Clock) -> None:
    cluster = Cluster()
    with TestClient(create_app(lambda: cluster.view()[0], FakeReviewer(), clock=clock)) as http:
        assert post(http, request("ns/a")).plan is not None
        assert post(http, request("ns/b")).plan is not None


def test_concurrent_plans_never_over_commit() -> None:
    """Eight orders at once on three cards that each hold one: three planned, one a card, five refused."""
    cluster = Cluster(cards=3)
    ledger = BookingLedger(600, clock=Clock())
    book = load_recipe_book()
    outcomes: dict[str, PlanOutcome] = {}
    lock = threading.Lock()

    def one(holder: str) -> None:
        outcome = ledger.plan(cluster.view, request(holder), book)
        with lock:
            outcomes[holder] = outcome

    threads = [threading.Thread(target=one, args=(f"ns/o{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    placed = {holder: o.plan for holder, o in outcomes.items() if o.plan is not None}
    assert len(outcomes) == 8
    assert sorted(p.deviceNames[0] for p in placed.values()) == ["gpu-0", "gpu-1", "gpu-2"]
    assert {b.holder for b in ledger.bookings()} == set(placed)


def test_the_ledger_refuses_a_ttl_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        BookingLedger(0)


def test_the_setting_defaults_to_ten_minutes_and_stays_out_of_the_fingerprint() -> None:
    settings = PlannerSettings()
    assert settings.bookingTTLSeconds == 600
    assert "bookingTTLSeconds" not in settings.model_dump()
    with pytest.raises(ValueError, match="greater than 0"):
        PlannerSettings(bookingTTLSeconds=0)


# ------------------------------------------------------------------------------ order claims


# The claim an order's pod was given (its status.resourceClaimStatuses): what makes it the order's.
GIVEN = {claim_key("ns", "llm-0-gpu-x1"): "llm"}


def claim_obj(**over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "llm-0-gpu-x1", "namespace": "ns", "labels": {"ai.deckhouse.io/inference-service": "llm"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "cls",
                            "allocationMode": "ExactCount",
                            "count": 2,
                            "capacity": {"requests": {"gpu.deckhouse.io/memory": "24Gi"}},
                        },
                    }
                ]
            }
        },
    }
    obj.update(over)
    return obj


def test_an_order_claim_is_read_from_its_template_shape() -> None:
    assert order_claim(claim_obj(), GIVEN) == OrderClaim("ns/llm", "llm-0-gpu-x1", "cls", 2, 24 * 1024, allocated=False)
    allocated = claim_obj(status={"allocation": {"devices": {"results": []}}})
    assert order_claim(allocated, GIVEN) == OrderClaim("ns/llm", "llm-0-gpu-x1", "cls", 2, 24 * 1024, allocated=True)


def test_a_whole_device_claim_has_no_memory_and_a_count_of_one_by_default() -> None:
    obj = claim_obj()
    obj["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "cls"}
    assert order_claim(obj, GIVEN) == OrderClaim("ns/llm", "llm-0-gpu-x1", "cls", 1, None)


def test_a_claim_is_the_order_whose_pod_was_given_it_or_reserves_it() -> None:
    given = order_claim(claim_obj(metadata={"name": "c", "namespace": "ns"}), {claim_key("ns", "c"): "llm"})
    assert given is not None
    assert given.holder == "ns/llm"
    reserved = claim_obj(
        metadata={"name": "c", "namespace": "ns"},
        status={"reservedFor": [{"resource": "pods", "name": "llm-1"}]},
    )
    assert order_claim(reserved, {("ns", "llm-1"): "llm"}) is not None
    assert order_claim(claim_obj(metadata={"name": "c", "namespace": "ns"}), {("ns", "x"): "llm"}) is None


def test_a_claim_a_tenant_labels_or_owns_as_an_orders_is_no_orders() -> None:
    """Before, a pending claim carrying an order's label was counted as that order's replica, and
    the planner reserved capacity for it: a claim's label and ownerReferences are anyone's to write."""
    forged = claim_obj(
        metadata={
            "name": "mine",
            "namespace": "ns",
            "labels": {"ai.deckhouse.io/inference-service": "llm"},
            "ownerReferences": [{"kind": "Pod", "name": "llm-0", "uid": "pod-uid", "controller": True}],
        }
    )
    assert order_claim(forged, {("ns", "llm-0"): "llm", claim_key("ns", "llm-0-gpu-x1"): "llm"}) is None
    assert order_claims([forged, claim_obj()], GIVEN) == [OrderClaim("ns/llm", "llm-0-gpu-x1", "cls", 2, 24 * 1024)]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda o: o["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
        lambda o: o["spec"]["devices"]["requests"].append(o["spec"]["devices"]["requests"][0]),
        lambda o: o["spec"]["devices"].update(requests=[]),
        lambda o: o["spec"]["devices"]["requests"][0].update(exactly={"count": 1}),
        lambda o: o["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"].update(
            {"gpu.deckhouse.io/memory": "lots"}
        ),
    ],
    ids=["deleting", "two-requests", "no-request", "no-class", "bad-quantity"],
)
def test_claims_the_bookings_cannot_read_are_left_out(spoil: Any) -> None:
    obj = claim_obj()
    spoil(obj)
    assert order_claim(obj, GIVEN) is None
    assert order_claims([obj, claim_obj()], GIVEN) == [OrderClaim("ns/llm", "llm-0-gpu-x1", "cls", 2, 24 * 1024)]


def test_a_steered_claim_is_read_from_its_first_alternative() -> None:
    """An autoscaled order's claim asks its planned devices first, then any of the class
    (``firstAvailable``): every alternative has the same class, count and capacity, so the bookings
    read the first. A claim of that shape read as None was left out of the bookings while unallocated."""
    obj = claim_obj()
    exactly = obj["spec"]["devices"]["requests"][0].pop("exactly")
    planned = {
        **exactly,
        "name": "planned",
        "selectors": [{"cel": {"expression": "device.attributes['x'].uuid in ['a']"}}],
    }
    obj["spec"]["devices"]["requests"][0]["firstAvailable"] = [planned, {**exactly, "name": "any"}]
    assert order_claim(obj, GIVEN) == OrderClaim("ns/llm", "llm-0-gpu-x1", "cls", 2, 24 * 1024, allocated=False)
