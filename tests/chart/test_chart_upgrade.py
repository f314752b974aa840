"""Upgrade from the previous release to this one, and back, with the chart's pods running and orders
serving (issue 34, item 2): restarts of serving replicas counted, each order's time not Ready measured.

The previous release is the build ``tests/upgrade/releases.py`` picks (a commit of this repository); its
chart is installed from its own tree with its image named ``ai-inference:release-<commit>``, which the
stand-in kubelet runs from that tree (``PodKubelet.image_trees``). This release is the working tree's
chart and image. Temporal is an external dev server of this test's own (the chart's ``temporal.address``)
so both releases' workers share the orders' workflows, as an upgrade in place does. ``ORDERS`` orders
(``AI_INFERENCE_CHART_UPGRADE_ORDERS``, default 100) are made under the previous release and serve on
nodes the test adds for them; then ``helm upgrade`` to this release, then ``helm rollback`` to the
previous one. After each the module's pods are replaced and Ready, the new worker polls the orders' task
queue, an order made then is made Ready by that release, every order is Ready again, and the orders'
replicas are compared with before (their phases polled every second meanwhile): this release restarts
none and no order leaves Ready (the admin guide: serving replicas keep serving unless the runtime release
or the placement changes); the rollback's counts are printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.dynamic import DynamicClient
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from devstack.cluster import inventory as inv
from devstack.cluster.launcher import LocalCluster, apply_inventory
from devstack.standins.engine import free_port
from devstack.standins.fleet import PROBE_URL_ANNOTATION, StandInFleet
from devstack.standins.pod_kubelet import GATEWAY, RUN_ANNOTATION, PodKubelet, Relay, apiserver_address
from devstack.standins.runtime import MultiplexedRuntime
from devstack.temporal_dev import temporal_binary
from tests.chart.helm import (
    CHART_DIR,
    NAMESPACE,
    RELEASE,
    Helm,
    create_default_llm_order,
    forget_chart_pods_leases,
    set_args,
)
from tests.polling import wait_until
from tests.upgrade.releases import Release, previous_release

# Three installs, 100 orders made and twice gone over: about four minutes; room for a slow machine.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

GROUP, VERSION, ORDERS_PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"
ORDER_NAMESPACE = "chart-upgrade-orders"
ORDERS = int(os.environ.get("AI_INFERENCE_CHART_UPGRADE_ORDERS", "100"))
EXTRA_NODES = 4  # H100 nodes of the file's shape added for the orders (four shareable cards each)
PROBE_ENV = [{"name": "AI_INFERENCE_HEALTH__PROBETARGETANNOTATION", "value": PROBE_URL_ANNOTATION}]
DEPLOYMENTS = ("ai-inference-planner", "ai-inference-watcher", "ai-inference-worker")


def values(temporal: str, image_tag: str | None) -> dict[str, Any]:
    return {
        "podAnnotations": {RUN_ANNOTATION: "run"},
        "watcher.replicas": 1,
        "worker.replicas": 1,
        "aiInference.catalog.mode": "None",
        "aiInference.temporal.embedded.enabled": False,
        "aiInference.temporal.address": temporal,
        "worker.extraEnv": PROBE_ENV,
        "watcher.extraEnv": PROBE_ENV,
        **({"image.tag": image_tag} if image_tag else {}),
    }


def helm_run(helm: Helm, cluster: LocalCluster, *args: str) -> None:
    common = ["--kubeconfig", str(cluster.kubeconfig("admin")), "--namespace", NAMESPACE, "--timeout", "5m"]
    helm(*args, *common, timeout=360)


def module_pod_uids(core: CoreV1Api) -> set[str]:
    return {
        p.metadata.uid
        for p in core.list_namespaced_pod(NAMESPACE).items
        if RUN_ANNOTATION in (p.metadata.annotations or {})
    }


def replaced(core: CoreV1Api, before: set[str]) -> bool:
    return not module_pod_uids(core) & before


def new_worker(core: CoreV1Api, before: set[str]) -> str:
    (name,) = (
        p.metadata.name
        for p in core.list_namespaced_pod(NAMESPACE).items
        if p.metadata.name.startswith("ai-inference-worker-")
        and p.metadata.uid not in before
        and not p.metadata.deletion_timestamp
    )
    return str(name)


def polled_by(address: str, host: str) -> bool:
    """Whether a worker on ``host`` (the SDK names a worker pid@hostname: the pod's name) polls the orders'
    workflow task queue."""

    async def pollers() -> set[str]:
        client = await Client.connect(address)
        request = DescribeTaskQueueRequest(namespace="default", task_queue=TaskQueue(name="ai-inference"))
        described = await client.workflow_service.describe_task_queue(request)
        return {poller.identity for poller in described.pollers}

    return any(identity.endswith(f"@{host}") for identity in asyncio.run(pollers()))


def create_order(custom: CustomObjectsApi, name: str) -> None:
    create_default_llm_order(custom.api_client, ORDER_NAMESPACE, name)


def ready_modules(cluster_api: ApiClient) -> bool:
    apps = AppsV1Api(cluster_api)
    for name in DEPLOYMENTS:
        d = apps.read_namespaced_deployment(name, NAMESPACE)
        if (
            (d.status.updated_replicas or 0) != 1
            or (d.status.ready_replicas or 0) != 1
            or (d.status.replicas or 0) != 1
        ):
            return False
    return True


def phases(custom: CustomObjectsApi) -> dict[str, str | None]:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, ORDER_NAMESPACE, ORDERS_PLURAL)["items"]
    return {o["metadata"]["name"]: (o.get("status") or {}).get("phase") for o in items}


def serving(core: CoreV1Api) -> dict[str, tuple[str, int]]:
    """Every replica of the orders: pod name → (uid, restarts)."""
    return {
        p.metadata.name: (p.metadata.uid, sum(s.restart_count for s in p.status.container_statuses or []))
        for p in core.list_namespaced_pod(ORDER_NAMESPACE).items
        if not p.metadata.deletion_timestamp
    }


@dataclass
class Downtime:
    """Polls the orders every second; seconds each order was not Ready while it ran."""

    custom: CustomObjectsApi
    watched: set[str]
    seconds: dict[str, float] = field(default_factory=dict)
    polls: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Downtime:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _poll(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(1.0):
            now = time.monotonic()
            try:
                seen = phases(self.custom)
            except Exception:  # an API hiccup: the next poll counts the time
                continue
            self.polls += 1
            for name, phase in seen.items():
                if name in self.watched and phase != "Ready":
                    self.seconds[name] = self.seconds.get(name, 0.0) + (now - last)
            last = now

    def summary(self) -> str:
        down = sorted(self.seconds.values())
        if not down:
            return "no order was ever not Ready"
        return f"{len(down)} orders not Ready for a while: max {down[-1]:.0f} s, median {down[len(down) // 2]:.0f} s"


def restarted(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]) -> list[str]:
    """Replicas replaced (another uid or gone) or restarted (more container restarts)."""
    return [name for name, (uid, restarts) in before.items() if name not in after or after[name] != (uid, restarts)]


@pytest.fixture(scope="module")
def previous() -> Release:
    return previous_release()


@pytest.fixture(scope="module")
def temporal_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A Temporal dev server of this test's own on loopback; ``stand`` relays it to the pods' gateway (the dev
    server on another address than loopback dials itself on loopback)."""
    port = free_port()
    directory = tmp_path_factory.mktemp("chart-upgrade-temporal")
    process = subprocess.Popen(
        [str(temporal_binary()), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port), "--headless",
         "--db-filename", str(directory / "temporal.db"), "--namespace", "default", "--log-level", "warn"],
        stdout=(directory / "server.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield port
    finally:
        process.terminate()
        process.wait(20)


@pytest.fixture(scope="module")
def stand(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    previous: Release,
    temporal_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The kubelet, the fleet, the nodes for the orders; yields Temporal's address as the pods reach it."""
    image = f"ai-inference:release-{previous.short}"
    kubelet = PodKubelet(
        kube_admin,
        NAMESPACE,
        apiserver_address(local_cluster.server),
        tmp_path_factory.mktemp("pod-kubelet"),
        image_trees={image: previous.tree},
    ).start()
    relay = Relay((GATEWAY, temporal_port), ("127.0.0.1", temporal_port))
    relay.start()
    fleet = StandInFleet(kube_admin, server=MultiplexedRuntime(host=GATEWAY)).start()
    base = inv.load_inventory()
    h100 = next(n for n in base.nodes if inv.node_shape(n.name) == "gpu-h100")
    # CPU and memory to spare, as the scale benchmark's nodes: every replica asks 4 CPUs, and a node whose CPU
    # is taken sends a plan elsewhere (a replan is not what this test measures).
    roomy = replace(h100, cpu="1000", memory="4Ti")
    extra = inv.Inventory(
        tuple(inv.renamed(roomy, f"chart-upgrade-h100-{i}") for i in range(EXTRA_NODES)),
        base.device_classes,
        base.source,
    )
    dynamic = DynamicClient(kube_admin)
    try:
        apply_inventory(dynamic, extra)
        local_cluster.create_namespace(ORDER_NAMESPACE)
        yield f"{GATEWAY}:{temporal_port}"
    finally:
        try:
            _tear_down(local_cluster, kube_admin, extra)
        finally:
            fleet.stop()
            relay.stop()
            kubelet.stop()


def _tear_down(cluster: LocalCluster, api: ApiClient, extra: inv.Inventory) -> None:
    core, custom = CoreV1Api(api), CustomObjectsApi(api)
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, ORDER_NAMESPACE, ORDERS_PLURAL)
    wait_until(lambda: not phases(custom), timeout=180, what="every order's delete finishes")
    helm = Helm.pinned()
    subprocess.run(
        [str(helm.binary), "uninstall", RELEASE, "--kubeconfig", str(cluster.kubeconfig("admin")),
         "--namespace", NAMESPACE, "--ignore-not-found", "--no-hooks", "--wait", "--timeout", "2m"],
        capture_output=True, check=False, timeout=180,
    )  # fmt: skip
    wait_until(lambda: not module_pod_uids(core), timeout=60, what="the module's pods are gone", ignore=())
    forget_chart_pods_leases(api)
    core.delete_namespace(ORDER_NAMESPACE)
    dynamic = DynamicClient(api)
    for obj in inv.inventory_objects(extra):
        if obj["kind"] in {"Node", "ResourceSlice", "PhysicalGPU"}:
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            with contextlib.suppress(Exception):  # already gone
                resource.delete(name=obj["metadata"]["name"])


def test_upgrade_from_the_previous_release_restarts_no_serving_replica_and_rollback_is_counted(
    stand: str,
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    helm: Helm,
    previous: Release,
) -> None:
    external_temporal = stand
    core, custom = CoreV1Api(kube_admin), CustomObjectsApi(kube_admin)
    print(f"\nprevious release {previous.commit}; {ORDERS} orders")
    helm_run(
        helm, local_cluster, "upgrade", "--install", RELEASE, str(previous.tree / "deploy/charts/ai-inference"),
        "--create-namespace", "--take-ownership", "--reset-values", "--wait",
        *set_args(values(external_temporal, f"release-{previous.short}")),
    )  # fmt: skip
    started = time.monotonic()
    for i in range(ORDERS):
        create_order(custom, f"order-{i:03d}")
    wait_until(
        lambda: list(phases(custom).values()) == ["Ready"] * ORDERS,
        timeout=600,
        interval=2,
        what=lambda: f"every order Ready under the previous release: {sorted(set(phases(custom).values()), key=str)}",
    )
    print(f"{ORDERS} orders Ready under {previous.short} in {time.monotonic() - started:.0f} s")

    for step, args in (
        ("upgrade", ["upgrade", RELEASE, str(CHART_DIR), "--reset-values", "--wait",
                     *set_args(values(external_temporal, None))]),
        ("rollback", ["rollback", RELEASE, "--wait"]),
    ):  # fmt: skip
        before_pods, replicas = module_pod_uids(core), serving(core)
        with Downtime(custom, set(phases(custom))) as downtime:
            began = time.monotonic()
            helm_run(helm, local_cluster, *args)
            wait_until(lambda: ready_modules(kube_admin), timeout=180, what=f"{step}: the module's pods Ready")
            # Every pod of the module replaced: the old ones stopped within their grace period and gone.
            wait_until(partial(replaced, core, before_pods), timeout=120, what=f"{step}: old pods gone")
            # The new worker serves the orders' workflows (the old one is gone), and an order made now is made
            # Ready by this release alone. A serving order gets no workflow task from an upgrade that changes
            # nothing it owns: the watcher signals only what differs (level-triggered).
            worker = new_worker(core, before_pods)
            wait_until(partial(polled_by, external_temporal, worker), timeout=60, what=f"{step}: {worker} polls")
            create_order(custom, f"after-{step}")
            wait_until(
                lambda: set(phases(custom).values()) == {"Ready"},
                timeout=300,
                interval=2,
                what=f"{step}: every order Ready, the one made after it too",
            )
            took = time.monotonic() - began
        changed = restarted(replicas, serving(core))
        print(f"{step}: {len(changed)} of {len(replicas)} serving replicas restarted or replaced in {took:.0f} s; "
              f"{downtime.summary()}")  # fmt: skip
        assert downtime.polls >= took / 3, f"{step}: the orders were read {downtime.polls} times in {took:.0f} s"
        if step == "upgrade":
            assert not changed, f"the upgrade restarted serving replicas: {changed[:10]}"
            assert not downtime.seconds, f"orders not Ready during the upgrade: {downtime.summary()}"
