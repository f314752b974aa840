"""The planner service's inventory from informers, against the real API server: a change is seen by
the next plan without a re-read, and plans do not list anything (the API server's own request counts)."""

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


@pytest.fixture
def informers(kube_admin: ApiClient) -> Iterator[InventoryInformers]:
    informers = InventoryInformers.for_cluster(kube_admin).start()
    try:
        wait_until(lambda: informers.synced, timeout=30, what="the inventory informers to sync")
        yield informers
    finally:
        informers.stop()


def metrics_page(api: ApiClient) -> str:
    """The API server's own /metrics, as the client's user (its bearer token or client certificate)."""
    headers: dict[str, str] = {}
    api.update_params_for_auth(headers, [], ["BearerToken"], "/metrics", "GET", None)
    response = api.call_api("GET", f"{api.configuration.host}/metrics", header_params=headers)
    response.read()
    return str(response.data.decode())


def list_requests(api: ApiClient) -> dict[str, float]:
    """LIST requests the API server has answered so far, by resource (its /metrics)."""
    raw = metrics_page(api)
    counts: dict[str, float] = {}
    for line in raw.splitlines():
        if not line.startswith("apiserver_request_total{") or 'verb="LIST"' not in line:
            continue
        labels = line[line.index("{") + 1 : line.index("}")]
        resource = next((p.split("=", 1)[1].strip('"') for p in labels.split(",") if p.startswith("resource=")), "")
        counts[resource] = counts.get(resource, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


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
    informers: InventoryInformers, kube_admin: ApiClient
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
        lists_before = list_requests(kube_admin)
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
        lists_after = list_requests(kube_admin)
    for resource in ("resourceslices", "deviceclasses", "resourceclaims", "physicalgpus"):
        assert lists_after.get(resource, 0) == lists_before.get(resource, 0), (resource, lists_before, lists_after)
