"""Every activity the workflows call by name is registered by the worker exactly once, and nothing else is."""

from __future__ import annotations

import ast
import inspect
from collections import Counter
from pathlib import Path
from typing import Any

from activities.order import OrderActivities
from activities.preemption import PreemptionActivities
from inference_api.plan import PlanOutcome
from inference_api.settings import ModuleSettings
from workflows import activity_names

WORKFLOWS_DIR = Path(activity_names.__file__).parent


def _registered() -> list[str]:
    # The ApiClient is never called while the activities are only being listed.
    order = OrderActivities(api=None, settings=ModuleSettings(), planner=lambda _: PlanOutcome())
    functions: list[Any] = [*order.all(), *PreemptionActivities().all()]
    return [fn.__temporal_activity_definition.name for fn in functions]


def _called_by_workflows() -> set[str]:
    """Names of ``act.X`` the workflow modules use."""
    names = {k: v for k, v in inspect.getmembers(activity_names) if k.isupper()}
    used: set[str] = set()
    for path in WORKFLOWS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "act":
                used.add(names[node.attr])
    return used


def test_every_activity_is_registered_exactly_once() -> None:
    counts = Counter(_registered())
    assert [name for name, n in counts.items() if n > 1] == []


def test_the_registered_activities_are_the_named_ones_and_the_workflows_call_them_all() -> None:
    named = {v for k, v in inspect.getmembers(activity_names) if k.isupper()}
    registered = set(_registered())
    assert registered == named
    # A name no workflow calls is dead; a called name that is not registered would hang its workflow.
    assert _called_by_workflows() == named
