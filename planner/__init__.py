"""The resource planner: a pure planning library (and, in another module, the HTTP service around it).

    from planner import PlanningRequest, plan_launch
    outcome = plan_launch(PlanningRequest(facts=..., acceleratorPolicy=..., inventory=...))

Modules: ``inventory`` (snapshot types), ``cel_selectors`` (DeviceClass selectors), ``quantity``
(Kubernetes quantities), ``share`` (the share rule), ``model_facts`` (size, quantization, estimates),
``recipes`` (the recipe tables), ``planning`` (``plan_launch``, the entry) and the stages it runs:
``policy`` (the class's acceleratorPolicy with defaults), ``snapshot`` (the per-plan snapshot index),
``placement`` (stage 1), ``recipe_choice`` (stage 2), ``fit`` (stages 3 and 4, best fit), ``refusals``
(refusal reasons and messages). ``bookings`` holds the planner service's answered plans on the snapshot
until their claims are allocated. ``scaling`` and ``preemption`` serve the order and preemption
workflows. See docs/planner.md.
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
