"""planner.preemption: pure decisions, example by example and as hypothesis properties."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference_api.payloads import OrderRef
from inference_api.preemption import MemberReport
from planner.preemption import (
    Decision,
    Hold,
    Ledger,
    Member,
    Recipient,
    decide,
    effective_replicas,
    freed_units,
    held_replicas,
    member_from_report,
    required_units,
)

LOW, NORMAL, HIGH = 100, 500, 1000


def m(key: str, priority: int, **kw: int | bool) -> Member:
    fields: dict[str, int | bool] = {"minReplicas": 1, "maxReplicas": 4, "unit": 50, "desired": 1, "placed": 1}
    fields.update(kw)
    return Member.model_validate({"key": key, "priority": priority, **fields})


def by_key(*members: Member) -> dict[str, Member]:
    return {x.key: x for x in members}


def test_need_counts_only_replicas_that_cannot_be_placed() -> None:
    assert m("a", 0, desired=3, placed=1).need == 0  # pods starting, nothing unschedulable
    assert m("a", 0, desired=3, placed=1, unschedulable=1).need == 2
    assert m("a", 0, desired=1, placed=1, unschedulable=1).need == 0


def test_a_high_order_takes_one_replica_from_a_low_one() -> None:
    members = by_key(m("low", LOW, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    decision = decide(members, Ledger())
    assert decision.ceilings == {"low": 2}
    assert decision.ledger.holds == (Hold(donor="low", recipient="high", replicas=1),)
    assert decision.ledger.recipients == (Recipient(key="high", baseUnits=50),)
    assert decision.preempted == ("high",)
    assert decision.blocked == {}
    assert held_replicas(decision.ledger) == {"low": 1}


def test_a_decision_repeated_on_the_same_reports_changes_nothing() -> None:
    members = by_key(m("low", LOW, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    first = decide(members, Ledger())
    again = decide(members, first.ledger)
    assert again.ledger == first.ledger
    assert not again.changed
    assert again.preempted == ()


def test_while_pods_move_the_same_shortage_is_not_taken_twice() -> None:
    members = by_key(m("low", LOW, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    ledger = decide(members, Ledger()).ledger
    # The donor scaled down, the recipient's pod is still pending: nothing more is taken.
    moving = by_key(m("low", LOW, desired=2, placed=2), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    assert not decide(moving, ledger).changed
    # Placed: still nothing.
    placed = by_key(m("low", LOW, desired=2, placed=2), m("high", HIGH, desired=2, placed=2))
    assert not decide(placed, ledger).changed


def test_when_demand_falls_the_donor_is_restored() -> None:
    members = by_key(m("low", LOW, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    ledger = decide(members, Ledger()).ledger
    shrunk = by_key(m("low", LOW, desired=2, placed=2), m("high", HIGH, desired=1, placed=2))
    decision = decide(shrunk, ledger)
    assert decision.ceilings == {"low": None}
    assert decision.ledger == Ledger()
    assert decision.released == (Hold(donor="low", recipient="high", replicas=1),)


def test_a_partial_fall_gives_back_part() -> None:
    members = by_key(m("low", LOW, desired=4, placed=4), m("high", HIGH, desired=4, placed=1, unschedulable=1))
    first = decide(members, Ledger())
    assert first.ceilings == {"low": 1}
    assert first.ledger.held_for("high") == 3
    fell = by_key(m("low", LOW, desired=1, placed=1), m("high", HIGH, desired=3, placed=4))
    second = decide(fell, first.ledger)
    assert second.ceilings == {"low": 2}
    assert second.ledger.held_for("high") == 2


def test_the_lowest_priority_gives_first() -> None:
    members = by_key(
        m("normal", NORMAL, desired=2, placed=2),
        m("low", LOW, desired=2, placed=2),
        m("high", HIGH, desired=2, placed=1, unschedulable=1),
    )
    decision = decide(members, Ledger())
    assert decision.ceilings == {"low": 1}


def test_equal_priority_never_gives() -> None:
    members = by_key(m("peer", HIGH, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    decision = decide(members, Ledger())
    assert decision.ledger.holds == ()
    assert "high" in decision.blocked
    assert "minReplicas" in decision.blocked["high"]


def test_a_donor_at_its_minimum_gives_nothing_and_the_recipient_is_blocked() -> None:
    members = by_key(
        m("low", LOW, minReplicas=2, desired=2, placed=2), m("high", HIGH, desired=3, placed=1, unschedulable=1)
    )
    decision = decide(members, Ledger())
    assert decision.ceilings == {}
    assert decision.blocked["high"].startswith("the autoscaler wants 3 replica(s), 1 placed; 2 more")


def test_donors_exhausted_part_way_take_what_there_is_and_block() -> None:
    members = by_key(m("low", LOW, desired=2, placed=2), m("high", HIGH, desired=4, placed=1, unschedulable=1))
    decision = decide(members, Ledger())
    assert decision.ceilings == {"low": 1}
    assert "2 more cannot be placed" in decision.blocked["high"]
    # Demand falls to what was freed: unblocked, hold kept.
    fell = by_key(m("low", LOW, desired=1, placed=1), m("high", HIGH, desired=2, placed=2))
    after = decide(fell, decision.ledger)
    assert after.blocked == {}
    assert after.ledger.holds == decision.ledger.holds


def test_units_small_donor_replicas_make_up_a_large_one() -> None:
    members = by_key(
        m("low", LOW, unit=25, desired=4, placed=4),
        m("high", HIGH, unit=50, desired=2, placed=1, unschedulable=1),
    )
    decision = decide(members, Ledger())
    assert decision.ceilings == {"low": 2}
    assert decision.ledger.held_for("high") == 2


def test_units_a_large_donor_replica_is_not_joined_by_a_needless_small_one() -> None:
    members = by_key(
        m("lowest", 1, unit=25, desired=2, placed=2),
        m("low", 2, unit=50, desired=2, placed=2),
        m("high", HIGH, unit=50, desired=2, placed=1, unschedulable=1),
    )
    decision = decide(members, Ledger())
    # 25 from "lowest" was not enough, 50 from "low" is; then the 25 is needless and given back.
    assert decision.ledger.holds == (Hold(donor="low", recipient="high", replicas=1),)
    assert decision.ceilings == {"low": 1}


def test_a_donor_running_below_its_ceiling_is_lowered_from_what_it_runs() -> None:
    ledger = Ledger(
        holds=(Hold(donor="low", recipient="high", replicas=1),),
        recipients=(Recipient(key="high", baseUnits=50),),
        ceilings={"low": 3},
    )
    members = by_key(m("low", LOW, desired=1, placed=2), m("high", HIGH, desired=3, placed=2, unschedulable=1))
    decision = decide(members, ledger)
    assert decision.ceilings == {"low": 1}
    assert decision.ledger.held_for("high") == 2


def test_capacity_coming_back_restores_the_donor() -> None:
    members = by_key(
        m("other", NORMAL, desired=2, placed=2),
        m("low", LOW, desired=3, placed=3),
        m("high", HIGH, desired=2, placed=1, unschedulable=1),
    )
    # "other" could give too (NORMAL < HIGH), but LOW gives first.
    ledger = decide(members, Ledger()).ledger
    assert ledger.ceilings == {"low": 2}
    settled = by_key(
        m("other", NORMAL, desired=2, placed=2),
        m("low", LOW, desired=2, placed=2),
        m("high", HIGH, desired=2, placed=2),
    )
    shrunk = dict(settled, other=m("other", NORMAL, desired=1, placed=1))
    freed = freed_units(settled["other"], shrunk["other"], ledger)
    assert freed == 50
    decision = decide(shrunk, ledger, freed)
    assert decision.ceilings == {"low": None}
    # What came back covers all the recipient is owed: it is no recipient any more.
    assert decision.ledger == Ledger()


def test_capacity_coming_back_goes_to_a_blocked_recipient_first() -> None:
    members = by_key(
        m("other", NORMAL, desired=1, placed=1),
        m("low", LOW, desired=2, placed=2),
        m("high", HIGH, desired=3, placed=1, unschedulable=1),
    )
    # "other" (NORMAL) is a donor too, but at its minimum; "low" gives one; one more is missing.
    first = decide(members, Ledger())
    assert "high" in first.blocked
    assert first.ceilings == {"low": 1}
    gone = {k: v for k, v in members.items() if k != "other"}
    freed = freed_units(members["other"], None, first.ledger)
    second = decide(gone, first.ledger, freed)
    assert second.blocked == {}
    assert second.ceilings == {}  # the freed replica went to the recipient, the donor stays held


def test_freed_units() -> None:
    ledger = Ledger(
        holds=(Hold(donor="d", recipient="r", replicas=1),),
        recipients=(Recipient(key="r", baseUnits=100),),
        ceilings={"d": 2},
    )
    # A donor scaling down to its ceiling frees nothing (that capacity moved to the recipient).
    assert freed_units(m("d", LOW, placed=3), m("d", LOW, placed=2), ledger) == 0
    # ...below its ceiling, it does.
    assert freed_units(m("d", LOW, placed=2), m("d", LOW, placed=1), ledger) == 50
    # A recipient's own changes are tracked through its base; leaving frees the base.
    assert freed_units(m("r", HIGH, placed=3), m("r", HIGH, placed=1), ledger) == 0
    assert freed_units(m("r", HIGH, placed=3), None, ledger) == 100
    # Anyone else: what it ran.
    assert freed_units(m("x", NORMAL, placed=3, unit=25), None, ledger) == 75
    assert freed_units(None, m("x", NORMAL), ledger) == 0
    assert freed_units(m("x", NORMAL, placed=1), m("x", NORMAL, placed=2), ledger) == 0


def test_holds_of_a_departed_member_go() -> None:
    members = by_key(m("low", LOW, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    ledger = decide(members, Ledger()).ledger
    without_recipient = decide({"low": members["low"]}, ledger)
    assert without_recipient.ceilings == {"low": None}
    assert without_recipient.ledger == Ledger()
    without_donor = decide({"high": members["high"]}, ledger)
    assert without_donor.ceilings == {"low": None}
    assert "high" in without_donor.blocked


def test_a_priority_change_that_breaks_the_order_releases_the_hold() -> None:
    members = by_key(m("low", LOW, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    ledger = decide(members, Ledger()).ledger
    promoted = dict(members, low=m("low", HIGH, desired=2, placed=2))
    decision = decide(promoted, ledger)
    assert decision.ceilings == {"low": None}


def test_a_raised_minimum_gives_back_down_to_the_floor() -> None:
    members = by_key(m("low", LOW, desired=4, placed=4), m("high", HIGH, desired=4, placed=1, unschedulable=1))
    ledger = decide(members, Ledger()).ledger
    assert ledger.ceilings == {"low": 1}
    raised = dict(members, low=m("low", LOW, minReplicas=3, desired=1, placed=1))
    decision = decide(raised, ledger)
    assert decision.ledger.ceilings == {"low": 3}


def test_a_held_donor_that_wants_more_is_blocked_by_the_preemption() -> None:
    members = by_key(m("low", LOW, desired=3, placed=3), m("high", HIGH, desired=2, placed=1, unschedulable=1))
    ledger = decide(members, Ledger()).ledger
    wanting = dict(members, low=m("low", LOW, desired=2, placed=2, limited=True))
    decision = decide(wanting, ledger)
    assert decision.blocked["low"].startswith("held at 2 replica(s) (class maxReplicas 4)")
    # At its class maximum, wanting more is the class's bound, not preemption's.
    alone = decide(by_key(m("x", LOW, desired=4, placed=4, limited=True)), Ledger())
    assert alone.blocked == {}


def test_member_from_report() -> None:
    report = MemberReport(
        ref=OrderRef(namespace="ns", name="a", uid="u"),
        workflowId="order/ns/a/u",
        deviceClass="dc",
        sequence=1,
        priority=7,
        minReplicas=1,
        maxReplicas=3,
        unit=0,
        desired=2,
        placed=1,
        unschedulable=1,
        limited=True,
    )
    member = member_from_report(report)
    assert member.key == "order/ns/a/u"
    assert member.unit == 1
    assert member.need == 1
    assert member.limited


# ---------------------------------------------------------------- properties

# PREEMPTION_EXAMPLES=3000 for a longer search (it passed with 3000 when written).
EXAMPLES = int(os.environ.get("PREEMPTION_EXAMPLES", "300"))
PRIORITIES = st.sampled_from([0, LOW, NORMAL, HIGH])


@st.composite
def members_strategy(draw: st.DrawFn) -> dict[str, Member]:
    count = draw(st.integers(1, 6))
    out: dict[str, Member] = {}
    for i in range(count):
        low = draw(st.integers(1, 3))
        high = draw(st.integers(low, 6))
        placed = draw(st.integers(0, high))
        desired = draw(st.integers(low, high))
        out[f"o{i}"] = Member(
            key=f"o{i}",
            priority=draw(PRIORITIES),
            minReplicas=low,
            maxReplicas=high,
            unit=draw(st.sampled_from([25, 50, 100])),
            desired=desired,
            placed=placed,
            unschedulable=draw(st.integers(0, 2)) if desired > placed else 0,
            limited=draw(st.booleans()),
        )
    return out


def evolve(data: st.DataObject, members: Mapping[str, Member], ledger: Ledger) -> dict[str, Member]:
    """The cluster moves: a donor obeys its ceiling, autoscalers and the scheduler change their minds."""
    draw = data.draw
    out: dict[str, Member] = {}
    for key, member in members.items():
        if draw(st.integers(0, 9)) == 0:
            continue  # left
        ceiling = ledger.ceilings.get(key)
        top = member.maxReplicas if ceiling is None else ceiling
        desired = draw(st.integers(0, top))
        placed = draw(st.integers(0, max(0, top)))
        out[key] = member.model_copy(
            update={
                "desired": desired,
                "placed": placed,
                "unschedulable": draw(st.integers(0, 2)) if desired > placed else 0,
                "limited": draw(st.booleans()),
            }
        )
    return out


def check_invariants(members: Mapping[str, Member], decision: Decision) -> None:
    ledger = decision.ledger
    recipients = {r.key: r.baseUnits for r in ledger.recipients}
    donors_with_holds = {h.donor for h in ledger.holds}
    assert set(ledger.ceilings) == donors_with_holds
    for hold in ledger.holds:
        # Never to an equal or lower priority.
        assert members[hold.donor].priority < members[hold.recipient].priority
        assert hold.recipient in recipients
        assert hold.replicas >= 1
    for donor, ceiling in ledger.ceilings.items():
        # Never below minReplicas.
        assert ceiling >= members[donor].minReplicas
    for key, base in recipients.items():
        required = required_units(members[key], base)
        held_units = sum(h.replicas * members[h.donor].unit for h in ledger.holds if h.recipient == key)
        # Frees no more than needed: no single held replica could be given back.
        for hold in ledger.holds:
            if hold.recipient == key:
                assert held_units - members[hold.donor].unit < required
        if held_units < required:
            # Blocked only when every lower-priority order is at its floor.
            assert key in decision.blocked
            for other in members.values():
                if other.priority < members[key].priority:
                    assert effective_replicas(other, ledger.ceilings.get(other.key)) <= other.minReplicas
    # Stable: the same reports again change nothing.
    again = decide(members, ledger)
    assert not again.changed
    assert again.ledger == ledger
    assert again.blocked == decision.blocked


@settings(max_examples=EXAMPLES, deadline=None)
@given(members_strategy())
def test_property_one_decision_keeps_every_invariant(members: dict[str, Member]) -> None:
    check_invariants(members, decide(members, Ledger()))


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(st.data(), members_strategy(), st.integers(1, 6))
def test_property_invariants_hold_over_a_run_of_decisions(
    data: st.DataObject, members: dict[str, Member], steps: int
) -> None:
    ledger = Ledger()
    for _ in range(steps):
        decision = decide(members, ledger)
        check_invariants(members, decision)
        ledger = decision.ledger
        following = evolve(data, members, ledger)
        freed = sum(freed_units(members[k], following.get(k), ledger) for k in members)
        members = following
        decision = decide(members, ledger, freed)
        check_invariants(members, decision)
        ledger = decision.ledger


@settings(max_examples=EXAMPLES, deadline=None)
@given(members_strategy())
def test_property_when_demand_falls_every_donor_is_restored(members: dict[str, Member]) -> None:
    first = decide(members, Ledger())
    fallen = {
        key: member.model_copy(update={"desired": min(member.desired, member.placed), "unschedulable": 0})
        for key, member in members.items()
    }
    # Demand at or below what each recipient had without help.
    for recipient in first.ledger.recipients:
        member = fallen[recipient.key]
        fallen[recipient.key] = member.model_copy(update={"desired": recipient.baseUnits // member.unit})
    after = decide(fallen, first.ledger)
    assert after.ledger.holds == ()
    assert after.ledger.ceilings == {}
    assert all(after.ceilings[d] is None for d in first.ledger.ceilings)
    assert after.blocked == {}


@settings(max_examples=EXAMPLES, deadline=None)
@given(members_strategy())
def test_property_a_fall_in_demand_never_lowers_a_donor(members: dict[str, Member]) -> None:
    first = decide(members, Ledger())
    lowered = {k: v.model_copy(update={"desired": max(0, v.desired - 1)}) for k, v in members.items()}
    after = decide(lowered, first.ledger)
    # A held replica may pass from one recipient to another; no donor goes lower, none is added.
    for donor, ceiling in after.ledger.ceilings.items():
        assert donor in first.ledger.ceilings
        assert ceiling >= first.ledger.ceilings[donor]
    assert sum(held_replicas(after.ledger).values()) <= sum(held_replicas(first.ledger).values())
    assert after.preempted == () or set(after.preempted) <= set(first.blocked)


@pytest.mark.parametrize("placed", [0, 1, 2])
def test_effective_replicas(placed: int) -> None:
    member = m("a", 0, placed=placed)
    assert effective_replicas(member, None) == placed
    assert effective_replicas(member, 1) == min(placed, 1)
