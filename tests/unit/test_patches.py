"""The patch table and its retirement rules (workflows/patches.py, pure): every patch the order
workflow asks is listed, and what a retired one needs of the running runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from workflows import patches as p
from workflows.patches import ORDER_PATCHES, RUN_GENERATION, Patch, Step

ORDER_SOURCE = Path(__file__).resolve().parents[2] / "workflows" / "order.py"


def _patch_constants() -> dict[str, str]:
    """NAME -> id of every ``*_PATCH = "..."`` constant of workflows/order.py."""
    tree = ast.parse(ORDER_SOURCE.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.endswith("_PATCH") and isinstance(node.value, ast.Constant):
                out[name] = str(node.value.value)
    return out


def _asked(call: str) -> set[str]:
    """The constants passed to ``workflow.<call>(...)`` in workflows/order.py."""
    tree = ast.parse(ORDER_SOURCE.read_text())
    return {
        arg.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == call
        for arg in node.args
        if isinstance(arg, ast.Name)
    }


def test_every_patch_the_order_workflow_asks_is_in_the_table_with_its_step() -> None:
    constants = _patch_constants()
    table = {patch.id: patch for patch in ORDER_PATCHES}
    patched = {constants[name] for name in _asked("patched")}
    deprecated = {constants[name] for name in _asked("deprecate_patch")}
    assert patched <= table.keys(), patched - table.keys()
    assert deprecated <= table.keys(), deprecated - table.keys()
    for patch_id in patched:
        assert table[patch_id].step == Step.PATCHED, patch_id
    for patch_id in deprecated:
        assert table[patch_id].step == Step.DEPRECATED, patch_id
    # A table entry still PATCHED or DEPRECATED is asked in the code; a REMOVED one is not.
    for patch in ORDER_PATCHES:
        asked = patch.id in patched | deprecated
        assert asked == (patch.step != Step.REMOVED), patch.id
    p.check_patch_table(ORDER_PATCHES)


def test_nothing_is_retired_yet_so_every_run_replays() -> None:
    assert p.oldest_generation_allowed() == 0
    assert p.retirement_query(0) is None


def test_a_patch_of_the_generation_before_generations_needs_runs_that_know_generations() -> None:
    legacy = Patch("x", added=0, step=Step.DEPRECATED)
    assert p.needs(legacy) == 1  # generation 0 holds every run recorded before the attribute
    later = Patch("y", added=3, step=Step.DEPRECATED)
    assert p.needs(later) == 3  # runs of the generation that added it took the new branch
    removed = Patch("z", added=3, step=Step.REMOVED, deprecated=5)
    assert p.needs(removed) == 5
    assert p.oldest_generation_allowed((legacy, later, removed, Patch("w", added=6))) == 5
    assert p.blocking_patches((legacy, later, removed), 2) == ["y", "z"]
    assert p.blocking_patches((legacy, later, removed), 5) == []


def test_the_query_counts_running_runs_older_than_needed_and_those_without_a_generation() -> None:
    scoped = p.retirement_query(2, "inference")
    assert scoped is not None
    assert "AND TaskQueue = 'inference' AND" in scoped
    query = p.retirement_query(3)
    assert query == (
        "WorkflowType IN ('OrderWorkflowV2', 'OrderWorkflow') AND ExecutionStatus = 'Running' "
        "AND (OrderRunGeneration < 3 OR OrderRunGeneration IS NULL)"
    )


@pytest.mark.parametrize(
    "table",
    [
        (Patch("a", added=0), Patch("a", added=0)),
        (Patch("a", added=RUN_GENERATION + 1),),
        (Patch("a", added=RUN_GENERATION, step=Step.DEPRECATED),),
        (Patch("a", added=0, step=Step.REMOVED),),
        (Patch("a", added=0, step=Step.REMOVED, deprecated=RUN_GENERATION),),
        (Patch("a", added=1, step=Step.DEPRECATED, deprecated=1),),
    ],
    ids=[
        "twice",
        "from-the-future",
        "retired-by-its-own-generation",
        "removed-undeprecated",
        "removed-too-soon",
        "deprecated-before-added",
    ],
)
def test_a_table_that_breaks_the_rules_is_refused(table: tuple[Patch, ...]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (the message is each rule's own)
        p.check_patch_table(table, generation=max(RUN_GENERATION, 1))
