"""The order workflow's patches and when they end (docs/upgrade.md, "Patches have an end"). Pure.

A patch (``workflow.patched(id)``) lets one code base replay histories recorded before a change of
the workflow's commands and take the new branch in new ones. It cannot stay for ever: every patch is
a branch kept alive, and nine of them make the code hard to read. Each ends in two steps, each taken
by a later release, and each safe only when no running run still needs what it removes:

1. **Deprecate** (``workflow.deprecate_patch(id)``, the old branch deleted): needs no running run
   that started before the patch existed — such a run took the old branch (no marker) and would
   replay into the new one.
2. **Remove** (the call deleted): needs no running run that started before the deprecating release —
   such a run recorded a marker that only a deprecating release accepts.

What a run started under is its ``RUN_GENERATION``, set by its first workflow task in the search
attribute ``OrderRunGeneration`` (a run recorded before the attribute has none: generation 0). The
worker counts, before it polls, the running order workflows of a generation older than any step this
code takes needs (:func:`retirement_query`), and does not start while there are some
(``worker.patch_retirement``). A serving run continues as new every few days
(``SERVING_RUN_PATCH``), so older runs drain by themselves: a release that retires a patch comes at
least one release, and a week, after the one that made the runs it needs.

Bump ``RUN_GENERATION`` in every release that adds or deprecates a patch, and record the generation
of each step in ``ORDER_PATCHES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from inference_api.observation import LEGACY_ORDER_WORKFLOW_TYPES, ORDER_WORKFLOW_TYPE
from workflows.search_attributes import ORDER_RUN_GENERATION

# The generation of the order workflow's code: runs started by it carry this number.
RUN_GENERATION = 2
# Runs of every type the order workflow has had: a legacy type's runs are older than any generation.
ORDER_WORKFLOW_TYPES = (ORDER_WORKFLOW_TYPE, *LEGACY_ORDER_WORKFLOW_TYPES)


class Step(StrEnum):
    PATCHED = "patched"  # workflow.patched: both branches
    DEPRECATED = "deprecated"  # workflow.deprecate_patch: the new branch only
    REMOVED = "removed"  # no call left


@dataclass(frozen=True)
class Patch:
    id: str
    # The generation whose code added it (0: before generations were recorded).
    added: int
    step: Step = Step.PATCHED
    # The generation whose code deprecated it (for REMOVED).
    deprecated: int | None = None


# Every patch the order workflow has carried, oldest first (workflows/order.py says what each does).
ORDER_PATCHES: tuple[Patch, ...] = (
    Patch("plan-waits-visibly", added=0),
    Patch("no-step-after-interrupt", added=0),
    Patch("first-load-observed", added=0),
    Patch("replan-backs-off", added=0),
    Patch("health-signal-is-a-hint", added=0),
    Patch("replica-troubles-named", added=0),
    Patch("serving-run-starts-fresh", added=0),
    Patch("trouble-end-wakes-loading-order", added=0),
    Patch("trouble-answers-a-failed-probe", added=0),
    Patch("teardown-reads-the-order", added=0),
    Patch("finalizer-beside-others", added=2),
)


def needs(patch: Patch) -> int:
    """The oldest generation a running run may have started under for code that took ``patch``'s step
    to replay it (0: any). Deprecated: a run of the generation that added it, or later (runs of
    generation 0 include runs recorded before every patch there is). Removed: a run of the generation
    that deprecated it, or later (an older run may hold the marker ``patched`` recorded, which only a
    deprecating release accepts)."""
    if patch.step == Step.DEPRECATED:
        return max(patch.added, 1)
    if patch.step == Step.REMOVED:
        if patch.deprecated is None:
            raise ValueError(f"patch {patch.id} is removed without the generation that deprecated it")
        return max(patch.deprecated, 1)
    return 0


def oldest_generation_allowed(patches: tuple[Patch, ...] = ORDER_PATCHES) -> int:
    """The oldest generation a running run may have started under for this code to replay it."""
    return max((needs(patch) for patch in patches), default=0)


def retirement_query(
    needed: int, task_queue: str | None = None, workflow_types: tuple[str, ...] = ORDER_WORKFLOW_TYPES
) -> str | None:
    """The visibility query of running runs started before generation ``needed`` (None: none can be
    too old), of the module's task queue when given (another installation's runs are its own worker's
    business). A run without the attribute was recorded before generations: 0."""
    if needed <= 0:
        return None
    key = ORDER_RUN_GENERATION.name
    types = ", ".join(f"'{t}'" for t in workflow_types)
    queue = f" AND TaskQueue = '{task_queue}'" if task_queue else ""
    return f"WorkflowType IN ({types}) AND ExecutionStatus = 'Running'{queue} AND ({key} < {needed} OR {key} IS NULL)"


def blocking_patches(patches: tuple[Patch, ...], generation: int) -> list[str]:
    """The ids of the retired patches a run started under ``generation`` is too old for."""
    return [patch.id for patch in patches if generation < needs(patch)]


def check_patch_table(patches: Mapping[str, Patch] | tuple[Patch, ...], generation: int = RUN_GENERATION) -> None:
    """The table's own rules: unique ids, no generation from the future, a step only after its
    prerequisite generation."""
    items = tuple(patches.values()) if isinstance(patches, Mapping) else patches
    ids = [p.id for p in items]
    if len(ids) != len(set(ids)):
        raise ValueError("a patch id is listed twice")
    for patch in items:
        if patch.added > generation:
            raise ValueError(f"patch {patch.id} was added in generation {patch.added}, after this code's {generation}")
        if patch.step != Step.PATCHED and generation <= patch.added:
            raise ValueError(f"patch {patch.id} is retired by the generation that added it")
        if patch.step == Step.REMOVED and (patch.deprecated is None or generation <= patch.deprecated):
            raise ValueError(f"patch {patch.id} is removed by the generation that deprecated it, or before")
        if patch.deprecated is not None and patch.deprecated <= patch.added:
            raise ValueError(f"patch {patch.id} is deprecated by the generation that added it, or before")
