"""What an apply may write, decided from Kubernetes and the release, never from workflow state.

A workflow's state, a signal or an update can be forged by anyone who reaches Temporal (terminate a
workflow and start it again with an edited state; ``temporal workflow signal`` by hand). The apply
activity therefore treats what the workflow hands it as a *request* and checks it here, with pure
functions, against what the API server and the release say at apply time:

* **the order**, read by uid: a missing order, or one of the same name with another uid (deleted and
  made again) gets no write at all (``order_problem``);
* **the spec** is the order's own. The workflow may hold an older spec (``LaunchPlanInForce``: a
  refused replan keeps the held plan and the held spec running); such a held spec is honoured only
  where the workload it builds is the one that already runs (``runs_already``), so keeping what
  runs is allowed and changing anything towards a state the order never asked for is not;
* **the recipe** must be the one the release's own tables compile for the plan's hardware and the
  model (``recipe_problem``): its image is the release's runtime image, its arguments and
  environment are the compiler's. The only free values are the two the planner sizes from the
  device (``--gpu-memory-utilization``, a fraction, and ``--tensor-parallel-size``, the plan's
  device count);
* **the Secret a model download reads** is the one the order names (``authSecretRef`` of the order,
  a Secret in the order's own namespace — a ``secretKeyRef`` cannot leave the pod's namespace);
* **a replica ceiling** is honoured only as the preemption workflow told it to this order, read from
  that workflow's history (``verified_ceiling``, activities/preemption_ledger.py);
* **objects** are the order's only when their controller ownerReference carries the order's uid
  (``ownership``): a decoy with the module's labels is never adopted, patched or deleted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from activities.builders.common import (
    FETCHER_CONTAINER,
    FIELD_MANAGER,
    LABEL_MANAGED_BY,
    LABEL_ORDER,
    MANAGED_BY,
    RUNTIME_CONTAINER,
    parse_quantity,
)
from activities.builders.endpoint_front import FRONT_CONTAINER
from inference_api.catalog_types import ModelFacts
from inference_api.payloads import ModelResolution
from inference_api.plan import LaunchPlan, OrderFacts, RecipeSource
from inference_api.types import EndpointType, InferenceService, InferenceServiceClass, ModelSource, ServingFeature
from planner.policy import effective_policy
from planner.recipes import GPU_MEMORY_UTILIZATION, TENSOR_PARALLEL_SIZE, RecipeBook, render_recipe, resolve_recipe

ORDER_KIND = "InferenceService"

# ------------------------------------------------------------------------------------------ the order


def order_problem(live: Mapping[str, Any] | None, namespace: str, name: str, uid: str) -> str | None:
    """Why an apply for order ``uid`` must not write (None: the order stands and is that one)."""
    if live is None:
        return f"InferenceService {namespace}/{name} no longer exists: nothing is applied for it"
    meta = live.get("metadata") or {}
    if meta.get("uid") != uid:
        return (
            f"InferenceService {namespace}/{name} is now another order (uid {meta.get('uid')}, not {uid}): "
            "the apply made for the deleted one writes nothing"
        )
    if meta.get("deletionTimestamp"):
        return f"InferenceService {namespace}/{name} is being deleted: nothing more is applied for it"
    return None


def trusted_order(live: InferenceService, held: InferenceService) -> InferenceService:
    """The order an apply builds from: the live object, with the model the workflow holds.

    Only ``spec.model`` may come from the held spec (a refused replan keeps running the model the plan
    was made for); everything else — metadata (uid, namespace, generation), the class name — is the
    live object's. Whether the held model may be used is decided by ``runs_already`` once the
    workload it builds is known: ``held_model_differs`` says when that check is needed.
    """
    spec = live.spec.model_copy(update={"model": held.spec.model})
    return live.model_copy(update={"spec": spec})


def held_model_differs(live: InferenceService, held: InferenceService) -> bool:
    return live.spec.model != held.spec.model


def resolution_problem(order: InferenceService, resolution: ModelResolution) -> str | None:
    """The workflow's model resolution against the order, for a Hugging Face model (nothing to look up).

    The direct path resolves a Hugging Face order to its own repository, served under that name, with
    no facts (``resolve_model``); anything else was not made by this module. A catalog model is
    resolved again from the catalog at apply time instead.
    """
    model = order.spec.model
    if model.src != ModelSource.HUGGING_FACE:
        return None
    if resolution.servedName != model.ref.name or resolution.source not in (None, model.ref.name):
        return (
            f"the workflow's model resolution ({resolution.servedName!r} from {resolution.source!r}) is not the "
            f"order's model {model.ref.name!r}"
        )
    if resolution.facts is not None:
        return "the workflow's model resolution carries catalog facts for a Hugging Face model, which has none"
    return None


# ------------------------------------------------------------------------------------------ recipe


def recipe_facts(
    order: InferenceService,
    resolution: ModelResolution,
    endpoint_type: EndpointType,
    disabled_features: Sequence[ServingFeature] = (),
) -> OrderFacts:
    """The facts the planner compiled the recipe from (as ``planner_client.launch_plan_request`` sends them;
    ``disabled_features``: the class's ``modelPolicy.disabledFeatures``)."""
    facts: ModelFacts | None = resolution.facts
    return OrderFacts(
        modelName=resolution.servedName,
        parameterCount=facts.parameterCount if facts else None,
        orderParameterCount=order.spec.model.parameterCount,
        quantization=facts.quantization if facts else None,
        format=facts.format if facts else None,
        endpointType=endpoint_type,
        disabledFeatures=list(disabled_features),
    )


def _sized_args(args: Sequence[str], device_count: int) -> tuple[list[str], str | None]:
    """The arguments with the two device-sized values taken out; a problem when either is wrong."""
    out: list[str] = []
    index = 0
    while index < len(args):
        flag = args[index]
        if flag in (GPU_MEMORY_UTILIZATION, TENSOR_PARALLEL_SIZE):
            value = args[index + 1] if index + 1 < len(args) else ""
            if flag == GPU_MEMORY_UTILIZATION:
                try:
                    fraction = float(value)
                except ValueError:
                    fraction = math.nan
                if not 0 < fraction <= 1:
                    return out, f"{GPU_MEMORY_UTILIZATION} {value!r} is not a fraction of the device in (0, 1]"
            elif value != str(device_count):
                return out, f"{TENSOR_PARALLEL_SIZE} {value!r} is not the plan's device count {device_count}"
            out += [flag, "<sized>"]
            index += 2
            continue
        out.append(flag)
        index += 1
    return out, None


def recipe_problem(plan: LaunchPlan, facts: OrderFacts, book: RecipeBook, *, fallback_enabled: bool) -> str | None:
    """Why the plan's recipe is not one the release's tables compile for this hardware and model.

    None: its image, runtime version, source, environment and arguments are exactly the compiler's
    (``planner.recipes.resolve_recipe`` + ``render_recipe``), the device-sized values aside.
    """
    recipe = plan.recipe
    model = facts.modelName
    # A generic (fallback) recipe was made while the fallback was on: it is still the release's own.
    allowed_fallback = fallback_enabled or recipe.source == RecipeSource.FALLBACK
    resolution = resolve_recipe(book, recipe.hardwareFamily, facts, fallback_enabled=allowed_fallback)
    if resolution.choice is None:
        why = resolution.failure.message if resolution.failure else "no recipe"
        return f"the release's recipe tables have no recipe for {model} on {recipe.hardwareFamily}: {why}"
    expected = render_recipe(
        resolution.choice, share_percent=plan.sharePercent, device_count=plan.deviceCount, device_mib=None
    )
    where = f"for {model} on {recipe.hardwareFamily}"
    if recipe.image != expected.image:
        return f"image {recipe.image!r} is not the release's runtime image {expected.image!r} {where}"
    if recipe.runtimeVersion != expected.runtimeVersion:
        return f"runtime version {recipe.runtimeVersion!r} is not the release's {expected.runtimeVersion!r} {where}"
    if recipe.source != expected.source:
        return f"recipe source {recipe.source} is not the {expected.source} recipe the tables hold {where}"
    if recipe.env != expected.env:
        extra = sorted(set(recipe.env.items()) - set(expected.env.items()))
        return f"environment {dict(extra) or recipe.env} is not the recipe's {where}"
    got, problem = _sized_args(recipe.args, plan.deviceCount)
    if problem is not None:
        return problem
    want, _ = _sized_args(expected.args, plan.deviceCount)
    if got != want:
        unknown = [a for a in recipe.args if a not in expected.args and not _is_number(a)]
        detail = f"arguments {unknown} are not in it" if unknown else f"arguments {recipe.args} are not {expected.args}"
        return f"the recipe's {detail} (the release compiles {where})"
    return None


def plan_policy_problem(plan: LaunchPlan, cls: InferenceServiceClass) -> str | None:
    """Why the plan's placement is not one the class's acceleratorPolicy allows (the planner's defaults
    for a class without one: one whole, dedicated device)."""
    policy = effective_policy(cls.spec.acceleratorPolicy)
    name = cls.metadata.name
    if policy.deviceClasses is not None and plan.deviceClass not in policy.deviceClasses:
        return f"device class {plan.deviceClass!r} is not in class {name}'s allowedDeviceClasses"
    if plan.sharingMode not in policy.sharingModes:
        return f"sharing mode {plan.sharingMode} is not allowed by class {name}"
    if plan.placementMode not in policy.placementTypes:
        return f"placement type {plan.placementMode} is not allowed by class {name}"
    if plan.deviceCount > policy.maxAcceleratorCount:
        return f"{plan.deviceCount} devices per replica exceed class {name}'s maxAcceleratorCount"
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------ the workload


def _container(statefulset: Mapping[str, Any], init: bool, name: str) -> Mapping[str, Any]:
    spec = ((statefulset.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in spec.get("initContainers" if init else "containers") or []:
        if container.get("name") == name:
            return dict(container)
    return {}


def _env(container: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A container's environment as comparable pairs (the server drops empty keys; order does not matter)."""
    pairs = []
    for entry in container.get("env") or []:
        value = entry.get("value")
        ref = ((entry.get("valueFrom") or {}).get("secretKeyRef")) or None
        pairs.append((str(entry.get("name")), f"secret:{ref.get('name')}/{ref.get('key')}" if ref else str(value)))
    return sorted(pairs)


def workload_identity(statefulset: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a StatefulSet runs: its containers' images, commands and environments (the model, the recipe,
    the Secrets it reads, the endpoint front that checks the token)."""
    runtime = _container(statefulset, False, RUNTIME_CONTAINER)
    fetcher = _container(statefulset, True, FETCHER_CONTAINER)
    front = _container(statefulset, False, FRONT_CONTAINER)
    return (
        runtime.get("image"),
        tuple(runtime.get("command") or ()),
        tuple(_env(runtime)),
        fetcher.get("image"),
        tuple(fetcher.get("command") or ()),
        tuple(_env(fetcher)),
        front.get("image"),
        tuple(front.get("command") or ()),
        tuple(front.get("args") or ()),
        tuple(_env(front)),
    )


def workload_sizing(statefulset: Mapping[str, Any]) -> tuple[Any, ...]:
    """Where and how large a StatefulSet's replicas are: every container's resources, the pod's node
    affinity and the volume claim templates' requests (what a plan sizes and places)."""
    spec = (statefulset.get("spec") or {}).get("template", {}).get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    claims = (statefulset.get("spec") or {}).get("volumeClaimTemplates") or []
    return (
        tuple((c.get("name"), _amounts(c.get("resources") or {})) for c in containers),
        json.dumps(spec.get("affinity") or {}, sort_keys=True),
        tuple(_amounts((c.get("spec") or {}).get("resources") or {}) for c in claims),
    )


def _amounts(resources: Mapping[str, Any]) -> tuple[Any, ...]:
    """``requests``/``limits`` as exact amounts: the server rewrites quantities ("40960Mi" as "40Gi")."""
    out = []
    for kind in ("requests", "limits"):
        for name, value in sorted((resources.get(kind) or {}).items()):
            try:
                amount: Any = parse_quantity(value)
            except (ValueError, TypeError):
                amount = str(value)
            out.append((kind, name, amount))
    return tuple(out)


def runs_already(standing: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """True when the desired StatefulSet runs exactly what the standing one of the order runs."""
    return standing is not None and workload_identity(standing) == workload_identity(desired)


# ------------------------------------------------------------------------------------ the ceiling


def verified_ceiling(ledger_ceilings: Mapping[str, int] | None, workflow_id: str) -> int | None:
    """The replica ceiling the preemption workflow's ledger holds for this order (None: not a donor).

    What the order workflow believes (its ``replicaCeiling``, set by a ``set_replica_ceiling`` signal
    anyone can send) is not used: only the ledger of the device class's preemption workflow, read at
    apply time from its history, lowers an order's bounds.
    """
    if not ledger_ceilings:
        return None
    ceiling = ledger_ceilings.get(workflow_id)
    return max(1, int(ceiling)) if ceiling is not None else None


# ------------------------------------------------------------------------------------ ownership


class Ownership(StrEnum):
    ABSENT = "absent"
    # The controller ownerReference carries the order's uid.
    OURS = "ours"
    # Owned by an InferenceService of the same name with another uid: a deleted order's object (the
    # live order of that name is this one), which garbage collection takes anyway.
    LEFT_BY_DELETED_ORDER = "left-by-deleted-order"
    # Anything else: a decoy, a user's own object, another controller's. Never adopted, patched or deleted.
    FOREIGN = "foreign"


def _controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            return dict(owner)
    return None


def ownership(current: Mapping[str, Any] | None, order_name: str, order_uid: str) -> Ownership:
    if current is None:
        return Ownership.ABSENT
    meta = current.get("metadata") or {}
    controller = _controller(meta)
    if controller is None:
        return Ownership.FOREIGN
    if controller.get("uid") == order_uid:
        return Ownership.OURS
    if controller.get("kind") == ORDER_KIND and controller.get("name") == order_name:
        return Ownership.LEFT_BY_DELETED_ORDER
    return Ownership.FOREIGN


def foreign_message(kind: str, namespace: str, name: str, current: Mapping[str, Any]) -> str:
    controller = _controller(current.get("metadata") or {})
    owner = (
        f"its controller is {controller.get('kind')} {controller.get('name')} (uid {controller.get('uid')})"
        if controller
        else "it has no controller ownerReference"
    )
    return (
        f"{kind} {namespace}/{name} exists and is not this order's: {owner}. The module never adopts an object "
        "it did not make for this order; delete or rename it, and the order applies again"
    )


def _labelled_for(meta: Mapping[str, Any], order_name: str) -> bool:
    labels = meta.get("labels") or {}
    return labels.get(LABEL_MANAGED_BY) == MANAGED_BY and labels.get(LABEL_ORDER) == order_name


def decoys(standing: Sequence[Mapping[str, Any]], order_name: str, order_uid: str) -> list[tuple[str, str]]:
    """(kind, name) of objects that carry the module's labels for this order but are not the order's."""
    out = []
    for obj in standing:
        meta = obj.get("metadata") or {}
        if not _labelled_for(meta, order_name):
            continue
        if ownership(obj, order_name, order_uid) == Ownership.OURS:
            continue
        out.append((str(obj.get("kind")), str(meta.get("name"))))
    return out


def _applied_by_module(meta: Mapping[str, Any]) -> bool:
    # Server-side apply ("Apply"), or the create of the create-only token Secret ("Update").
    return any(entry.get("manager") == FIELD_MANAGER for entry in meta.get("managedFields") or [])


def left_behind(standing: Sequence[Mapping[str, Any]], order_name: str, order_uid: str) -> list[dict[str, Any]]:
    """Objects the order being finalized leaves, to delete explicitly, each as {apiVersion, kind, name, uid}.

    Its own objects (controller uid = the order's), and the ones ``kubectl delete --cascade=orphan``
    stripped of their ownerReference: no ownerReference left at all, the module's labels for this order,
    and written by the module (its field manager). A labelled object with another
    owner, or one the module never applied, is left alone.
    """
    out = []
    for obj in standing:
        meta = obj.get("metadata") or {}
        verdict = ownership(obj, order_name, order_uid)
        orphaned = not meta.get("ownerReferences") and _labelled_for(meta, order_name) and _applied_by_module(meta)
        if verdict != Ownership.OURS and not orphaned:
            continue
        out.append(
            {
                "apiVersion": str(obj.get("apiVersion")),
                "kind": str(obj.get("kind")),
                "name": str(meta.get("name")),
                "uid": str(meta.get("uid")),
            }
        )
    return out
