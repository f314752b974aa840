"""The resource planner: a pure planning library (and, in another module, the HTTP service around it).

    from planner import PlanningRequest, plan_launch
    outcome = plan_launch(PlanningRequest(facts=..., acceleratorPolicy=..., inventory=...))

Modules: ``inventory`` (snapshot types), ``cel_selectors`` (DeviceClass selectors), ``share`` (the
share rule), ``model_facts`` (size, quantization, estimates), ``recipes`` (the recipe tables),
``planning`` (``plan_launch``). See docs/planner.md.
"""

from planner.inventory import Device, DeviceAllocation, DeviceClass, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch
from planner.recipes import RecipeBook, load_recipe_book

__all__ = [
    "Device",
    "DeviceAllocation",
    "DeviceClass",
    "InventorySnapshot",
    "PlanningRequest",
    "RecipeBook",
    "load_recipe_book",
    "plan_launch",
]
