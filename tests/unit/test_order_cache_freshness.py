"""When the worker's informer cache may answer a read of an order or a class (activities/order_cache.py)."""

from __future__ import annotations

from typing import Any

import pytest

from activities.order_cache import class_fresh_enough, order_fresh_enough


def order(uid: str = "u1", generation: int = 2, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "o", "namespace": "n", "uid": uid, "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T08:00:00Z"
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("cached", "uid", "generation", "deleting", "answers"),
    [
        (order(), "u1", 2, False, True),  # the generation the run knows
        (order(), "u1", 1, False, True),  # newer than the run knows: the cache is ahead of the run
        (order(), "u1", 0, False, True),  # the run knows no generation yet
        (order(), "u1", 3, False, False),  # behind a spec edit the run was told of
        (order(), "u1", None, False, False),  # a run of an earlier release says nothing: GET
        (order(uid="u0"), "u1", 2, False, False),  # deleted and made again, or not the run's order
        (None, "u1", 0, False, False),  # absent: maybe new to the watch, only a GET says it is gone
        (order(), "u1", 2, True, False),  # the run was told of a deletion the cache has not seen
        (order(deleting=True), "u1", 2, True, True),
        (order(deleting=True), "u1", 2, False, True),
    ],
)
def test_a_cached_order_answers_only_a_read_it_is_fresh_enough_for(
    cached: dict[str, Any] | None, uid: str, generation: int | None, deleting: bool, answers: bool
) -> None:
    assert order_fresh_enough(cached, uid, generation, deleting) is answers


@pytest.mark.parametrize(
    ("cached_generation", "held", "answers"),
    [
        (3, 3, True),
        (3, 4, False),  # behind an edit the run was told of
        (4, 3, False),  # another generation than the run holds: the run reads it whole
        (1, 0, False),  # the run holds none (its first read, or told the class was deleted)
        (1, None, False),
        (None, 1, False),  # not in the cache
    ],
)
def test_a_cached_class_answers_only_the_generation_the_run_holds(
    cached_generation: int | None, held: int | None, answers: bool
) -> None:
    cached = None if cached_generation is None else {"metadata": {"name": "c", "generation": cached_generation}}
    assert class_fresh_enough(cached, held) is answers


@pytest.mark.parametrize(
    ("cached_generation", "held", "answers"),
    [(1, None, True), (7, 0, True), (7, 3, True), (None, None, False)],  # absent: only a GET says it is gone
)
def test_a_runs_first_read_of_its_class_takes_the_cached_class_as_it_is(
    cached_generation: int | None, held: int | None, answers: bool
) -> None:
    cached = None if cached_generation is None else {"metadata": {"name": "c", "generation": cached_generation}}
    assert class_fresh_enough(cached, held, first_read=True) is answers
