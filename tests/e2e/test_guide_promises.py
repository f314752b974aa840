"""What the guides promise that no other test showed, on the end-to-end stand (tests/e2e/stand.py:
real API server, scheduler, controllers and kwok; real Temporal; the real watcher and worker;
stand-in runtimes).

* ``SettledRegionKept`` (admin guide, "modelStorageClassName reaches new volumes only"; FAQ): a class
  that now names another StorageClass keeps the standing volume and says so on the order, once per
  divergence — not again on the next reconcile of the same divergence, again once it ended and came
  back (``workflows/order.py``: "Once per divergence").
* A condition's ``lastTransitionTime`` moves only when its status flips (admin guide, end of
  "Author an inference service class"): a class that stops being Ready flips the order's
  ``ClassResolved`` only; its reason changing without a flip keeps the time; the other conditions
  keep theirs throughout.
* The bundled ``default-llm`` stays out of background preemption (``workflows/order_membership.py``):
  its autoscaled orders never report to the preemption workflow of their device class, while an
  order of a class with the very same spec under another name does.
* ``kubectl delete pod`` finishes a runtime transition one replica at a time (admin guide,
  "Upgrading the module"): the deleted replica comes back on the shipped release, the other keeps
  serving on the previous one untouched, and the order counts it; the last one deleted, the order
  is current and the hold is lifted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi, StorageV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.builders.common import LABEL_ORDER
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from inference_api.preemption import preemption_workflow_id
from inference_api.types import CLASSES, GROUP, VERSION
from planner.recipes import load_recipe_book
from tests.chart.helm import Helm, find
from tests.e2e.stand import DEFAULT_LLM, MakeStand, Stand, e2e_settings, replan_once_settled, worker_and_observer
from tests.e2e.test_runtime_upgrade import PREVIOUS, PREVIOUS_IMAGE, SMALL, pod_uids, pods, previous_tables, template
from tests.polling import until
from workflows import activity_names as act
from workflows.preemption import PreemptionState

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

CONDITIONS = ("ClassResolved", "ModelResolved", "Planned", "WorkloadReady", "Ready")


def unique(prefix: str) -> str:
    # Classes and StorageClasses are cluster-wide; the cluster is shared by the session.
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def class_body(name: str, **spec: Any) -> dict[str, Any]:
    return {**DEFAULT_LLM, "metadata": {"name": name}, "spec": {**DEFAULT_LLM["spec"], **spec}}


def storage_class(name: str) -> dict[str, Any]:
    # The fleet binds every claim of an order with a hostPath volume, whatever its StorageClass.
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
    }


@contextlib.contextmanager
def cluster_objects(api: ApiClient) -> Iterator[list[tuple[str, str]]]:
    """Cluster-scoped objects a test makes, as (kind, name), deleted afterwards."""
    made: list[tuple[str, str]] = []
    yield made
    custom, storage = CustomObjectsApi(api), StorageV1Api(api)
    for kind, name in reversed(made):
        with contextlib.suppress(ApiException):
            if kind == "StorageClass":
                storage.delete_storage_class(name)
            else:
                custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, name)


def patch_class(stand: Stand, name: str, spec: dict[str, Any]) -> None:
    stand.custom.patch_cluster_custom_object(GROUP, VERSION, CLASSES, name, {"spec": spec})


def conditions(stand: Stand, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in stand.status(name).get("conditions") or []}


def settled_events(local_cluster: LocalCluster, stand: Stand, name: str) -> list[tuple[str, int]]:
    """The order's SettledRegionKept events, as the admin guide lists them
    (``kubectl get events -n <namespace> --field-selector reason=SettledRegionKept``): (message, count)."""
    listed = local_cluster.kubectl(
        "get", "events", "-n", stand.namespace, "--field-selector", "reason=SettledRegionKept", "-o", "json"
    )
    items = json.loads(listed.stdout)["items"]
    return [(e["message"], e.get("count") or 1) for e in items if e["involvedObject"]["name"] == name]


async def applies(stand: Stand, name: str) -> int:
    return sum(1 for run in await stand.activity_runs(name, act.APPLY_WORKLOAD) if run.completed)


async def until_applied_again(stand: Stand, name: str, before: int) -> int:
    async def more() -> int | None:
        now = await applies(stand, name)
        return now if now > before else None

    found: int = await until(more, timeout=60, interval=0.3, what=f"{name} applied again")
    return found


# --------------------------------------------------------------------------- SettledRegionKept


async def test_settled_region_kept_is_told_once_per_divergence(stand: Stand, local_cluster: LocalCluster) -> None:
    region_a, region_b = unique("region-a"), unique("region-b")
    class_name = unique("e2e-settled")
    with cluster_objects(stand.api) as made:
        for sc in (region_a, region_b):
            StorageV1Api(stand.api).create_storage_class(storage_class(sc))
            made.append(("StorageClass", sc))
        stand.custom.create_cluster_custom_object(
            GROUP, VERSION, CLASSES, class_body(class_name, modelStorageClassName=region_a)
        )
        made.append(("InferenceServiceClass", class_name))
        stand.create_order("settled", SMALL, class_name=class_name)
        await stand.until_phase("settled", "Ready")
        (pvc,) = stand.core.list_namespaced_persistent_volume_claim(stand.namespace).items
        assert pvc.spec.storage_class_name == region_a
        assert settled_events(local_cluster, stand, "settled") == []

        # The class moves to region-b: the order plans again, keeps its volume, and says so.
        applied = await applies(stand, "settled")
        patch_class(stand, class_name, {"modelStorageClassName": region_b})
        applied = await until_applied_again(stand, "settled", applied)
        await stand.until(lambda: len(settled_events(local_cluster, stand, "settled")) == 1, what="the event")
        ((message, count),) = settled_events(local_cluster, stand, "settled")
        assert count == 1
        assert region_a in message
        assert region_b in message
        sts = stand.apps.read_namespaced_stateful_set("settled", stand.namespace)
        assert [t.spec.storage_class_name for t in sts.spec.volume_claim_templates] == [region_a]
        (pvc,) = stand.core.list_namespaced_persistent_volume_claim(stand.namespace).items
        assert pvc.spec.storage_class_name == region_a

        # The same divergence reconciled again (a replan re-applies the workload): not told again.
        created = stand.order("settled")
        assert created is not None
        handle: WorkflowHandle[Any, Any] = stand.workflow("settled")
        outcome = await replan_once_settled(handle)
        assert outcome.planned
        applied = await until_applied_again(stand, "settled", applied)
        await stand.until_phase("settled", "Ready")
        await asyncio.sleep(1)  # the event, had one followed the apply, would be there by now
        assert [c for _, c in settled_events(local_cluster, stand, "settled")] == [1]

        # The divergence ends (the class names the volume's StorageClass again) and comes back: told again.
        patch_class(stand, class_name, {"modelStorageClassName": region_a})
        applied = await until_applied_again(stand, "settled", applied)
        await stand.until_phase("settled", "Ready")
        assert [c for _, c in settled_events(local_cluster, stand, "settled")] == [1]
        patch_class(stand, class_name, {"modelStorageClassName": region_b})
        await until_applied_again(stand, "settled", applied)
        await stand.until(
            lambda: sum(c for _, c in settled_events(local_cluster, stand, "settled")) == 2,
            what=lambda: f"the second divergence told, now {settled_events(local_cluster, stand, 'settled')}",
        )


# ---------------------------------------------------------------------- lastTransitionTime


async def test_a_conditions_transition_time_moves_only_when_its_status_flips(stand: Stand) -> None:
    sc, class_name = unique("e2e-flip-sc"), unique("e2e-flip")
    storage = StorageV1Api(stand.api)
    with cluster_objects(stand.api) as made:
        storage.create_storage_class(storage_class(sc))
        made.append(("StorageClass", sc))
        body = class_body(class_name, modelStorageClassName=sc)
        stand.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, body)
        made.append(("InferenceServiceClass", class_name))
        stand.create_order("flips", SMALL, class_name=class_name)
        await stand.until_phase("flips", "Ready")
        first = conditions(stand, "flips")
        assert {t: first[t]["status"] for t in CONDITIONS} == dict.fromkeys(CONDITIONS, "True")
        times = {t: first[t]["lastTransitionTime"] for t in CONDITIONS}
        # Ready follows ClassResolved in the status (a serving order its class refuses is not Ready to
        # `kubectl wait`; user guide): it flips with it, and is checked with it below.
        others = [t for t in CONDITIONS if t not in ("ClassResolved", "Ready")]

        def ready() -> tuple[str, str, str]:
            found = conditions(stand, "flips")["Ready"]
            return found["status"], found["reason"], found["lastTransitionTime"]

        def class_resolved(reason: str, status: str) -> bool:
            found = conditions(stand, "flips").get("ClassResolved") or {}
            return (found.get("status"), found.get("reason")) == (status, reason)

        def unchanged_others() -> None:
            now = conditions(stand, "flips")
            assert {t: now[t]["lastTransitionTime"] for t in others} == {t: times[t] for t in others}, now
            assert {t: now[t]["status"] for t in others} == dict.fromkeys(others, "True"), now

        # The timestamps have whole seconds: every step below is more than a second after the last.
        await asyncio.sleep(1.1)
        # Flip: the class stops being Ready (the StorageClass it names goes); the order keeps serving.
        storage.delete_storage_class(sc)
        await stand.until(lambda: class_resolved("ClassNotReady", "False"), what=lambda: stand.describe("flips"))
        flipped = conditions(stand, "flips")["ClassResolved"]["lastTransitionTime"]
        assert flipped > times["ClassResolved"]
        await stand.until_phase("flips", "Degraded", "ClassNotReady")
        assert ready() == ("False", "ClassNotReady", flipped)
        unchanged_others()

        await asyncio.sleep(1.1)
        # No flip: another reason, the same status (the class itself goes).
        stand.custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
        await stand.until(lambda: class_resolved("ClassNotFound", "False"), what=lambda: stand.describe("flips"))
        assert conditions(stand, "flips")["ClassResolved"]["lastTransitionTime"] == flipped
        await stand.until(lambda: ready()[1] == "ClassNotFound", what=lambda: stand.describe("flips"))
        assert ready() == ("False", "ClassNotFound", flipped)
        unchanged_others()

        await asyncio.sleep(1.1)
        # Flip back: the StorageClass and the class made again.
        storage.create_storage_class(storage_class(sc))
        stand.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, body)
        await stand.until(lambda: class_resolved("ClassResolved", "True"), what=lambda: stand.describe("flips"))
        await stand.until_phase("flips", "Ready", None)
        healed = conditions(stand, "flips")["ClassResolved"]["lastTransitionTime"]
        assert healed > flipped
        assert ready()[0] == "True"
        assert ready()[2] == healed
        unchanged_others()


# ------------------------------------------------------------------ default-llm and preemption


async def test_the_bundled_class_stays_out_of_preemption(make_stand: MakeStand, helm: Helm) -> None:
    stand = await make_stand({"health": {"scalingIntervalSeconds": 0.5}})
    async with _bundled(stand, helm) as bundled:
        rendered = stand.custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, bundled)
        # The control: the bundled class's very spec under another name.
        twin = unique("e2e-bundled-twin")
        with cluster_objects(stand.api) as made:
            stand.custom.create_cluster_custom_object(
                GROUP, VERSION, CLASSES, {**DEFAULT_LLM, "metadata": {"name": twin}, "spec": rendered["spec"]}
            )
            made.append(("InferenceServiceClass", twin))
            stand.create_order("bundled", SMALL, class_name=bundled)
            stand.create_order("twin", SMALL, class_name=twin)
            await stand.until_phase("bundled", "Ready")
            await stand.until_phase("twin", "Ready")
            for name in ("bundled", "twin"):
                status = stand.status(name)
                assert (status["constraints"]["minReplicas"], status["constraints"]["maxReplicas"]) == (1, 2)

            async def twin_reported() -> bool:
                return any(run.completed for run in await stand.activity_runs("twin", act.REPORT_SCALING))

            await until(twin_reported, timeout=60, interval=0.5, what="the twin's report to its preemption workflow")
            # Both watch their scaling (an autoscaled order's ScalingHealthy is there) ...
            await stand.until(
                lambda: all("ScalingHealthy" in conditions(stand, n) for n in ("bundled", "twin")),
                what=lambda: f"ScalingHealthy on both: {stand.describe('bundled')} / {stand.describe('twin')}",
            )
            # ... only the one of another name tells the preemption workflow.
            assert await stand.activity_runs("bundled", act.REPORT_SCALING) == []
            members: set[str] = set()
            for name in ("bundled", "twin"):
                device_class = stand.status(name)["resolved"]["deviceClass"]
                handle = stand.client.get_workflow_handle(
                    preemption_workflow_id(stand.settings.temporal.taskQueue, device_class)
                )
                with contextlib.suppress(Exception):
                    state = await handle.query("state", result_type=PreemptionState)
                    members |= set(state.reports)
            assert stand.workflow("twin").id in members
            assert stand.workflow("bundled").id not in members


@contextlib.asynccontextmanager
async def _bundled(stand: Stand, helm: Helm) -> AsyncIterator[str]:
    made = False
    try:
        stand.custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, "default-llm")
    except ApiException as err:
        if err.status != 404:
            raise
        rendered = find(helm.render(), "InferenceServiceClass", "default-llm")
        stand.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, rendered)
        made = True
    try:
        yield "default-llm"
    finally:
        # Its orders first (while the worker runs, their finalizers go), then the class.
        stand.delete_orders()
        await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
        if made:
            with contextlib.suppress(ApiException):
                stand.custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, "default-llm")


# ------------------------------------------------------------- kubectl delete pod, one at a time


def runtime_current(stand: Stand, name: str) -> tuple[str, str, str]:
    found = stand.condition(name, "RuntimeCurrent") or {}
    return found.get("status", ""), found.get("reason", ""), found.get("message", "")


async def test_deleting_a_replica_moves_that_one_only_to_the_shipped_runtime(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client, api = temporal_env.client, kube_admin
    shipped = load_recipe_book().compiled.runtime
    fast = {"observer": {"resyncSeconds": 1}}
    old = {"planner": {"recipesDirectory": str(previous_tables(tmp_path / "previous"))}, **fast}
    task_queue = f"e2e-{uuid.uuid4().hex[:6]}"
    namespace = local_cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:6]}", users=())
    # Two fixed replicas: both placed by the plan, no autoscaler to move the count.
    class_name = unique("e2e-two")
    custom = CustomObjectsApi(api)
    custom.create_cluster_custom_object(
        GROUP, VERSION, CLASSES, class_body(class_name, scalingPolicy={"minReplicas": 2, "maxReplicas": 2})
    )
    fleet = StandInFleet(api).start()
    stand = Stand(api, client, fleet, namespace, e2e_settings(task_queue))
    try:
        async with worker_and_observer(client, api, old, task_queue):
            stand.create_order("pair", SMALL, class_name=class_name)
            await stand.until_phase("pair", "Ready")
            await stand.until(lambda: len(pods(stand, "pair")) == 2, what="two replicas")
            assert set(pods(stand, "pair").values()) == {(PREVIOUS, PREVIOUS_IMAGE)}

        async with worker_and_observer(client, api, fast, task_queue):
            await stand.until(
                lambda: runtime_current(stand, "pair")[:2] == ("False", "ReplicasHeldOnPreviousRuntime"),
                timeout=90,
                what=lambda: f"RuntimeCurrent held, now {runtime_current(stand, 'pair')}",
            )
            assert (
                f"0 of 2 replica(s) reached the shipped runtime release {shipped.version}"
                in (runtime_current(stand, "pair")[2])
            )
            assert template(stand, "pair")[2:] == ("OnDelete", "true")
            before = pod_uids(stand, "pair")

            # As the guide says: kubectl delete pod <order>-0.
            started = time.monotonic()
            local_cluster.kubectl("delete", "pod", "pair-0", "-n", namespace, "--wait=false")

            def first_moved() -> bool:
                now = pods(stand, "pair")
                return now.get("pair-0") == (shipped.version, shipped.image) and "pair-1" in now

            await stand.until(
                first_moved, timeout=90, what=lambda: f"pair-0 on the shipped release: {pods(stand, 'pair')}"
            )
            # The other replica was left alone: same pod, previous release.
            assert pod_uids(stand, "pair")["pair-1"] == before["pair-1"]
            assert pods(stand, "pair")["pair-1"] == (PREVIOUS, PREVIOUS_IMAGE)
            await stand.until(
                lambda: (
                    f"1 of 2 replica(s) reached the shipped runtime release {shipped.version}"
                    in runtime_current(stand, "pair")[2]
                ),
                timeout=60,
                what=lambda: f"the order counts the moved replica, now {runtime_current(stand, 'pair')}",
            )
            assert runtime_current(stand, "pair")[:2] == ("False", "ReplicasHeldOnPreviousRuntime")
            assert stand.phase("pair")[0] == "Ready"

            local_cluster.kubectl("delete", "pod", "pair-1", "-n", namespace, "--wait=false")
            await stand.until(
                lambda: (
                    set(pods(stand, "pair").values()) == {(shipped.version, shipped.image)}
                    and len(pods(stand, "pair")) == 2
                ),
                timeout=90,
                what=lambda: f"both replicas on the shipped release: {pods(stand, 'pair')}",
            )
            await stand.until(
                lambda: runtime_current(stand, "pair")[:2] == ("True", "RuntimeUpToDate"),
                timeout=60,
                what=lambda: f"RuntimeCurrent=True, now {runtime_current(stand, 'pair')}",
            )
            print(f"\ntransition finished by two pod deletions in {time.monotonic() - started:.1f}s")
            # The hold goes with the transition.
            await stand.until(
                lambda: template(stand, "pair")[3] != "true",
                timeout=60,
                what=lambda: f"the hold lifted: {template(stand, 'pair')}",
            )
            assert stand.phase("pair")[0] == "Ready"
            assert (stand.order("pair") or {})["metadata"]["generation"] == 1
            labels = stand.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_ORDER}=pair").items
            assert len([p for p in labels if not p.metadata.deletion_timestamp]) == 2

            stand.delete_orders()
            await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
    finally:
        fleet.stop()
        with contextlib.suppress(ApiException):
            stand.core.delete_namespace(namespace)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
