"""The planner service's inventory from informers, against the real API server: a change is seen by
the next plan without a re-read, and plans read nothing (every read the informers' client sends is counted)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes.client import ApiClient, CustomObjectsApi

from activities.inventory import read_inventory
from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.service import LAUNCH_PLAN_PATH, create_app
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
