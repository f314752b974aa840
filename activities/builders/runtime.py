"""Which runtime release the replicas run: RuntimeCurrent, the lazy upgrade hold, placement changes.

After a module upgrade ships a new runtime release, the replicas that serve keep serving on the
release they started with (administration guide, "Upgrading the module"): a restart means
loading the model again, minutes per replica. The StatefulSet's pod template is updated at
once, so a replica raised from then on — scale-up, or a replacement — starts on the shipped
release. That is the StatefulSet controller's ``OnDelete`` behaviour, so while the set is mixed
because of an upgrade the StatefulSet is applied with ``updateStrategy: OnDelete`` (the "hold"),
whatever the class says. The hold ends when every replica runs the shipped release, or when the
order is edited: then the class's strategy moves every replica (a rolling restart).

The pod template records what the replicas were started with, as annotations the pods inherit:
``ai.deckhouse.io/runtime-version``, ``ai.deckhouse.io/runtime-image``, the order's generation
and the placement. Reading them back from pods is what these pure deciders work on.

The same hold covers every change of the pod template that is the module's, not the order's: an
upgrade that changes the endpoint front, an annotation, the model fetcher, a setting of the module
(``decide_template_hold``). The StatefulSet records a digest of the template it was applied with
(``ai.deckhouse.io/pod-template-digest``); an apply whose template digest differs, for an order that
was not edited, whose token was not rotated and whose placement stays, holds the replicas that
serve, and the new template reaches new replicas only. The hold ends when every replica runs the
StatefulSet's current revision (its ``controller-revision-hash`` is the set's ``updateRevision``,
read once the controller has seen the set's generation), or on an edit of the order or of its class
(the set records the class generation it was applied under), a token rotation (the old key must
stop working: every replica moves) or a placement change.

A placement change (another device class, share, device count, a larger model volume) cannot be
lazy: the objects that hold the devices and the volume have to change, so the order reports
``WorkloadRebuilding`` instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from activities.builders.claim import memory_request_mib
from activities.builders.common import (
    ANNOTATION_AUTH_SECRET_UID,
    ANNOTATION_CLASS_GENERATION,
    ANNOTATION_ORDER_GENERATION,
    ANNOTATION_PLACEMENT,
    ANNOTATION_RUNTIME_HOLD,
    ANNOTATION_RUNTIME_VERSION,
    ANNOTATION_TEMPLATE_DIGEST,
    FETCHER_CONTAINER,
    MODEL_VOLUME,
    parse_quantity,
)
from inference_api.plan import LaunchPlan
from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, InferenceService, InferenceServiceClass

_GIB = 2**30


def placement_record(plan: LaunchPlan) -> dict[str, Any]:
    """The facts of a plan that, when they change, change the objects holding devices or volume."""
    return {
        "deviceClass": plan.deviceClass,
        "deviceCount": plan.deviceCount,
        "sharePercent": plan.sharePercent,
        "memoryRequestMiB": memory_request_mib(plan),
        "modelVolumeGiB": plan.modelVolumeGiB,
    }


def placement_annotation(plan: LaunchPlan) -> str:
    # Compact, key-sorted JSON: stable bytes for the same plan, and readable in `kubectl describe`.
    return json.dumps(placement_record(plan), sort_keys=True, separators=(",", ":"))


def order_generation_annotation(order: InferenceService) -> str:
    return str(order.metadata.generation or 0)


def class_generation_annotation(service_class: InferenceServiceClass) -> str:
    return str(service_class.metadata.generation or 0)


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    if not obj:
        return {}
    return (obj.get("metadata") or {}).get("annotations") or {}


def _template_annotations(statefulset: Mapping[str, Any]) -> Mapping[str, str]:
    return _annotations((statefulset.get("spec") or {}).get("template"))


def standing_model_volume_bytes(statefulset: Mapping[str, Any]) -> int | None:
    """The storage the standing model volume template asks for, in bytes."""
    for template in (statefulset.get("spec") or {}).get("volumeClaimTemplates") or []:
        if (template.get("metadata") or {}).get("name") != MODEL_VOLUME:
            continue
        storage = (((template.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
        return int(parse_quantity(storage)) if storage is not None else None
    return None


def volume_must_grow(standing_statefulset: Mapping[str, Any] | None, plan: LaunchPlan) -> bool:
    """Whether the plan needs a larger model volume than the standing claim template gives.

    The server refuses changes to claim templates, so the apply step must delete the
    StatefulSet (its volumes go with it: retention policy ``whenDeleted: Delete``) and apply it
    again without a standing one.
    """
    if standing_statefulset is None:
        return False
    volume = standing_model_volume_bytes(standing_statefulset)
    return volume is not None and plan.modelVolumeGiB * _GIB > volume


def model_commit_changed(standing_statefulset: Mapping[str, Any] | None, plan: LaunchPlan) -> bool:
    """Whether ``plan`` pins another commit of the model than the standing replicas fetch: every replica
    must take it (two replicas never serve different weights), so no hold keeps the old one running."""
    if standing_statefulset is None or plan.modelCommit is None:
        return False
    spec = ((standing_statefulset.get("spec") or {}).get("template") or {}).get("spec") or {}
    fetcher = next((c for c in spec.get("initContainers") or [] if c.get("name") == FETCHER_CONTAINER), None)
    if fetcher is None:
        return False
    standing = next((e.get("value") for e in fetcher.get("env") or [] if e.get("name") == "MODEL_REVISION"), None)
    return standing != plan.modelCommit


def placement_changed(standing_statefulset: Mapping[str, Any] | None, plan: LaunchPlan) -> bool:
    """Whether ``plan`` moves a standing workload onto another placement (→ WorkloadRebuilding).

    A smaller model volume is not a change: the standing, larger volume still holds the model.
    A standing workload that recorded no placement (made by another version) is taken at its
    word rather than rebuilt.
    """
    if standing_statefulset is None:
        return False
    if volume_must_grow(standing_statefulset, plan):
        return True
    recorded = _template_annotations(standing_statefulset).get(ANNOTATION_PLACEMENT) or _annotations(
        standing_statefulset
    ).get(ANNOTATION_PLACEMENT)
    if not recorded:
        return False
    try:
        before = json.loads(recorded)
    except ValueError:
        return False
    now = placement_record(plan)
    compared = ("deviceClass", "deviceCount", "sharePercent", "memoryRequestMiB")
    return any(before.get(key) != now[key] for key in compared)


def replica_runtime_versions(pods: Iterable[Mapping[str, Any]]) -> list[str | None]:
    """The runtime release each live pod was started with (None when it recorded none).

    Pods already being deleted are left out: they are on their way to the shipped release.
    """
    versions: list[str | None] = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            continue
        versions.append((metadata.get("annotations") or {}).get(ANNOTATION_RUNTIME_VERSION))
    return versions


def decide_runtime_hold(
    order: InferenceService,
    plan: LaunchPlan,
    standing_statefulset: Mapping[str, Any] | None,
    replica_versions: Sequence[str | None],
) -> bool:
    """Whether to apply the StatefulSet with ``OnDelete`` so running replicas stay where they are.

    Hold when the set is mixed because the shipped release changed under an unchanged order:
    * nothing stands yet, or the placement moves → no hold (nothing to keep / cannot keep);
    * the plan pins another commit of the model (an edit or a replan by hand) → no hold: every
      replica takes it;
    * the order was edited since the standing template was written → no hold: an edit moves
      every replica the way the class asks;
    * every replica already runs the shipped release → no hold (nothing left to protect);
    * already holding → keep holding until one of the above ends it;
    * otherwise hold exactly when the standing template still names another release — i.e. this
      apply is the one that brings the upgrade. A set that is mixed because an edit's rolling
      update is under way names the shipped release already and is not stopped halfway.
    """
    if (
        standing_statefulset is None
        or placement_changed(standing_statefulset, plan)
        or model_commit_changed(standing_statefulset, plan)
    ):
        return False
    template = _template_annotations(standing_statefulset)
    if template.get(ANNOTATION_ORDER_GENERATION) != order_generation_annotation(order):
        return False
    shipped = plan.recipe.runtimeVersion
    if all(version == shipped for version in replica_versions):
        return False
    if _annotations(standing_statefulset).get(ANNOTATION_RUNTIME_HOLD) == "true":
        return True
    return template.get(ANNOTATION_RUNTIME_VERSION) != shipped


def pod_template_digest(template: Mapping[str, Any]) -> str:
    """A digest of a pod template as built (key-sorted JSON): equal templates, equal digests."""
    document = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(document.encode()).hexdigest()[:32]


REVISION_LABEL = "controller-revision-hash"


def replica_revisions(pods: Iterable[Mapping[str, Any]]) -> list[str | None]:
    """The StatefulSet revision each live pod was made from (its ``controller-revision-hash``)."""
    revisions: list[str | None] = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            continue
        revisions.append((metadata.get("labels") or {}).get(REVISION_LABEL))
    return revisions


def _every_replica_current(standing: Mapping[str, Any], revisions: Sequence[str | None]) -> bool:
    """Every replica runs the set's current template: judged only once the StatefulSet controller has
    seen the set's generation (before, ``updateRevision`` may still name the template being replaced)."""
    status = standing.get("status") or {}
    generation = (standing.get("metadata") or {}).get("generation")
    if generation is None or status.get("observedGeneration") != generation:
        return False
    current = status.get("updateRevision")
    return current is not None and all(revision == current for revision in revisions)


def decide_template_hold(
    order: InferenceService,
    service_class: InferenceServiceClass,
    plan: LaunchPlan,
    standing_statefulset: Mapping[str, Any] | None,
    template_digest: str,
    auth_secret_uid: str | None,
    revisions: Sequence[str | None],
) -> bool:
    """Whether to apply with ``OnDelete`` because the pod template changes for the module's reasons.

    * nothing stands, the placement moves, the model's pinned commit changes, the order or its class
      was edited, or its token was rotated → no hold: those move every replica (an edit as the class
      asks; a rotated token must reach every replica). A set that recorded no class generation (an
      earlier release) is taken as unedited;
    * no replica runs → no hold (nothing to keep);
    * already holding → hold until every replica runs the set's current revision;
    * otherwise hold exactly when the template differs from the one the set was applied with (a set
      made by a release that recorded no digest counts as different: holding an unchanged template
      moves nothing, and the hold ends at the next apply).
    """
    standing = standing_statefulset
    if standing is None or placement_changed(standing, plan) or model_commit_changed(standing, plan):
        return False
    template = _template_annotations(standing)
    if template.get(ANNOTATION_ORDER_GENERATION) != order_generation_annotation(order):
        return False
    if template.get(ANNOTATION_AUTH_SECRET_UID) != auth_secret_uid:
        return False
    applied_under = _annotations(standing).get(ANNOTATION_CLASS_GENERATION)
    if applied_under is not None and applied_under != class_generation_annotation(service_class):
        return False
    if not revisions:
        return False
    recorded = _annotations(standing).get(ANNOTATION_TEMPLATE_DIGEST)
    if _annotations(standing).get(ANNOTATION_RUNTIME_HOLD) == "true":
        return recorded != template_digest or not _every_replica_current(standing, revisions)
    return recorded != template_digest


@dataclass(frozen=True)
class RuntimeVerdict:
    """The RuntimeCurrent condition: status, reason and a message naming the releases."""

    status: ConditionStatus
    reason: Reason
    message: str


def runtime_current(
    shipped_version: str,
    replica_versions: Sequence[str | None],
    placement_change: bool = False,
) -> RuntimeVerdict:
    """RuntimeCurrent from what the replicas run and what the module ships."""
    if placement_change:
        return RuntimeVerdict(
            ConditionStatus.FALSE,
            Reason.WORKLOAD_REBUILDING,
            "The recomputed launch plan moves the order to another placement; the replicas cannot be kept "
            f"and the workload is rebuilt on runtime release {shipped_version}.",
        )
    total = len(replica_versions)
    current = sum(1 for version in replica_versions if version == shipped_version)
    if current == total:
        return RuntimeVerdict(
            ConditionStatus.TRUE,
            Reason.RUNTIME_UP_TO_DATE,
            f"All {total} replica(s) run the shipped runtime release {shipped_version}."
            if total
            # True before the first replica starts and while it serves: the status is written at the
            # apply, and nothing writes it again until the next one.
            else f"Every replica starts on the shipped runtime release {shipped_version}; none runs another.",
        )
    previous = sorted(
        {version or "an unrecorded release" for version in replica_versions if version != shipped_version}
    )
    return RuntimeVerdict(
        ConditionStatus.FALSE,
        Reason.REPLICAS_HELD_ON_PREVIOUS_RUNTIME,
        f"{current} of {total} replica(s) reached the shipped runtime release {shipped_version}; "
        f"the others keep serving on {', '.join(previous)}. Delete a replica's pod to move that one, "
        "or edit the order to move every replica the way the class asks (a rolling restart).",
    )
