"""The planner service's inventory from informers, against the real API server: a change is seen by
the next plan without a re-read, and plans read nothing (every read the informers' client sends is counted)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi

from activities.inventory import read_inventory
from devstack.cluster.launcher import LocalCluster
from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome, Toleration
from inference_api.reasons import Reason
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.service import LAUNCH_PLAN_PATH, create_app
from tests.cluster.helpers import kwok_pod
from tests.planner_service import running_service
from tests.planner_service.fakes import ALLOWED, FakeReviewer
from tests.polling import wait_until
from worker.observer.inventory import InventoryInformers, InventoryNotSyncedError

pytestmark = pytest.mark.cluster

GROUP, VERSION = "resource.k8s.io", "v1"
D = "gpu.deckhouse.io"


class CountingApiClient(ApiClient):
    """An ApiClient that records every read it sends (a GET that is not a watch), by URL."""

    def __init__(self, configuration: Any) -> None:
        super().__init__(configuration)
        self.reads: list[str] = []

    def request(self, method: str, url: str, query_params: Any = None, *args: Any, **kwargs: Any) -> Any:
        watching = any(key == "watch" and value in (True, "true") for key, value in query_params or [])
        if method == "GET" and not watching:
            self.reads.append(url)
        return super().request(method, url, query_params, *args, **kwargs)


@pytest.fixture
def counting_client(kube_admin: ApiClient) -> CountingApiClient:
    return CountingApiClient(kube_admin.configuration)


@pytest.fixture
def informers(counting_client: CountingApiClient) -> Iterator[InventoryInformers]:
    # Their own client: what the informers (and so the plans) read is counted apart from the rest of
    # the cluster (kube-scheduler and the controllers list claims too, now and then).
    informers = InventoryInformers.for_cluster(counting_client).start()
    try:
        wait_until(lambda: informers.synced, timeout=30, what="the inventory informers to sync")
        yield informers
    finally:
        informers.stop()


def plan(url: str, request: LaunchPlanRequest) -> PlanOutcome:
    answer = httpx.post(
        f"{url}{LAUNCH_PLAN_PATH}",
        content=request.model_dump_json(),
        headers={"Authorization": f"Bearer {ALLOWED}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return PlanOutcome.model_validate_json(answer.content)


def slice_with_one_gpu(name: str, product: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": D,
            "nodeName": "cpu-0",
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "productName": {"string": product},
                        "hardwareFamily": {"string": "hopper"},
                        "placement": {"string": "WholeDevice"},
                        "sharingMode": {"string": "Exclusive"},
                        "index": {"int": 0},
                    },
                    "capacity": {f"{D}/memory": {"value": "80Gi"}},
                }
            ],
        },
    }


def test_the_informers_see_what_a_read_sees(informers: InventoryInformers, kube_admin: ApiClient) -> None:
    read = read_inventory(kube_admin)
    kept = informers.snapshot()
    assert {(d.node, d.name) for d in kept.devices} == {(d.node, d.name) for d in read.devices}
    assert {c.name for c in kept.deviceClasses} == {c.name for c in read.deviceClasses}
    # Nothing changed: the same snapshot object, not a rebuild.
    assert informers.snapshot() is kept


def test_not_synced_is_not_ready_and_plans_refused(kube_admin: ApiClient) -> None:
    informers = InventoryInformers.for_cluster(kube_admin)  # not started: never lists
    app = create_app(informers, FakeReviewer())
    with running_service(app) as url:
        assert httpx.get(f"{url}/readyz").status_code == 503
        request = LaunchPlanRequest(facts=OrderFacts(modelName="acme/llm-7B"))
        answer = httpx.post(
            f"{url}{LAUNCH_PLAN_PATH}",
            content=request.model_dump_json(),
            headers={"Authorization": f"Bearer {ALLOWED}"},
        )
        assert answer.status_code == 503
    with pytest.raises(InventoryNotSyncedError):
        informers.snapshot()


def test_a_new_slice_is_planned_on_by_the_next_plan_without_any_list(
    informers: InventoryInformers, kube_admin: ApiClient, counting_client: CountingApiClient
) -> None:
    custom = CustomObjectsApi(kube_admin)
    tag = uuid.uuid4().hex[:6]
    product = f"Informer GPU {tag}"
    device_class = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": f"informer-{tag}"},
        "spec": {"selectors": [{"cel": {"expression": f'device.attributes["{D}"].productName == "{product}"'}}]},
    }
    request = LaunchPlanRequest(
        facts=OrderFacts(modelName="acme/llm-7B"),
        acceleratorPolicy=AcceleratorPolicy(
            allowedDeviceClasses=[f"informer-{tag}"],
            allowedSharingModes=[SharingMode.DEDICATED],
            allowedPlacementTypes=[PlacementType.WHOLE_DEVICE],
        ),
    )
    app = create_app(informers, FakeReviewer())
    with running_service(app) as url:
        assert httpx.get(f"{url}/readyz").status_code == 200
        reads_before = len(counting_client.reads)
        custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", device_class)
        try:
            first = plan(url, request)
            assert first.refusal is not None  # the class selects nothing yet
            name = f"informer-{tag}"
            custom.create_cluster_custom_object(GROUP, VERSION, "resourceslices", slice_with_one_gpu(name, product))
            try:
                outcome = wait_until(
                    lambda: plan(url, request).plan, timeout=10, what="the new slice in the next plans"
                )
                assert (outcome.nodeName, outcome.deviceNames) == ("cpu-0", ["gpu-0"])
                # Many plans more: the inventory is not read for any of them.
                started = time.monotonic()
                for _ in range(20):
                    assert plan(url, request).plan is not None
                assert time.monotonic() - started < 60
            finally:
                custom.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", name)
            wait_until(lambda: plan(url, request).refusal is not None, timeout=10, what="the slice gone from plans")
        finally:
            custom.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", f"informer-{tag}")
        reads = counting_client.reads[reads_before:]
    # The informers' watches delivered every change; neither they nor any plan read the inventory.
    assert reads == []


T4_NODE = "gpu-t4-0"
T4_ONLY = AcceleratorPolicy(allowedDeviceClasses=["nvidia-t4-mps-physical"], allowedSharingModes=[SharingMode.SHARED])


def test_the_service_judges_nodes_from_its_informers(
    informers: InventoryInformers,
    kube_admin: ApiClient,
    counting_client: CountingApiClient,
    local_cluster: LocalCluster,
    namespace: str,
) -> None:
    """The planner service (informers, not the worker's per-plan read) refuses a cordoned node, a
    tainted one unless the request's tolerations (the settings') tolerate the taint, and one whose
    CPU the pods bound there hold; each seen by the next plans from a watch event, with no read."""
    request = LaunchPlanRequest(facts=OrderFacts(modelName="acme/llm-1B"), acceleratorPolicy=T4_ONLY)
    core = CoreV1Api(kube_admin)
    node = core.read_node(T4_NODE)
    taints_before = kube_admin.sanitize_for_serialization(node.spec.taints or [])
    taint = {"key": "example.com/gpu-maintenance", "value": "true", "effect": "NoSchedule"}
    filler = kwok_pod("cpu-filler", namespace, nodeName=T4_NODE)
    filler["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "31"}}  # of the node's 32

    def refused_because(words: str) -> bool:
        outcome = plan(url, request)
        return outcome.refusal is not None and words in outcome.refusal.message

    app = create_app(informers, FakeReviewer())
    with running_service(app) as url:
        first = plan(url, request)
        assert first.plan is not None, first.refusal
        assert first.plan.nodeName == T4_NODE
        reads_before = len(counting_client.reads)
        try:
            core.patch_node(T4_NODE, {"spec": {"unschedulable": True}})
            wait_until(lambda: refused_because("cordoned"), timeout=10, what="the cordon in the plans")
            refusal = plan(url, request).refusal
            assert refusal is not None
            assert refusal.reason is Reason.NO_SCHEDULABLE_NODE
            assert T4_NODE in refusal.message
            core.patch_node(T4_NODE, {"spec": {"unschedulable": None}})
            wait_until(lambda: plan(url, request).plan is not None, timeout=10, what="the uncordon in the plans")

            core.patch_node(T4_NODE, {"spec": {"taints": [*taints_before, taint]}})
            wait_until(lambda: refused_because("taint"), timeout=10, what="the taint in the plans")
            tolerant = request.model_copy(
                update={"tolerations": [Toleration(key=taint["key"], operator="Exists", effect="NoSchedule")]}
            )
            tolerated = plan(url, tolerant)
            assert tolerated.plan is not None, tolerated.refusal
            assert tolerated.plan.nodeName == T4_NODE
            core.patch_node(T4_NODE, {"spec": {"taints": taints_before or None}})
            wait_until(lambda: plan(url, request).plan is not None, timeout=10, what="the taint gone from plans")

            local_cluster.apply([filler])
            wait_until(lambda: refused_because("CPU"), timeout=30, what="the bound pod's CPU in the plans")
        finally:
            core.patch_node(T4_NODE, {"spec": {"unschedulable": None, "taints": taints_before or None}})
            if any(p.metadata.name == "cpu-filler" for p in core.list_namespaced_pod(namespace).items):
                core.delete_namespaced_pod("cpu-filler", namespace, grace_period_seconds=0)
            wait_until(
                lambda: not any(p.metadata.name == "cpu-filler" for p in core.list_namespaced_pod(namespace).items),
                timeout=60,
                what="the filler gone",
            )
        wait_until(lambda: plan(url, request).plan is not None, timeout=10, what="the CPU back in the plans")
        reads = counting_client.reads[reads_before:]
    assert reads == []  # every change came by a watch
