"""The shape of a StatefulSet through a move made before it breaks (activities/builders/move.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from activities.builders.common import ANNOTATION_PLACEMENT, ANNOTATION_TEMPLATE_DIGEST
from activities.builders.move import (
    ANNOTATION_MOVE,
    MOVE_TIMEOUT_SECONDS,
    MoveRecord,
    decide_move,
    first_ordinal,
    move_allowed,
    withdrawn_message,
)
from activities.builders.statefulset import build_statefulset
from inference_api.payloads import MoveStep
from tests import factories as f

NOW = 1_000_000.0
WHOLE = {"deviceClass": "gpu-h100", "deviceCount": 1, "sharePercent": 100}


def standing(
    *,
    ready: int = 1,
    replicas: int = 1,
    start: int | None = None,
    move: MoveRecord | None = None,
    generation: int = 3,
    observed: int = 3,
    template: str = "old",
) -> dict[str, Any]:
    annotations = {ANNOTATION_PLACEMENT: json.dumps(WHOLE), ANNOTATION_TEMPLATE_DIGEST: template}
    if move is not None:
        annotations[ANNOTATION_MOVE] = move.encode()
    spec: dict[str, Any] = {"replicas": replicas}
    if start is not None:
        spec["ordinals"] = {"start": start}
    return {
        "metadata": {"name": "o", "generation": generation, "annotations": annotations},
        "spec": spec,
        "status": {"readyReplicas": ready, "observedGeneration": observed},
    }


def decide(set_: dict[str, Any] | None, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "replicas": 1,
        "template": "new",
        "plan": f.plan(share=25),
        "asked": True,
        "allowed": True,
        "moved": True,
        "now": NOW,
    }
    return decide_move(set_, **(args | kw))


def test_a_move_asked_of_a_serving_set_surges_one_replica_per_replica_behind_a_partition() -> None:
    shape = decide(standing())
    assert (shape.step, shape.replicas, shape.firstOrdinal, shape.partition) == (MoveStep.SURGE, 2, 0, 1)
    assert shape.record == MoveRecord(fromOrdinal=0, replicas=1, template="new", since=NOW, gpus=1.0)


def test_a_surge_starts_from_the_first_ordinal_an_earlier_move_left() -> None:
    shape = decide(standing(start=3, replicas=2, ready=2), replicas=2)
    assert (shape.step, shape.replicas, shape.firstOrdinal, shape.partition) == (MoveStep.SURGE, 4, 3, 2)


@pytest.mark.parametrize(
    "why",
    [{"asked": False}, {"allowed": False}, {"moved": False}],
    ids=["not asked", "class forbids", "nothing moves"],
)
def test_without_a_move_the_set_keeps_its_first_ordinal_and_no_partition(why: dict[str, Any]) -> None:
    shape = decide(standing(start=2), **why)
    assert (shape.step, shape.replicas, shape.firstOrdinal, shape.partition, shape.record) == (
        MoveStep.NONE,
        1,
        2,
        0,
        None,
    )


def test_a_set_with_a_replica_not_ready_is_not_surged() -> None:
    assert decide(standing(ready=0)).step is MoveStep.NONE


def test_no_standing_set_is_no_move() -> None:
    shape = decide(None)
    assert (shape.step, shape.firstOrdinal) == (MoveStep.NONE, 0)


def surging(**kw: Any) -> dict[str, Any]:
    record = MoveRecord(fromOrdinal=0, replicas=1, template="new", since=NOW - 60, gpus=1.0)
    return standing(move=record, replicas=2, **kw)


def test_a_surge_is_held_while_the_new_replica_loads_even_when_no_longer_asked() -> None:
    shape = decide(surging(ready=1), asked=False, moved=False)
    assert (shape.step, shape.replicas, shape.firstOrdinal, shape.partition) == (MoveStep.HOLD, 2, 0, 1)
    assert shape.record is not None
    assert shape.record.since == NOW - 60


def test_the_old_replicas_retire_once_twice_as_many_are_ready_and_the_devices_won_back_are_counted() -> None:
    shape = decide(surging(ready=2), asked=False)
    assert (shape.step, shape.replicas, shape.firstOrdinal, shape.partition) == (MoveStep.RETIRE, 1, 1, 0)
    assert shape.record is None
    assert shape.retired == (0,)
    assert shape.gpusWonBack == pytest.approx(0.75)


def test_ready_replicas_the_controller_counted_before_the_surge_do_not_retire() -> None:
    # status from before the surge's spec (observedGeneration behind): its count is not the surge's
    assert decide(surging(ready=2, generation=4, observed=3)).step is MoveStep.HOLD


def test_a_move_whose_plan_changed_again_is_withdrawn_to_a_plain_roll() -> None:
    shape = decide(surging(ready=1), template="newer")
    assert (shape.step, shape.replicas, shape.firstOrdinal, shape.partition, shape.record) == (
        MoveStep.WITHDRAW,
        1,
        0,
        0,
        None,
    )


def test_a_move_the_class_no_longer_allows_is_withdrawn() -> None:
    assert decide(surging(ready=1), allowed=False).step is MoveStep.WITHDRAW


def test_a_move_that_does_not_finish_in_time_is_withdrawn() -> None:
    record = MoveRecord(fromOrdinal=0, replicas=1, template="new", since=NOW - MOVE_TIMEOUT_SECONDS - 1, gpus=1.0)
    assert decide(standing(move=record, replicas=2, ready=1)).step is MoveStep.WITHDRAW


@pytest.mark.parametrize(
    ("kw", "template", "said"),
    [
        ({"allowed": False}, "new", "no longer allows moves"),
        ({}, "newer", "changed again"),
        ({"now": NOW + MOVE_TIMEOUT_SECONDS + 1}, "new", "not all Ready within 30 minutes"),
    ],
    ids=["class-says-never", "plan-changed-again", "too-late"],
)
def test_a_withdrawn_move_tells_why_and_that_the_replicas_are_rebuilt(
    kw: dict[str, Any], template: str, said: str
) -> None:
    # The surge wrote the new placement on the set already: the withdraw is what says the old replicas
    # now roll onto it, each rebuilt (RuntimeCurrent=False/WorkloadRebuilding in the apply).
    record = MoveRecord(fromOrdinal=0, replicas=1, template="new", since=NOW, gpus=1.0)
    shape = decide(standing(move=record, replicas=2, ready=1), template=template, **kw)
    assert shape.step is MoveStep.WITHDRAW
    message = withdrawn_message(shape, "v0.11.0")
    assert message is not None
    assert said in message
    assert "each rebuilt on runtime release v0.11.0" in message


def test_no_other_step_says_a_move_was_withdrawn() -> None:
    for shape in (decide(standing()), decide(surging(ready=1)), decide(surging(ready=2), asked=False)):
        assert shape.step is not MoveStep.WITHDRAW
        assert withdrawn_message(shape, "v0.11.0") is None


def test_a_garbled_move_record_is_no_move() -> None:
    set_ = standing(start=1)
    set_["metadata"]["annotations"][ANNOTATION_MOVE] = "{not json"
    assert decide(set_, asked=False).step is MoveStep.NONE
    assert MoveRecord.decode(json.dumps({"from": -1, "replicas": 1, "template": "t", "since": 0, "gpus": 1})) is None


def test_first_ordinal_reads_the_sets_ordinals() -> None:
    assert first_ordinal(None) == 0
    assert first_ordinal(standing()) == 0
    assert first_ordinal(standing(start=5)) == 5


@pytest.mark.parametrize(
    ("update", "autoscaled", "held", "allowed"),
    [
        ({"strategy": "RollingUpdate"}, False, False, True),
        ({"strategy": "RollingUpdate", "moves": "Never"}, False, False, False),
        ({"strategy": "OnDelete"}, False, False, False),
        ({"strategy": "RollingUpdate"}, True, False, False),
        ({"strategy": "RollingUpdate"}, False, True, False),
    ],
)
def test_moves_are_allowed_by_the_classs_update_policy_only(
    update: dict[str, str], autoscaled: bool, held: bool, allowed: bool
) -> None:
    cls = f.service_class(updatePolicy=update)
    assert move_allowed(cls, autoscaled=autoscaled, held=held) is allowed


def test_the_statefulset_carries_the_shape_surge_and_retire() -> None:
    record = MoveRecord(fromOrdinal=2, replicas=1, template="t", since=NOW, gpus=1.0)
    cls = f.cluster_local_none()
    surge = decide(standing(start=2), template="t")
    built = build_statefulset(f.inputs(the_class=cls, set_shape=surge))
    assert built["spec"]["replicas"] == 2
    assert built["spec"]["ordinals"] == {"start": 2}
    assert built["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
    assert MoveRecord.decode(built["metadata"]["annotations"][ANNOTATION_MOVE]) == record
    retire = decide(standing(move=record, start=2, replicas=2, ready=2), template="t")
    built = build_statefulset(f.inputs(the_class=cls, set_shape=retire))
    assert built["spec"]["replicas"] == 1
    assert built["spec"]["ordinals"] == {"start": 3}
    assert built["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert ANNOTATION_MOVE not in built["metadata"]["annotations"]


def test_a_set_never_moved_has_no_ordinals_field() -> None:
    built = build_statefulset(f.inputs(the_class=f.cluster_local_none(), set_shape=decide(None)))
    assert "ordinals" not in built["spec"]
