"""The module's own changes of the pod template reach new replicas only (the template hold).

An upgrade that changes the endpoint front, an annotation, the fetcher or a module setting changes
the template of every order's StatefulSet with no edit of the order; the serving replicas are held
(``OnDelete``) as for a runtime upgrade, until each runs the set's current revision. An edit, a
rotated token or a placement change moves every replica.
"""

from __future__ import annotations

import copy
from typing import Any

from activities.builders import build_statefulset, decide_template_hold, pod_template_digest, replica_revisions
from activities.builders.common import ANNOTATION_AUTH_SECRET_UID, ANNOTATION_TEMPLATE_DIGEST
from inference_api.settings import ModuleSettings
from tests import factories as f

SECRET_UID = "secret-uid-1"
OLD_REV, NEW_REV = "served-6f8d7c9b5", "served-7c9b5d8f6"


def _built(
    settings: ModuleSettings | None = None, generation: int = 1, held: bool = False, **plan: Any
) -> dict[str, Any]:
    return build_statefulset(
        f.inputs(
            the_order=f.order(generation=generation),
            the_plan=f.plan(**plan),
            settings=settings,
            auth_secret_uid=SECRET_UID,
            hold_running_replicas=held,
        )
    )


def _standing(
    built: dict[str, Any], *, observed: bool = True, update_revision: str = OLD_REV, digest: str | None = "keep"
) -> dict[str, Any]:
    """``built`` as the API server holds it: a generation, the controller's status."""
    standing = copy.deepcopy(built)
    standing["metadata"]["generation"] = 3
    if digest is None:
        del standing["metadata"]["annotations"][ANNOTATION_TEMPLATE_DIGEST]
    standing["status"] = {"observedGeneration": 3 if observed else 2, "updateRevision": update_revision}
    return standing


def _digest(built: dict[str, Any]) -> str:
    return str(built["metadata"]["annotations"][ANNOTATION_TEMPLATE_DIGEST])


def _pod(revision: str | None, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": {"controller-revision-hash": revision} if revision else {}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata}


UPGRADED = ModuleSettings.model_validate({"workload": {"engineOtlpTracesEndpoint": "http://collector.example:4317"}})


def _hold(standing: dict[str, Any] | None, now: dict[str, Any], revisions: list[str | None], **kw: Any) -> bool:
    return decide_template_hold(
        kw.get("order", f.order(generation=1)),
        kw.get("service_class", f.external_token_certmanager()),
        kw.get("plan", f.plan()),
        standing,
        _digest(now),
        kw.get("secret_uid", SECRET_UID),
        revisions,
    )


def test_the_digest_is_the_templates_and_ignores_the_hold() -> None:
    built = _built()
    assert _digest(built) == pod_template_digest(built["spec"]["template"])
    assert _digest(_built(held=True)) == _digest(built)
    assert _digest(_built(UPGRADED)) != _digest(built)


def test_revisions_from_pods_skip_pods_being_deleted() -> None:
    assert replica_revisions([_pod(OLD_REV), _pod(NEW_REV, deleting=True), _pod(None)]) == [OLD_REV, None]


def test_the_modules_own_change_holds_the_serving_replicas() -> None:
    standing = _standing(_built())
    assert _hold(standing, _built(UPGRADED), [OLD_REV, OLD_REV]) is True


def test_the_same_template_holds_nothing() -> None:
    standing = _standing(_built())
    assert _hold(standing, _built(), [OLD_REV]) is False


def test_a_set_of_a_release_that_recorded_no_digest_is_held_once() -> None:
    standing = _standing(_built(), digest=None)
    assert _hold(standing, _built(), [OLD_REV]) is True


def test_the_hold_stays_until_every_replica_runs_the_current_revision() -> None:
    held = _standing(_built(UPGRADED, held=True), update_revision=NEW_REV)
    now = _built(UPGRADED)
    assert _hold(held, now, [OLD_REV, NEW_REV]) is True
    assert _hold(held, now, [NEW_REV, NEW_REV]) is False


def test_the_hold_is_not_ended_on_a_revision_the_controller_has_not_caught_up_with() -> None:
    # Right after the apply the status may still name the template being replaced: every pod "current".
    held = _standing(_built(UPGRADED, held=True), observed=False, update_revision=OLD_REV)
    assert _hold(held, _built(UPGRADED), [OLD_REV]) is True


def test_a_second_change_while_holding_keeps_holding() -> None:
    held = _standing(_built(UPGRADED, held=True), update_revision=NEW_REV)
    again = ModuleSettings.model_validate({"workload": {"engineOtlpTracesEndpoint": "http://other.example:4317"}})
    assert _hold(held, _built(again), [NEW_REV]) is True


def test_an_edit_moves_every_replica_the_way_the_class_asks() -> None:
    standing = _standing(_built())
    edited = _built(UPGRADED, generation=2)
    assert _hold(standing, edited, [OLD_REV], order=f.order(generation=2)) is False


def test_a_rotated_token_reaches_every_replica() -> None:
    standing = _standing(_built())
    rotated = copy.deepcopy(_built())
    rotated["spec"]["template"]["metadata"]["annotations"][ANNOTATION_AUTH_SECRET_UID] = "secret-uid-2"
    rotated["metadata"]["annotations"][ANNOTATION_TEMPLATE_DIGEST] = pod_template_digest(rotated["spec"]["template"])
    assert _hold(standing, rotated, [OLD_REV], secret_uid="secret-uid-2") is False


def test_nothing_to_keep_without_a_standing_set_or_a_replica_or_on_a_placement_change() -> None:
    now = _built(UPGRADED)
    assert _hold(None, now, [OLD_REV]) is False
    assert _hold(_standing(_built()), now, []) is False
    moved = f.plan(share=50)
    assert _hold(_standing(_built()), _built(UPGRADED, share=50), [OLD_REV], plan=moved) is False


def test_a_class_edit_moves_every_replica_the_way_the_class_asks() -> None:
    standing = _standing(_built())
    edited = f.external_token_certmanager()
    edited.metadata.generation = (edited.metadata.generation or 0) + 1
    assert _hold(standing, _built(UPGRADED), [OLD_REV], service_class=edited) is False
    # A set of an earlier release recorded no class generation: taken as unedited.
    del standing["metadata"]["annotations"]["ai.deckhouse.io/class-generation"]
    assert _hold(standing, _built(UPGRADED), [OLD_REV], service_class=edited) is True


def test_a_newly_pinned_commit_of_the_model_moves_every_replica() -> None:
    """A replan by hand pins the commit the repository points at now: held, the serving replicas would
    keep the old weights beside new replicas with the new ones — the very thing pinning prevents."""
    first, second = "a" * 40, "b" * 40
    pinned = f.plan().model_copy(update={"modelCommit": first})
    standing = _standing(build_statefulset(f.inputs(the_plan=pinned, auth_secret_uid=SECRET_UID)))
    repinned = pinned.model_copy(update={"modelCommit": second})
    now = build_statefulset(f.inputs(the_plan=repinned, auth_secret_uid=SECRET_UID))
    assert _hold(standing, now, [OLD_REV], plan=repinned) is False
    # The same commit kept (a plan made again for the same spec) with the module's own change: held.
    upgraded = build_statefulset(f.inputs(the_plan=pinned, settings=UPGRADED, auth_secret_uid=SECRET_UID))
    assert _hold(standing, upgraded, [OLD_REV], plan=pinned) is True
    # A set made before pins (no MODEL_REVISION) with a plan that keeps none: held as before.
    assert _hold(_standing(_built()), _built(UPGRADED), [OLD_REV], plan=f.plan()) is True
