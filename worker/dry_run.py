"""``ai-inference plan``: what an order would get, or why it would wait, before any order exists.

The dry run takes the steps the order workflow takes up to its plan, with the same code:

1. the class — read from the cluster and judged by ``workflows.validation.check_class`` (exists, is
   Ready, declares contracts, admits the namespace);
2. the model — ``check_catalog_enabled``, then the worker's own ``resolve_model`` activity code
   (the ai-models catalog, or a bare Hugging Face reference, which carries no facts), then
   ``check_model_policy`` and ``pick_endpoint_type``;
3. the plan — the planning library (``planner.plan_launch``, the code the planner service and the
   worker's in-process planner run) on the inventory read from the cluster, once for the class as it
   stands (what the order would get) and once per device class the class allows (that class alone),
   all on one inventory snapshot.

The first refusal stops it, with the condition, reason and message the order would get. Nothing is
written to the cluster: no order, no claim.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict

from activities.inventory import read_inventory
from activities.order import OrderActivities
from activities.planner_client import launch_plan_request
from activities.release import order_timings
from inference_api.payloads import OrderRef, PlanInput
from inference_api.plan import LaunchPlan, PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings
from inference_api.types import (
    CLASSES,
    GROUP,
    VERSION,
    AcceleratorPolicy,
    ConditionType,
    EndpointType,
    InferenceService,
    InferenceServiceClass,
    ModelSource,
)
from planner import PlanningRequest, plan_launch
from planner.inventory import InventorySnapshot
from planner.moves import room_by_moving
from planner.recipes import load_recipe_book
from workflows.validation import check_catalog_enabled, check_class, check_model_policy, pick_endpoint_type

# The order the dry run judges: a name no real order has, so nothing in the inventory is its own.
DRY_RUN_NAME = "ai-inference-plan-dry-run"


class DryRunRefusal(BaseModel):
    """The condition that would turn False, with the reason and message the order would get."""

    model_config = ConfigDict(extra="forbid")
    condition: str
    reason: Reason
    message: str


class DeviceClassVerdict(BaseModel):
    """The class's policy narrowed to one device class: its plan there, or why not there."""

    model_config = ConfigDict(extra="forbid")
    deviceClass: str
    plan: LaunchPlan | None = None
    refusal: PlanRefusal | None = None


class MovingVerdict(BaseModel):
    """Would moving other orders make room for it (``planner.moves.room_by_moving``)?"""

    model_config = ConfigDict(extra="forbid")
    possible: bool
    message: str
    node: str | None = None
    moves: list[dict[str, str]] = []


# Refusals about room (not about the model or the class): the ones moving other orders may answer.
ROOM_REASONS = frozenset({Reason.NO_CAPACITY, Reason.RESOURCE_CLAIM_EXHAUSTED, Reason.NO_SCHEDULABLE_NODE})


class DryRun(BaseModel):
    """What ``ai-inference plan`` reports (``-o json`` prints it as is)."""

    model_config = ConfigDict(extra="forbid")
    className: str
    namespace: str
    model: str
    source: ModelSource
    planned: bool
    servedName: str | None = None
    endpointType: EndpointType | None = None
    # What the order would get: exactly one of plan / refusal is set.
    plan: LaunchPlan | None = None
    refusal: DryRunRefusal | None = None
    # Per device class the class allows (every one of the cluster when it names none); empty when a
    # step before planning refused.
    deviceClasses: list[DeviceClassVerdict] = []
    # For an order refused for room: whether moving other orders would make room (planner.moves).
    moving: MovingVerdict | None = None


def order_for(class_name: str, namespace: str, model: str, source: ModelSource, kind: str | None) -> InferenceService:
    """The order the dry run judges, as a user would write it."""
    ref: dict[str, Any] = {"name": model}
    if source == ModelSource.AI_MODELS:
        ref["kind"] = kind or "ClusterModel"
    return InferenceService.model_validate(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": DRY_RUN_NAME, "namespace": namespace, "uid": "dry-run", "generation": 1},
            "spec": {"inferenceServiceClassName": class_name, "model": {"src": str(source), "ref": ref}},
        }
    )


def read_class(api: ApiClient, name: str, timeout: float | None = None) -> InferenceServiceClass | None:
    """The class, or None when it does not exist (other API errors raise)."""
    try:
        obj = CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, CLASSES, name, _request_timeout=timeout)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return InferenceServiceClass.model_validate(obj)


def narrowed(policy: AcceleratorPolicy | None, device_class: str) -> AcceleratorPolicy:
    """The class's accelerator policy with only ``device_class`` allowed."""
    base = policy or AcceleratorPolicy()
    return base.model_copy(update={"allowedDeviceClasses": [device_class]})


def device_classes_of(cls: InferenceServiceClass, inventory: InventorySnapshot) -> list[str]:
    """The device classes a plan for this class may choose from: its list, else every one of the cluster."""
    policy = cls.spec.acceleratorPolicy
    if policy is not None and policy.allowedDeviceClasses:
        return list(policy.allowedDeviceClasses)
    return sorted(c.name for c in inventory.deviceClasses)


async def dry_run(
    api: ApiClient,
    settings: ModuleSettings,
    class_name: str,
    model: str,
    namespace: str = "default",
    source: ModelSource = ModelSource.HUGGING_FACE,
    kind: str | None = None,
) -> DryRun:
    """The dry run of one order (see the module's docstring). API errors raise ``ApiException``;
    an unreachable API server raises urllib3's errors."""
    timeout = settings.planner.timeoutSeconds
    order = order_for(class_name, namespace, model, source, kind)
    result = DryRun(className=class_name, namespace=namespace, model=model, source=source, planned=False)

    def refused(condition: ConditionType, reason: Reason, message: str) -> DryRun:
        result.refusal = DryRunRefusal(condition=str(condition), reason=reason, message=message)
        return result

    cls = read_class(api, class_name, timeout)
    class_refusal = check_class(order, cls)
    if class_refusal is not None or cls is None:
        assert class_refusal is not None
        return refused(ConditionType.CLASS_RESOLVED, class_refusal.reason, class_refusal.message)

    catalog_refusal = check_catalog_enabled(order, order_timings(settings).catalogEnabled)
    if catalog_refusal is not None:
        return refused(ConditionType.MODEL_RESOLVED, catalog_refusal.reason, catalog_refusal.message)

    def no_planner(_: PlanInput) -> PlanOutcome:
        raise AssertionError("the dry run plans itself, on one inventory snapshot")

    resolution = await OrderActivities(api, settings, no_planner).resolve_model(order)
    if resolution.refusal is not None:
        return refused(ConditionType.MODEL_RESOLVED, resolution.refusal, resolution.message or "")
    policy_refusal = check_model_policy(order, cls, resolution.facts)
    if policy_refusal is not None:
        return refused(ConditionType.MODEL_RESOLVED, policy_refusal.reason, policy_refusal.message)
    endpoint_type = pick_endpoint_type(cls, resolution.facts)
    assert endpoint_type is not None  # check_model_policy refused an empty intersection
    result.servedName = resolution.servedName
    result.endpointType = endpoint_type

    request = launch_plan_request(
        PlanInput(
            ref=OrderRef(namespace=namespace, name=DRY_RUN_NAME, uid="dry-run"),
            order=order,
            cls=cls,
            facts=resolution.facts,
            servedName=resolution.servedName,
            endpointType=endpoint_type,
        ),
        settings,
    )
    inventory = read_inventory(api, timeout=timeout)
    recipes = load_recipe_book(settings.planner.recipesDirectory)

    def plan_with(policy: AcceleratorPolicy | None) -> PlanOutcome:
        body = request.model_copy(update={"acceleratorPolicy": policy})
        return plan_launch(PlanningRequest(**dict(body), inventory=inventory), recipes)  # body: the settings too

    outcome = plan_with(cls.spec.acceleratorPolicy)
    for device_class in device_classes_of(cls, inventory):
        one = plan_with(narrowed(cls.spec.acceleratorPolicy, device_class))
        result.deviceClasses.append(DeviceClassVerdict(deviceClass=device_class, plan=one.plan, refusal=one.refusal))
    if outcome.refusal is not None:
        if outcome.refusal.reason in ROOM_REASONS:
            found = room_by_moving(PlanningRequest(**dict(request), inventory=inventory), recipes)
            if found.possible is not None:
                moves = [{"holder": m.holder, "from": m.source, "to": m.target} for m in found.moves]
                result.moving = MovingVerdict(
                    possible=found.possible, message=found.message, node=found.node, moves=moves
                )
        return refused(ConditionType.PLANNED, outcome.refusal.reason, outcome.refusal.message)
    result.plan = outcome.plan
    result.planned = True
    return result


def render_text(run: DryRun) -> str:
    """The dry run for a terminal."""
    lines = [
        f"class {run.className}, model {run.model} ({run.source}), namespace {run.namespace}: "
        + ("planned" if run.planned else "refused")
    ]
    if run.endpointType is not None:
        lines.append(f"  served as {run.servedName}, endpoint type {run.endpointType}")
    if run.plan is not None:
        lines.append(f"  the order would get: {_plan_line(run.plan)}")
        lines.append(f"  recipe: {_recipe_line(run.plan)}")
    if run.refusal is not None:
        lines.append(f"  the order would wait: {run.refusal.condition}=False, reason {run.refusal.reason}")
        lines.append(f"  {run.refusal.message}")
    if run.moving is not None:
        lines.append(f"  would moving other orders make room? {run.moving.message}")
    if run.deviceClasses:
        lines.append("per device class:")
        for verdict in run.deviceClasses:
            if verdict.plan is not None:
                plan = verdict.plan
                lines.append(f"  {verdict.deviceClass}: {_plan_line(plan)}; recipe {_recipe_line(plan)}")
            elif verdict.refusal is not None:
                lines.append(f"  {verdict.deviceClass}: refused, {verdict.refusal.reason}: {verdict.refusal.message}")
    return "\n".join(lines)


def _plan_line(plan: LaunchPlan) -> str:
    where = f" on {plan.nodeName}" if plan.nodeName else ""
    devices = f"{plan.deviceCount} device" + ("s" if plan.deviceCount > 1 else "")
    return (
        f"device class {plan.deviceClass} ({plan.acceleratorProductName}, {plan.acceleratorMemoryGiB} GiB), "
        f"{plan.placementMode}/{plan.sharingMode}, {devices}, share {plan.sharePercent}%{where}"
    )


def _recipe_line(plan: LaunchPlan) -> str:
    recipe = plan.recipe
    return (
        f"{recipe.source} {recipe.runtime} {recipe.runtimeVersion} for {recipe.hardwareFamily} "
        f"({recipe.image}) {' '.join(recipe.args)}"
    ).rstrip()
