"""The pure checks of activities/trusted_apply.py: what an apply may write, whatever the workflow says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from activities.builders.endpoint_front import FRONT_CONTAINER
from activities.builders.statefulset import build_statefulset
from activities.trusted_apply import (
    Ownership,
    decoys,
    foreign_message,
    held_model_differs,
    left_behind,
    order_problem,
    ownership,
    plan_policy_problem,
    recipe_facts,
    recipe_problem,
    resolution_problem,
    runs_already,
    trusted_order,
    verified_ceiling,
)
from inference_api.catalog_types import ModelFacts
from inference_api.payloads import ModelResolution
from inference_api.plan import LaunchPlan, RecipeSource
from inference_api.types import EndpointType, InferenceService
from planner.recipes import load_recipe_book, render_recipe, resolve_recipe
from tests import factories as f

BOOK = load_recipe_book()
COMPILED_MODEL = "Qwen/Qwen2.5-32B-Instruct-AWQ"  # compiled for hopper in recipes/
H100_MIB = 81559
UID = f.UID


def planned(
    model: str = COMPILED_MODEL,
    share: int = 30,
    devices: int = 1,
    device_mib: int | None = H100_MIB,
    fallback: bool = False,
    facts: ModelFacts | None = None,
) -> tuple[LaunchPlan, ModelResolution]:
    """A plan whose recipe is what the planner renders (planner.planning._launch_plan does the same)."""
    resolution = ModelResolution(servedName=model, source=model, facts=facts)
    order = f.order(model=model)
    choice = resolve_recipe(
        BOOK, "hopper", recipe_facts(order, resolution, EndpointType.CHAT), fallback_enabled=fallback
    ).choice
    assert choice is not None
    recipe = render_recipe(choice, share_percent=share, device_count=devices, device_mib=device_mib)
    plan = f.plan(share=share, device_count=devices).model_copy(update={"recipe": recipe})
    return plan, resolution


def problem(
    plan: LaunchPlan, resolution: ModelResolution, fallback: bool = False, model: str = COMPILED_MODEL
) -> str | None:
    facts = recipe_facts(f.order(model=model), resolution, EndpointType.CHAT)
    return recipe_problem(plan, facts, BOOK, fallback_enabled=fallback)


def with_recipe(plan: LaunchPlan, **update: Any) -> LaunchPlan:
    return plan.model_copy(update={"recipe": plan.recipe.model_copy(update=update)})


# ------------------------------------------------------------------------------------------ recipe


@pytest.mark.parametrize("share", [100, 30, 7])
@pytest.mark.parametrize("devices", [1, 2, 4])
def test_the_planners_own_recipe_passes(share: int, devices: int) -> None:
    plan, resolution = planned(share=share, devices=devices)
    assert problem(plan, resolution) is None


def test_a_recipe_sized_for_a_device_whose_memory_is_not_in_the_plan_passes() -> None:
    # On a whole device the planner may raise --gpu-memory-utilization for the model: any fraction goes.
    plan, resolution = planned(share=100, device_mib=16384)
    assert problem(plan, resolution) is None


def test_another_image_is_refused_naming_the_release_image() -> None:
    plan, resolution = planned()
    why = problem(with_recipe(plan, image="docker.io/library/busybox:latest"), resolution)
    assert why is not None
    assert "busybox" in why
    assert BOOK.compiled.runtime.image in why


def test_another_runtime_version_is_refused() -> None:
    plan, resolution = planned()
    assert "runtime version" in (problem(with_recipe(plan, runtimeVersion="0.1.0"), resolution) or "")


@pytest.mark.parametrize(
    "args_edit",
    [
        lambda a: [*a, "--trust-remote-code"],
        lambda a: [*a, "--chat-template", "/etc/passwd"],
        lambda a: ["--max-model-len" if x == "--max-model-len" else x for x in a][:-1],
        lambda a: [x if x != "8192" else "131072" for x in a],
        lambda a: [x for x in a if x != "--enable-prefix-caching"],
    ],
    ids=["extra-flag", "extra-flag-with-value", "dropped-value", "changed-value", "dropped-flag"],
)
def test_an_argument_not_in_the_tables_is_refused(args_edit: Any) -> None:
    plan, resolution = planned()
    edited = with_recipe(plan, args=args_edit(list(plan.recipe.args)))
    assert edited.recipe.args != plan.recipe.args
    assert problem(edited, resolution) is not None


def test_the_refusal_names_the_argument_not_in_the_tables() -> None:
    plan, resolution = planned()
    why = problem(with_recipe(plan, args=[*plan.recipe.args, "--trust-remote-code"]), resolution)
    assert why is not None
    assert "['--trust-remote-code'] are not in it" in why


def test_an_injected_environment_is_refused() -> None:
    plan, resolution = planned()
    why = problem(with_recipe(plan, env={**plan.recipe.env, "LD_PRELOAD": "/tmp/x.so"}), resolution)
    assert why is not None
    assert "LD_PRELOAD" in why


@pytest.mark.parametrize("value", ["1.5", "0", "-0.1", "all", "nan"])
def test_a_gpu_memory_utilization_that_is_not_a_fraction_is_refused(value: str) -> None:
    plan, resolution = planned()
    args = list(plan.recipe.args)
    args[args.index("--gpu-memory-utilization") + 1] = value
    assert "gpu-memory-utilization" in (problem(with_recipe(plan, args=args), resolution) or "")


def test_tensor_parallelism_must_be_the_plans_device_count() -> None:
    plan, resolution = planned(devices=2)
    args = list(plan.recipe.args)
    args[args.index("--tensor-parallel-size") + 1] = "8"
    assert "device count 2" in (problem(with_recipe(plan, args=args), resolution) or "")


def test_a_recipe_for_another_model_is_refused() -> None:
    plan, _resolution = planned()
    other = ModelResolution(servedName="org/other-7B", source="org/other-7B")
    # The fallback recipe of another model has other arguments than the compiled one.
    assert problem(plan, other, fallback=True, model="org/other-7B") is not None


def test_no_recipe_for_the_model_without_the_fallback_is_refused() -> None:
    plan, _ = planned()
    other = ModelResolution(servedName="org/unknown-7B", source="org/unknown-7B")
    why = problem(plan, other, fallback=False, model="org/unknown-7B")
    assert why is not None
    assert "no recipe" in why


def test_a_fallback_recipe_stays_the_releases_own_after_the_fallback_is_turned_off() -> None:
    plan, resolution = planned(model="org/unknown-7B", fallback=True)
    assert plan.recipe.source == RecipeSource.FALLBACK
    assert problem(plan, resolution, fallback=False, model="org/unknown-7B") is None


def test_the_source_must_match() -> None:
    plan, resolution = planned()
    assert "source" in (problem(with_recipe(plan, source=RecipeSource.PRESET), resolution) or "")


# ------------------------------------------------------------------------------------------ the order


def live(uid: str = UID, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "support-llm", "namespace": "support", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta}


def test_order_problem() -> None:
    assert order_problem(live(), "support", "support-llm", UID) is None
    assert "no longer exists" in (order_problem(None, "support", "support-llm", UID) or "")
    assert "another order" in (order_problem(live("other"), "support", "support-llm", UID) or "")
    assert "being deleted" in (order_problem(live(deleting=True), "support", "support-llm", UID) or "")


def test_the_trusted_order_is_the_live_one_with_only_the_held_model() -> None:
    current = f.order(model="org/new-7B", generation=3)
    held = f.order(model="org/old-7B", generation=1, auth_secret={"name": "hf-token", "key": "token"})
    held = held.model_copy(update={"metadata": held.metadata.model_copy(update={"uid": "forged", "namespace": "x"})})
    trusted = trusted_order(current, held)
    assert trusted.metadata == current.metadata
    assert trusted.spec.model == held.spec.model
    assert trusted.spec.inferenceServiceClassName == current.spec.inferenceServiceClassName
    assert held_model_differs(current, held)
    assert not held_model_differs(current, current)


def test_a_hugging_face_resolution_must_be_the_orders_own() -> None:
    order = f.order(model="org/m-7B")
    assert resolution_problem(order, ModelResolution(servedName="org/m-7B", source="org/m-7B")) is None
    assert resolution_problem(order, ModelResolution(servedName="org/m-7B")) is None
    assert resolution_problem(order, ModelResolution(servedName="org/m-7B", source="evil/m")) is not None
    assert resolution_problem(order, ModelResolution(servedName="gpt-4", source="org/m-7B")) is not None
    facts = ModelFacts(parameterCount="7B", quantization="awq")
    assert resolution_problem(order, ModelResolution(servedName="org/m-7B", facts=facts)) is not None
    catalog = f.order(catalog={"kind": "ClusterModel", "name": "m"})
    assert resolution_problem(catalog, ModelResolution(servedName="anything")) is None  # looked up again


# ------------------------------------------------------------------------------------ the workload


def sts(order: InferenceService, plan: LaunchPlan | None = None) -> dict[str, Any]:
    return build_statefulset(f.inputs(the_order=order, the_plan=plan))


def test_runs_already_is_true_only_for_the_same_model_recipe_and_secrets() -> None:
    order = f.order(auth_secret={"name": "hf-token", "key": "token"})
    standing = sts(order)
    assert runs_already(standing, copy.deepcopy(standing))
    assert not runs_already(None, standing)
    other_secret = f.order(auth_secret={"name": "someone-elses", "key": "token"})
    assert not runs_already(standing, sts(other_secret))
    assert not runs_already(
        standing, sts(f.order(model="org/other-7B", auth_secret={"name": "hf-token", "key": "token"}))
    )
    busybox = with_recipe(f.plan(), image="docker.io/library/busybox:latest")
    assert not runs_already(standing, sts(order, busybox))
    args = with_recipe(f.plan(), args=["--trust-remote-code"])
    assert not runs_already(standing, sts(order, args))


def test_runs_already_ignores_what_is_not_the_workloads_identity() -> None:
    order = f.order()
    standing = sts(order)
    scaled = copy.deepcopy(standing)
    scaled["spec"]["replicas"] = 5
    scaled["status"] = {"readyReplicas": 3}
    scaled["spec"]["template"]["spec"]["containers"][0]["env"].reverse()
    assert runs_already(standing, scaled)


def test_runs_already_sees_the_endpoint_front() -> None:
    # The front holds the token check: a StatefulSet whose front runs another image or program is not
    # the one the release builds, whatever its engine container says.
    standing = sts(f.order())
    for field, value in (("image", "docker.io/library/busybox:latest"), ("command", ["sh", "-c", "true"])):
        forged = copy.deepcopy(standing)
        front = next(c for c in forged["spec"]["template"]["spec"]["containers"] if c["name"] == FRONT_CONTAINER)
        front[field] = value
        assert not runs_already(standing, forged), field


# ------------------------------------------------------------------------------------ the ceiling


def test_only_the_ledgers_ceiling_counts() -> None:
    assert verified_ceiling(None, "order/a/b/c") is None
    assert verified_ceiling({}, "order/a/b/c") is None
    assert verified_ceiling({"order/x/y/z": 1}, "order/a/b/c") is None
    assert verified_ceiling({"order/a/b/c": 2}, "order/a/b/c") == 2
    assert verified_ceiling({"order/a/b/c": 0}, "order/a/b/c") == 1


# ------------------------------------------------------------------------------------ ownership


def obj(
    name: str = "support-llm",
    owner_uid: str | None = UID,
    owner_name: str = "support-llm",
    owner_kind: str = "InferenceService",
    controller: bool = True,
    labelled: bool = True,
    manager: str | None = "ai-inference",
    kind: str = "Service",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "support", "uid": f"uid-of-{name}"}
    if labelled:
        meta["labels"] = {
            "app.kubernetes.io/managed-by": "ai-inference",
            "ai.deckhouse.io/inference-service": "support-llm",
        }
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "ai.deckhouse.io/v1alpha1",
                "kind": owner_kind,
                "name": owner_name,
                "uid": owner_uid,
                "controller": controller,
            }
        ]
    if manager:
        meta["managedFields"] = [{"manager": manager, "operation": "Apply"}]
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def test_ownership_is_the_controller_uid() -> None:
    assert ownership(None, "support-llm", UID) == Ownership.ABSENT
    assert ownership(obj(), "support-llm", UID) == Ownership.OURS
    assert ownership(obj(owner_uid=None), "support-llm", UID) == Ownership.FOREIGN
    assert ownership(obj(controller=False), "support-llm", UID) == Ownership.FOREIGN
    assert ownership(obj(owner_uid="old"), "support-llm", UID) == Ownership.LEFT_BY_DELETED_ORDER
    assert ownership(obj(owner_uid="old", owner_name="other"), "support-llm", UID) == Ownership.FOREIGN
    assert ownership(obj(owner_uid="x", owner_kind="Deployment"), "support-llm", UID) == Ownership.FOREIGN


def test_foreign_message_says_whose_it_is_and_what_to_do() -> None:
    message = foreign_message("Service", "support", "support-llm", obj(owner_uid=None))
    assert "no controller ownerReference" in message
    assert "delete or rename" in message
    message = foreign_message("Service", "support", "support-llm", obj(owner_uid="x", owner_kind="Deployment"))
    assert "Deployment" in message


def test_decoys_are_labelled_objects_that_are_not_the_orders() -> None:
    standing = [
        obj("mine"),
        obj("decoy", owner_uid=None),
        obj("old", owner_uid="old"),
        obj("plain", labelled=False, owner_uid=None),
    ]
    assert decoys(standing, "support-llm", UID) == [("Service", "decoy"), ("Service", "old")]


def test_left_behind_takes_the_orders_own_and_its_orphans_only() -> None:
    standing = [
        obj("mine"),
        obj("orphaned", owner_uid=None),  # --cascade=orphan stripped its ownerReference
        obj("decoy", owner_uid=None, manager="kubectl-create"),  # labelled by hand, never applied by the module
        obj("foreign", owner_uid="x", owner_kind="Deployment"),
        obj("unlabelled", owner_uid=None, labelled=False),
        obj("old", owner_uid="old"),
    ]
    assert [o["name"] for o in left_behind(standing, "support-llm", UID)] == ["mine", "orphaned"]
    assert left_behind(standing, "support-llm", UID)[0] == {
        "apiVersion": "v1",
        "kind": "Service",
        "name": "mine",
        "uid": "uid-of-mine",
    }


# ------------------------------------------------------------------------------------ the placement


def test_the_plan_must_be_one_the_class_allows() -> None:
    cls = f.external_token_certmanager()  # Shared/Dedicated, WholeDevice/Partition, one device
    assert plan_policy_problem(f.plan(share=50), cls) is None
    assert "maxAcceleratorCount" in (plan_policy_problem(f.plan(device_count=2), cls) or "")
    limited = f.service_class(
        acceleratorPolicy={"allowedDeviceClasses": ["team-a-h100"], "allowedSharingModes": ["Dedicated"]}
    )
    assert "allowedDeviceClasses" in (plan_policy_problem(f.plan(device_class="other-team"), limited) or "")
    assert "sharing mode" in (plan_policy_problem(f.plan(share=50, device_class="team-a-h100"), limited) or "")
    assert plan_policy_problem(f.plan(device_class="team-a-h100"), limited) is None
    # No acceleratorPolicy: one whole, dedicated device per replica.
    bare = f.cluster_local_none()
    assert plan_policy_problem(f.plan(), bare) is None
    assert "sharing mode Shared" in (plan_policy_problem(f.plan(share=50), bare) or "")
