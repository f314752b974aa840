"""A move made before it breaks: the StatefulSet's shape while an order moves to a new placement.

A serving order whose repack plan moves it (the observer's repack, ``observer.repack``) keeps serving:

1. **Surge.** The set grows from n to 2n replicas with ``rollingUpdate.partition`` n. The new template
   (the new claim template's devices, node and recipe) reaches only the n new replicas; the old ones run
   on as they are. The set records the move (annotation ``ai.deckhouse.io/move``).
2. **Hold.** Every apply while the new replicas load keeps that shape.
3. **Retire.** Once the set has 2n ready replicas, ``spec.ordinals.start`` rises by n and ``replicas``
   goes back to n: the StatefulSet controller deletes the n lowest ordinals (the old replicas) and
   leaves the new ones running, untouched (``tests/cluster/test_statefulset_move.py``).

A move that cannot finish (the new replicas not ready within ``MOVE_TIMEOUT_SECONDS``, the plan changed
again, the class's update policy or the runtime hold no longer allowing it) is withdrawn: the set goes
back to n replicas and rolls onto the template it has, as any replan did before (break, then make).

Level-triggered: the step is decided from the standing set on every apply, so a worker that lost the
move's thread finds it again in the set. Pure: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from activities.builders.common import ANNOTATION_PLACEMENT
from inference_api.payloads import MoveStep
from inference_api.plan import LaunchPlan
from inference_api.types import InferenceServiceClass

# On the StatefulSet while a move surges: where it started and what it moves to (JSON, ``MoveRecord``).
ANNOTATION_MOVE = "ai.deckhouse.io/move"
# The longest the new replicas may take to be ready before the move is withdrawn (a model's download
# and load included).
MOVE_TIMEOUT_SECONDS = 1800.0


@dataclass(frozen=True)
class MoveRecord:
    """What the set records while a move surges."""

    fromOrdinal: int  # the first ordinal of the old replicas
    replicas: int  # n: how many move
    template: str  # the new pod template's digest
    since: float  # when the surge was written (seconds since the epoch)
    gpus: float  # the devices one old replica held (device count x share)

    def encode(self) -> str:
        return json.dumps(
            {
                "from": self.fromOrdinal,
                "replicas": self.replicas,
                "template": self.template,
                "since": round(self.since, 3),
                "gpus": self.gpus,
            },
            separators=(",", ":"),
        )

    @staticmethod
    def decode(raw: str | None) -> MoveRecord | None:
        if not raw:
            return None
        try:
            data = json.loads(raw)
            record = MoveRecord(
                fromOrdinal=int(data["from"]),
                replicas=int(data["replicas"]),
                template=str(data["template"]),
                since=float(data["since"]),
                gpus=float(data["gpus"]),
            )
        except (ValueError, KeyError, TypeError):
            return None
        if record.fromOrdinal < 0 or record.replicas < 1:
            return None
        return record


@dataclass(frozen=True)
class SetShape:
    """The StatefulSet's replicas, first ordinal, rolling-update partition and move record to write."""

    step: MoveStep
    replicas: int
    firstOrdinal: int
    partition: int
    record: MoveRecord | None = None
    # On Retire: the ordinals that go (their model volumes are deleted with them).
    retired: tuple[int, ...] = ()
    # On Retire: the devices won back (old minus new, over the replicas moved; never below zero).
    gpusWonBack: float = 0.0
    # On Withdraw: why the move was dropped (the order's RuntimeCurrent says it, with the rebuild).
    why: str = ""


def plan_gpus(plan: LaunchPlan) -> float:
    """The devices one replica of ``plan`` holds: its device count times its share."""
    return plan.deviceCount * plan.sharePercent / 100


def recorded_gpus(placement: Mapping[str, Any] | None) -> float:
    """The devices one replica held, from the set's placement record (``runtime.placement_record``)."""
    if not placement:
        return 0.0
    try:
        return int(placement.get("deviceCount") or 0) * int(placement.get("sharePercent") or 0) / 100
    except (TypeError, ValueError):
        return 0.0


def first_ordinal(standing: Mapping[str, Any] | None) -> int:
    """The first ordinal of a standing set (``spec.ordinals.start``; 0 when it names none)."""
    spec = (standing or {}).get("spec") or {}
    try:
        return max(0, int((spec.get("ordinals") or {}).get("start") or 0))
    except (TypeError, ValueError):
        return 0


def _ready_for(standing: Mapping[str, Any], replicas: int) -> bool:
    """The set's controller saw its latest spec and counts ``replicas`` ready replicas."""
    meta = standing.get("metadata") or {}
    status = standing.get("status") or {}
    seen = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    return seen and int(status.get("readyReplicas") or 0) >= replicas


def decide_move(
    standing: Mapping[str, Any] | None,
    *,
    replicas: int,
    template: str,
    plan: LaunchPlan,
    asked: bool,
    allowed: bool,
    moved: bool,
    now: float,
    timeout: float = MOVE_TIMEOUT_SECONDS,
) -> SetShape:
    """The set's shape for this apply.

    ``replicas``: n, what the order runs outside a move. ``template``: the digest of the pod template
    this apply writes. ``asked``: the workflow planned this as a move made before it breaks.
    ``allowed``: the class's update policy allows it now (MakeBeforeBreak, RollingUpdate, no runtime
    hold, a fixed replica count). ``moved``: the new template differs from the standing one's.
    """
    start = first_ordinal(standing)
    plain = SetShape(MoveStep.NONE, replicas, start, 0)
    if standing is None:
        return plain
    annotations = (standing.get("metadata") or {}).get("annotations") or {}
    record = MoveRecord.decode(annotations.get(ANNOTATION_MOVE))
    if record is not None:
        n = record.replicas
        if not allowed:
            return SetShape(MoveStep.WITHDRAW, replicas, record.fromOrdinal, 0, why=WITHDRAWN_NOT_ALLOWED)
        if record.template != template or record.replicas != replicas:
            return SetShape(MoveStep.WITHDRAW, replicas, record.fromOrdinal, 0, why=WITHDRAWN_CHANGED)
        if _ready_for(standing, 2 * n):
            won = max(0.0, (record.gpus - plan_gpus(plan)) * n)
            return SetShape(
                MoveStep.RETIRE,
                n,
                record.fromOrdinal + n,
                0,
                retired=tuple(range(record.fromOrdinal, record.fromOrdinal + n)),
                gpusWonBack=round(won, 4),
            )
        if now - record.since > timeout:
            return SetShape(MoveStep.WITHDRAW, n, record.fromOrdinal, 0, why=withdrawn_late(timeout))
        return SetShape(MoveStep.HOLD, 2 * n, record.fromOrdinal, n, record)
    if not (asked and allowed and moved):
        return plain
    status = standing.get("status") or {}
    if int(status.get("readyReplicas") or 0) < replicas:
        return plain  # not every replica serves: nothing to keep serving, the set rolls as before
    placement: Mapping[str, Any] | None
    try:
        placement = json.loads(annotations.get(ANNOTATION_PLACEMENT) or "{}")
    except ValueError:
        placement = None
    record = MoveRecord(
        fromOrdinal=start,
        replicas=replicas,
        template=template,
        since=now,
        gpus=recorded_gpus(placement if isinstance(placement, Mapping) else None),
    )
    return SetShape(MoveStep.SURGE, 2 * replicas, start, replicas, record)


WITHDRAWN_NOT_ALLOWED = "the class's update policy no longer allows moves made before they break"
WITHDRAWN_CHANGED = "the launch plan or the replica count changed again while the new replicas loaded"


def withdrawn_late(timeout: float) -> str:
    return f"the new replicas were not all Ready within {timeout / 60:g} minutes"


def withdrawn_message(shape: SetShape, runtime_version: str) -> str | None:
    """RuntimeCurrent's message when this apply withdraws a move (None otherwise): the replicas that
    served roll onto the new placement one at a time, each rebuilt, as a replan without a move does."""
    if shape.step is not MoveStep.WITHDRAW:
        return None
    return (
        f"The move made before it breaks was withdrawn ({shape.why}): the replicas "
        f"roll onto the new placement one at a time, each rebuilt on runtime release {runtime_version}."
    )


def move_allowed(cls: InferenceServiceClass, *, autoscaled: bool, held: bool) -> bool:
    """Whether the class's update policy lets an order move before it breaks: ``moves: MakeBeforeBreak``
    under the RollingUpdate strategy, no runtime hold (OnDelete), and a fixed replica count (an
    autoscaled order's HPA owns ``replicas``, which a surge would need)."""
    return cls.spec.updatePolicy.moves_allowed() and not held and not autoscaled
