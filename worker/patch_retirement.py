"""Before the worker polls: no running order workflow is too old for the patches this release's
workflow code has retired (workflows/patches.py; docs/upgrade.md, "Patches have an end").

A run that started under an older code generation than a retired patch needs would replay into a
branch the code no longer has (a nondeterminism error on its next task, the order stuck). One count
query (the runs' ``OrderRunGeneration`` search attribute) answers it; with runs in the way the worker
does not start, and says how many, which patches and what to do. Nothing to check (no patch retired)
asks Temporal nothing.
"""

from __future__ import annotations

import structlog
from temporalio.client import Client

from workflows.patches import ORDER_PATCHES, Patch, blocking_patches, oldest_generation_allowed, retirement_query

log = structlog.get_logger(__name__)


class PatchRetirementError(RuntimeError):
    """Running runs need a patch branch this release's workflow code no longer has."""


async def check_patch_retirement(
    client: Client, task_queue: str | None = None, patches: tuple[Patch, ...] = ORDER_PATCHES
) -> int:
    """Raise :class:`PatchRetirementError` when running order workflows (of ``task_queue``, the
    module's) are too old for ``patches``; return the oldest generation this code replays (0: every run)."""
    needed = oldest_generation_allowed(patches)
    query = retirement_query(needed, task_queue)
    if query is None:
        return needed
    too_old = (await client.count_workflows(query)).count
    if too_old:
        retired = ", ".join(blocking_patches(patches, needed - 1))
        raise PatchRetirementError(
            f"{too_old} running order workflow run(s) started under a workflow code generation older than "
            f"{needed}, which this release no longer replays (retired patches: {retired}). Keep the previous "
            "release's worker until they have continued as new (a serving order's run does every few days; "
            f'`temporal workflow count --query "{query}"` shows how many are left), then start this one: '
            'docs/upgrade.md, "Patches have an end".'
        )
    log.info("no running order workflow is too old for this release", oldest_generation=needed)
    return needed
