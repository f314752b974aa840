"""The planner's queue serves namespaces in turn (issue 33, "No fairness"): one namespace's flood of
launch-plan requests does not put another namespace's request behind all of its own.

Through the real app (ASGI, the real planning library and booking ledger) with an inventory whose
read takes a while, as the informers' lock or a big cluster does; and the gate itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import httpx
import pytest

from inference_api.plan import LaunchPlanRequest, OrderFacts
from planner import InventorySnapshot
from planner.bookings import OrderClaim
from planner.fairness import FairGate
from planner.service import create_app
from tests.planner.helpers import DEFAULT_LLM, sim_snapshot
from tests.planner_service.fakes import ALLOWED, FakeReviewer

PATH = "/api/v1/launch-plan"


class SlowView:
    """The informers' view (so the app books its plans), each read taking ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.snapshot = sim_snapshot()

    def view(self) -> tuple[InventorySnapshot, Sequence[OrderClaim]]:
        time.sleep(self.seconds)
        return self.snapshot, []

    def __call__(self) -> InventorySnapshot:
        return self.view()[0]


def request(holder: str) -> bytes:
    body = LaunchPlanRequest(
        facts=OrderFacts(modelName="Qwen/Qwen2.5-0.5B-Instruct"), acceleratorPolicy=DEFAULT_LLM, holder=holder
    )
    return body.model_dump_json().encode()


async def flood_then_one(flood: int, seconds: float) -> tuple[int, list[str]]:
    """``flood`` requests of namespace a, then one of b once a's wait: b's place among the answers."""
    app = create_app(SlowView(seconds), FakeReviewer())
    answered: list[str] = []
    headers = {"Authorization": f"Bearer {ALLOWED}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://planner") as client:

        async def plan(holder: str) -> None:
            response = await client.post(PATH, content=request(holder), headers=headers)
            assert response.status_code == 200, response.text
            answered.append(holder)

        # One first, so the caller's review is cached and every later request goes straight to the queue.
        await plan("a/warm-up")
        answered.clear()
        tasks = [asyncio.create_task(plan(f"a/order-{i}")) for i in range(flood)]
        await asyncio.sleep(seconds * 2)  # a's are queued (one is being planned)
        tasks.append(asyncio.create_task(plan("b/lone")))
        await asyncio.gather(*tasks)
    return answered.index("b/lone"), answered


async def test_a_flood_of_one_namespace_does_not_put_another_namespaces_plan_behind_it() -> None:
    rank, answered = await flood_then_one(flood=60, seconds=0.01)
    # b waited for the plan under way and at most one more of a's, not for a's 60.
    assert rank <= 3, answered[: rank + 1]
    # a's were still planned in their order.
    mine = [h for h in answered if h.startswith("a/")]
    assert mine == sorted(mine, key=lambda h: int(h.rsplit("-", 1)[1]))


async def test_the_gate_lets_groups_in_by_turn_and_no_more_than_its_capacity() -> None:
    gate = FairGate(capacity=2)
    inside = 0
    most = 0
    order: list[str] = []
    release = asyncio.Event()

    async def hold(group: str, name: str) -> None:
        nonlocal inside, most
        async with gate.turn(group):
            inside += 1
            most = max(most, inside)
            order.append(name)
            await release.wait()
            inside -= 1

    tasks = [asyncio.create_task(hold("a", f"a{i}")) for i in range(5)]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(hold("b", "b0")), asyncio.create_task(hold("c", "c0"))]
    await asyncio.sleep(0.01)
    assert order == ["a0", "a1"]
    assert gate.waiting == 5
    assert gate.waiting_by_group() == {"a": 3, "b": 1, "c": 1}
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["a0", "a1", "a2", "b0", "c0", "a3", "a4"]
    assert most == 2
    assert gate.holders == 0
    assert gate.waiting == 0


async def test_a_waiter_cancelled_leaves_no_place_taken() -> None:
    gate = FairGate(capacity=1)
    release = asyncio.Event()
    entered: list[str] = []

    async def hold(name: str) -> None:
        async with gate.turn(name[0]):
            entered.append(name)
            await release.wait()

    first = asyncio.create_task(hold("a0"))
    await asyncio.sleep(0)
    gone = asyncio.create_task(hold("b0"))
    last = asyncio.create_task(hold("c0"))
    await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, last)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert entered == ["a0", "c0"]
    assert gate.holders == 0


async def test_a_waiter_cancelled_as_its_turn_comes_passes_the_place_on() -> None:
    gate = FairGate(capacity=1)
    entered: list[str] = []

    async def hold(name: str) -> None:
        async with gate.turn(name[0]):
            entered.append(name)
            await asyncio.sleep(0)

    release = asyncio.Event()

    async def first() -> None:
        async with gate.turn("a"):
            await release.wait()

    holder = asyncio.create_task(first())
    await asyncio.sleep(0)
    unlucky = asyncio.create_task(hold("b0"))
    after = asyncio.create_task(hold("c0"))
    await asyncio.sleep(0)
    release.set()
    await asyncio.sleep(0)  # the holder leaves: b0's future gets the place ...
    unlucky.cancel()  # ... and b0 is cancelled before it runs
    await asyncio.gather(holder, after, return_exceptions=True)
    assert unlucky.cancelled()
    assert entered == ["c0"]
    assert gate.holders == 0


def test_a_gate_needs_a_place() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        FairGate(0)
