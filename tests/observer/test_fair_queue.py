"""The round-robin queue behind the start window and the planner's queue (``planner/fairness.py``):
first come first within a namespace, namespaces in turn, one item each.

Examples for the rules, then properties over random sequences of pushes, pops and removals checked
against a plain model (a list of namespaces' FIFOs and a turn list)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from planner.fairness import FairQueue


def drain(q: FairQueue[str, int]) -> list[str]:
    out = []
    while q:
        out.append(q.popleft()[0])
    return out


def test_a_flood_of_one_namespace_does_not_hold_back_another() -> None:
    q: FairQueue[str, int] = FairQueue()
    for i in range(500):
        q.push("a", f"a{i}", i)
    q.push("b", "b0", 0)
    assert q.position("b0") == 1  # after a's first, not after a's 500
    assert drain(q)[:3] == ["a0", "b0", "a1"]


def test_namespaces_take_turns_in_the_order_they_came_and_fifo_within_one() -> None:
    q: FairQueue[str, int] = FairQueue()
    for key in ["a1", "a2", "a3"]:
        q.push("a", key, 0)
    for key in ["b1", "b2"]:
        q.push("b", key, 0)
    q.push("c", "c1", 0)
    assert list(q) == ["a1", "b1", "c1", "a2", "b2", "a3"]
    assert drain(q) == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_a_namespace_served_goes_to_the_end_of_the_turn_and_a_new_one_joins_at_the_end() -> None:
    q: FairQueue[str, int] = FairQueue()
    q.push("a", "a1", 0)
    q.push("a", "a2", 0)
    assert q.popleft()[0] == "a1"
    q.push("b", "b1", 0)  # a (served) is already at the end; b comes after it
    assert list(q) == ["a2", "b1"]


def test_a_key_pushed_again_keeps_its_place_and_takes_the_new_item() -> None:
    q: FairQueue[str, int] = FairQueue()
    q.push("a", "a1", 1)
    q.push("b", "b1", 1)
    q.push("a", "a1", 2)
    q.push("z", "a1", 3)  # its group is the first one's
    assert list(q) == ["a1", "b1"]
    assert q.get("a1") == 3
    assert q.group_of("a1") == "a"
    assert len(q) == 2


def test_a_removed_key_leaves_no_trace_and_an_emptied_namespace_leaves_the_turn() -> None:
    q: FairQueue[str, int] = FairQueue()
    q.push("a", "a1", 1)
    q.push("b", "b1", 2)
    q.push("a", "a2", 3)
    assert q.pop("b1") == 2
    assert q.pop("b1") is None
    assert q.pop("nothing", -1) == -1
    assert "b1" not in q
    assert q.groups() == {"a": 2}
    assert drain(q) == ["a1", "a2"]
    with pytest.raises(IndexError):
        q.popleft()
    with pytest.raises(KeyError):
        q.position("a1")


# ------------------------------------------------------------------------------ properties

ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from("abcd"), st.integers(0, 30)),
        st.tuples(st.just("pop"), st.just(""), st.just(0)),
        st.tuples(st.just("remove"), st.just(""), st.integers(0, 30)),
    ),
    max_size=120,
)


def model_run(steps: list[tuple[str, str, int]]) -> tuple[list[str], list[str]]:
    """Runs the steps on a FairQueue and on a plain model; returns what each popped."""
    q: FairQueue[str, int] = FairQueue()
    fifos: dict[str, list[str]] = {}
    turn: list[str] = []
    where: dict[str, str] = {}
    got, want = [], []
    for op, group, n in steps:
        key = f"k{n}"
        if op == "push":
            q.push(group, key, n)
            if key not in where:
                where[key] = group
                if group not in fifos:
                    fifos[group] = []
                    turn.append(group)
                fifos[group].append(key)
        elif op == "pop" and turn:
            got.append(q.popleft()[0])
            g = turn.pop(0)
            k = fifos[g].pop(0)
            del where[k]
            want.append(k)
            if fifos[g]:
                turn.append(g)
            else:
                del fifos[g]
        elif op == "remove":
            q.pop(key)
            g = where.pop(key, "")
            if g:
                fifos[g].remove(key)
                if not fifos[g]:
                    del fifos[g]
                    turn.remove(g)
        assert len(q) == len(where)
    return got, want


@given(ops)
def test_the_queue_serves_as_the_round_robin_model_does(steps: list[tuple[str, str, int]]) -> None:
    got, want = model_run(steps)
    assert got == want


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 40), min_size=1))
def test_a_late_comer_waits_behind_at_most_one_item_of_every_other_namespace(sizes: dict[str, int]) -> None:
    """Whatever the others queued before it, a namespace's first item is served within one turn."""
    q: FairQueue[str, int] = FairQueue()
    for group, n in sizes.items():
        for i in range(n):
            q.push(group, f"{group}{i}", i)
    q.push("late", "late0", 0)
    assert q.position("late0") <= len(sizes)
    order = drain(q)
    assert order.index("late0") <= len(sizes)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 50)), max_size=80))
def test_iteration_is_the_order_of_popleft_and_fifo_within_a_namespace(items: list[tuple[str, int]]) -> None:
    q: FairQueue[str, int] = FairQueue()
    for group, n in items:
        q.push(group, f"{group}{n}", n)
    predicted = list(q)
    assert len(predicted) == len(q)
    served = drain(q)
    assert served == predicted
    for group in "abc":
        mine = [k for k in served if k.startswith(group)]
        firsts = list(dict.fromkeys(f"{g}{n}" for g, n in items if g == group))
        assert mine == firsts


@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=200))
def test_in_any_stretch_of_pops_namespaces_with_items_waiting_differ_by_at_most_one(groups: list[str]) -> None:
    """Between two namespaces that both have items waiting the whole time, the counts served differ
    by at most one (deficit round-robin with unit costs)."""
    q: FairQueue[str, int] = FairQueue()
    for i, g in enumerate(groups):
        q.push(g, f"{g}{i}", i)
    backlog = {g: groups.count(g) for g in set(groups)}
    served: dict[str, int] = dict.fromkeys(backlog, 0)
    while q:
        key, _ = q.popleft()
        served[key[0]] += 1
        busy = [g for g in backlog if served[g] < backlog[g]]  # still waiting after this pop
        counts = [served[g] for g in busy]
        if counts:
            assert max(counts) - min(counts) <= 1


class FairQueueMachine(RuleBasedStateMachine):
    """Random interleavings: every key pushed is popped exactly once or removed, never lost or doubled."""

    def __init__(self) -> None:
        super().__init__()
        self.q: FairQueue[int, str] = FairQueue()
        self.live: dict[int, str] = {}
        self.next = 0
        self.gone: set[int] = set()

    @rule(group=st.sampled_from("xyz"))
    def push(self, group: str) -> None:
        self.q.push(group, self.next, group)
        self.live[self.next] = group
        self.next += 1

    @precondition(lambda self: bool(self.live))
    @rule()
    def pop(self) -> None:
        key, group = self.q.popleft()
        assert self.live.pop(key) == group
        self.gone.add(key)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.live)))
        assert self.q.pop(key) == self.live.pop(key)
        self.gone.add(key)

    @invariant()
    def same_keys(self) -> None:
        assert set(self.q) == set(self.live)
        assert len(self.q) == len(self.live)
        assert not (self.gone & set(self.q))
        assert self.q.groups() == {g: n for g in "xyz" if (n := list(self.live.values()).count(g))}


FairQueueMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40)
test_fair_queue_machine = FairQueueMachine.TestCase


def test_a_large_flood_of_one_namespace_is_one_group() -> None:
    q: FairQueue[str, int] = FairQueue()
    for i in range(10_000):
        q.push("a", f"a{i}", i)
    assert q.groups() == {"a": 10_000}
    assert list(q)[:2] == ["a0", "a1"]
