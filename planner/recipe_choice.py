"""Stage 2 of a plan, runtime: one recipe per hardware family of the slots. Pure.

For each family in play, ``resolve_recipe`` gives a compiled recipe, a preset, or (runtime fallback
enabled) a synthesized one; a family without one goes to the trace with why.

Resolutions are memoized across plans by (recipe book, family, facts, fallback flag): a resolution is
a pure function of them, and on a small inventory the larger part of a plan's cost. The key holds no
snapshot, so the memo hits in production whenever a model is planned again (a replan, another order of
the same model) on a family already seen. ``RecipeChoice`` is frozen; rendering copies its dicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from inference_api.plan import LaunchPlanRequest
from planner.placement import Slot
from planner.recipes import RecipeBook, RecipeChoice, RecipeFailure, RecipeProblem, RecipeResolution, resolve_recipe
from planner.refusals import Trace, join


def choose_recipes(
    request: LaunchPlanRequest, book: RecipeBook, slots: list[Slot], families: Sequence[str | None], trace: Trace
) -> dict[str | None, RecipeChoice]:
    """Family → its recipe, for the families that have one. ``families``: those of the slots, in the
    order they first appear."""
    choices: dict[str | None, RecipeChoice] = {}
    for family in families:
        if family is None:
            products = sorted({s.device.productName or "unknown product" for s in slots if s.family is None})
            trace.recipeFailures.append(
                RecipeFailure(
                    RecipeProblem.NO_RUNTIME,
                    "unknown",
                    f"the hardware family of {join(products)} is unknown, so no runtime is known for it",
                )
            )
            continue
        resolution = _resolve(book, family, request)
        if resolution.choice is not None:
            choices[family] = resolution.choice
        elif resolution.failure is not None:
            trace.recipeFailures.append(resolution.failure)
    return choices


_RESOLUTIONS: dict[tuple[object, ...], tuple[RecipeBook, RecipeResolution]] = {}
_RESOLUTION_LIMIT = 4096


def _resolve(book: RecipeBook, family: str, request: LaunchPlanRequest) -> RecipeResolution:
    facts = request.facts
    fallback = request.runtimeFallback.enabled
    key = (id(book), family, fallback, facts.model_dump_json())
    found = _RESOLUTIONS.get(key)
    # The book itself is kept with the entry: an id is reused once its object is gone.
    if found is not None and found[0] is book:
        return found[1]
    resolution = resolve_recipe(book, family, facts, fallback_enabled=fallback)
    if len(_RESOLUTIONS) >= _RESOLUTION_LIMIT:
        _RESOLUTIONS.clear()
    _RESOLUTIONS[key] = (book, resolution)
    return resolution
