"""RuntimeCurrent, the lazy upgrade hold and placement changes, from standing objects and pods."""

from __future__ import annotations

from typing import Any

from activities.builders import (
    build_statefulset,
    decide_runtime_hold,
    placement_changed,
    replica_runtime_versions,
    runtime_current,
    volume_must_grow,
)
from inference_api.reasons import Reason
from inference_api.types import ConditionStatus
from tests import factories as f

OLD, NEW = "0.11.0", "0.33.0"


def _standing(version: str = OLD, generation: int = 1, held: bool = False, **plan_kwargs: Any) -> dict[str, Any]:
    """A StatefulSet as an earlier apply wrote it."""
    the_inputs = f.inputs(
        the_order=f.order(generation=generation),
        the_plan=f.plan(runtime_version=version, **plan_kwargs),
        hold_running_replicas=held,
    )
    return build_statefulset(the_inputs)


def _pod(version: str | None, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"annotations": {"ai.deckhouse.io/runtime-version": version} if version else {}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata}


def test_replica_versions_from_pods_skip_pods_being_deleted() -> None:
    pods = [_pod(OLD), _pod(NEW), _pod(None), _pod(OLD, deleting=True)]
    assert replica_runtime_versions(pods) == [OLD, NEW, None]


def test_all_current_is_up_to_date() -> None:
    verdict = runtime_current(NEW, [NEW, NEW])
    assert verdict.status == ConditionStatus.TRUE
    assert verdict.reason == Reason.RUNTIME_UP_TO_DATE
    assert NEW in verdict.message
    assert runtime_current(NEW, []).status == ConditionStatus.TRUE


def test_mixed_set_names_both_releases_and_the_count() -> None:
    verdict = runtime_current(NEW, [OLD, NEW, OLD])
    assert verdict.status == ConditionStatus.FALSE
    assert verdict.reason == Reason.REPLICAS_HELD_ON_PREVIOUS_RUNTIME
    assert "1 of 3" in verdict.message
    assert OLD in verdict.message
    assert NEW in verdict.message
    unknown = runtime_current(NEW, [None])
    assert "unrecorded" in unknown.message


def test_placement_change_is_rebuilding() -> None:
    verdict = runtime_current(NEW, [OLD], placement_change=True)
    assert verdict.status == ConditionStatus.FALSE
    assert verdict.reason == Reason.WORKLOAD_REBUILDING


def test_placement_changed() -> None:
    standing = _standing(share=50, memory_request_mib=40960, volume_gib=40)
    assert not placement_changed(standing, f.plan(share=50, memory_request_mib=40960, volume_gib=40))
    assert not placement_changed(None, f.plan())
    # A new runtime release alone is not a placement change.
    assert not placement_changed(standing, f.plan(share=50, memory_request_mib=40960, runtime_version="9.9"))
    assert placement_changed(standing, f.plan(share=60, memory_request_mib=49152))
    assert placement_changed(standing, f.plan(share=50, memory_request_mib=40960, device_class="other"))
    assert placement_changed(standing, f.plan(share=50, memory_request_mib=40960, device_count=2))
    assert placement_changed(standing, f.plan(share=50, memory_request_mib=40960, volume_gib=41))
    # A smaller volume fits in the standing one.
    assert not placement_changed(standing, f.plan(share=50, memory_request_mib=40960, volume_gib=20))


def test_placement_of_a_workload_that_recorded_none_is_taken_as_is() -> None:
    assert not placement_changed({"metadata": {}, "spec": {"template": {"metadata": {}}}}, f.plan(share=10))
    bad = {"spec": {"template": {"metadata": {"annotations": {"ai.deckhouse.io/placement": "{nope"}}}}}
    assert not placement_changed(bad, f.plan())


def test_an_upgrade_holds_running_replicas() -> None:
    standing = _standing(version=OLD)
    assert decide_runtime_hold(f.order(), f.plan(runtime_version=NEW), standing, [OLD, OLD])


def test_a_hold_stays_while_any_replica_is_on_the_previous_release() -> None:
    standing = _standing(version=NEW, held=True)
    assert decide_runtime_hold(f.order(), f.plan(runtime_version=NEW), standing, [OLD, NEW])


def test_the_hold_ends_when_every_replica_is_current() -> None:
    standing = _standing(version=NEW, held=True)
    assert not decide_runtime_hold(f.order(), f.plan(runtime_version=NEW), standing, [NEW, NEW])


def test_an_edit_moves_every_replica_the_way_the_class_asks() -> None:
    standing = _standing(version=NEW, held=True, generation=1)
    assert not decide_runtime_hold(f.order(generation=2), f.plan(runtime_version=NEW), standing, [OLD, NEW])


def test_a_rolling_update_under_way_after_an_edit_is_not_stopped_halfway() -> None:
    # The edit's apply wrote the shipped release with the class's strategy; pods are mixed.
    standing = _standing(version=NEW, held=False, generation=2)
    assert not decide_runtime_hold(f.order(generation=2), f.plan(runtime_version=NEW), standing, [OLD, NEW])


def test_no_hold_without_a_standing_workload_or_on_a_placement_change() -> None:
    assert not decide_runtime_hold(f.order(), f.plan(runtime_version=NEW), None, [])
    standing = _standing(version=OLD, share=50, memory_request_mib=1000)
    moved = f.plan(runtime_version=NEW, share=100)
    assert not decide_runtime_hold(f.order(), moved, standing, [OLD])


def test_the_held_statefulset_keeps_running_pods_and_carries_the_shipped_template() -> None:
    standing = _standing(version=OLD)
    new_plan = f.plan(runtime_version=NEW)
    hold = decide_runtime_hold(f.order(), new_plan, standing, [OLD])
    sts = build_statefulset(f.inputs(the_plan=new_plan, standing_statefulset=standing, hold_running_replicas=hold))
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sts["spec"]["template"]["metadata"]["annotations"]["ai.deckhouse.io/runtime-version"] == NEW
    # The next reconcile reads this object back and keeps holding while pods are mixed.
    assert decide_runtime_hold(f.order(), new_plan, sts, [OLD, NEW])
    assert not decide_runtime_hold(f.order(), new_plan, sts, [NEW, NEW])


def test_volume_must_grow() -> None:
    standing = _standing(volume_gib=40)
    assert volume_must_grow(standing, f.plan(volume_gib=41))
    assert not volume_must_grow(standing, f.plan(volume_gib=40))
    assert not volume_must_grow(standing, f.plan(volume_gib=10))
    assert not volume_must_grow(None, f.plan(volume_gib=400))
    # The server's canonical form of the standing request is read by amount.
    standing["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "40960Mi"
    assert not volume_must_grow(standing, f.plan(volume_gib=40))
