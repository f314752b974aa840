"""Bookings against the real local control plane (issue #13): the planner service with its informers,
a card of its own, real ResourceClaims made from a template and allocated by kube-scheduler.

Two orders planned back to back whose combined need exceeds the one card get different answers before
any claim exists; once the first order's claim is allocated its booking is dropped and the allocation
counts once; once it is deleted the card is free for the second."""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from activities.builders.claim import memory_request_mib
from devstack.cluster.launcher import LocalCluster
from inference_api.plan import LaunchPlan, LaunchPlanRequest, OrderFacts, PlanOutcome
from inference_api.reasons import Reason
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.service import LAUNCH_PLAN_PATH, create_app
from tests.cluster.helpers import kwok_pod, order_statefulset
from tests.planner_service import running_service
from tests.planner_service.fakes import ALLOWED, FakeReviewer
from tests.polling import wait_until
from worker.observer.inventory import InventoryInformers

pytestmark = pytest.mark.cluster

GROUP, VERSION = "resource.k8s.io", "v1"
D = "gpu.deckhouse.io"
ORDER_LABEL = "ai.deckhouse.io/inference-service"
BIG = "acme/llm-20B"  # 58 % (47.5 GiB) of an H100: two do not fit one card
SMALL = "Qwen/Qwen2.5-32B-Instruct-AWQ"  # 24 GiB, 30 %


@pytest.fixture
def informers(kube_admin: ApiClient) -> Iterator[InventoryInformers]:
    informers = InventoryInformers.for_cluster(kube_admin).start()
    try:
        wait_until(lambda: informers.synced, timeout=30, what="the inventory informers to sync")
        yield informers
    finally:
        informers.stop()


@pytest.fixture
def one_card(kube_admin: ApiClient) -> Iterator[str]:
    """A DeviceClass selecting one shareable H100 of its own: a copy of the simulated gpu-h100-0/gpu-0
    (attributes, capacities and their request policies) in a pool of its own on the same kwok node."""
    custom = CustomObjectsApi(kube_admin)
    tag = uuid.uuid4().hex[:6]
    name = f"bookings-{tag}"
    slices = custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
    source = next(
        d
        for s in slices
        if s["spec"]["pool"]["name"] == "gpu-h100-0"
        for d in s["spec"].get("devices") or []
        if d["name"] == "gpu-0"
    )
    card = copy.deepcopy(source)
    assert card.get("allowMultipleAllocations") is True
    card["attributes"] = {k: v for k, v in card["attributes"].items() if k not in ("physicalGPU", "index")}
    card["attributes"]["uuid"] = {"string": f"GPU-{name}"}
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "resourceslices",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": D,
                "nodeName": "gpu-h100-0",
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [card],
            },
        },
    )
    expression = f'device.driver == "{D}" && device.attributes["{D}"].uuid == "GPU-{name}"'
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "deviceclasses",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        },
    )
    try:
        yield name
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", name)
        custom.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", name)


def plan(url: str, request: LaunchPlanRequest) -> PlanOutcome:
    answer = httpx.post(
        f"{url}{LAUNCH_PLAN_PATH}",
        content=request.model_dump_json(),
        headers={"Authorization": f"Bearer {ALLOWED}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return PlanOutcome.model_validate_json(answer.content)


def planned(outcome: PlanOutcome) -> LaunchPlan:
    assert outcome.plan is not None, outcome.refusal
    return outcome.plan


def refused(outcome: PlanOutcome) -> None:
    assert outcome.refusal is not None, outcome.plan
    assert outcome.refusal.reason is Reason.NO_CAPACITY, outcome.refusal


def replica(api: ApiClient, order: str, namespace: str, p: LaunchPlan) -> list[dict[str, Any]]:
    """What the order's objects make of a plan: the claim template (activities/builders/claim.py: class,
    count, memory request, claims labelled with the order) and a StatefulSet of the stored order with
    one replica using it (the chain the planner follows to believe a claim is the order's)."""
    exactly: dict[str, Any] = {"deviceClassName": p.deviceClass, "allocationMode": "ExactCount", "count": p.deviceCount}
    memory = memory_request_mib(p)
    if memory is not None:
        exactly["capacity"] = {"requests": {f"{D}/memory": f"{memory}Mi"}}
    template = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{order}-claim", "namespace": namespace},
        "spec": {
            "metadata": {"labels": {ORDER_LABEL: order}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
    }
    pod = kwok_pod(
        f"{order}-0", namespace, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": f"{order}-claim"}]
    )
    return [template, order_statefulset(api, namespace, order, pod)]


def test_bookings_keep_back_to_back_plans_from_over_committing_a_card(
    local_cluster: LocalCluster, kube_admin: ApiClient, informers: InventoryInformers, one_card: str, namespace: str
) -> None:
    policy = AcceleratorPolicy(
        allowedDeviceClasses=[one_card],
        allowedSharingModes=[SharingMode.SHARED],
        allowedPlacementTypes=[PlacementType.WHOLE_DEVICE],
        maxAcceleratorCount=1,
    )

    def request(order: str | None, model: str = BIG) -> LaunchPlanRequest:
        holder = f"{namespace}/{order}" if order else None
        return LaunchPlanRequest(facts=OrderFacts(modelName=model), acceleratorPolicy=policy, holder=holder)

    def claims_of(order: str) -> list[Any]:
        return [c for c in informers.view()[1] if c.holder == f"{namespace}/{order}"]

    with running_service(create_app(informers, FakeReviewer())) as url:
        # The card is in the informers' inventory (a probe without a holder books nothing).
        wait_until(lambda: plan(url, request(None)).plan, timeout=30, what="the new card in the plans")

        # Back to back, before any claim exists: A takes the card, B is refused (both got it before).
        a = planned(plan(url, request("order-a")))
        assert (a.deviceClass, a.deviceNames, a.sharePercent) == (one_card, ["gpu-0"], 58)
        refused(plan(url, request("order-b")))
        # A replan of A does not count A's own booking.
        assert planned(plan(url, request("order-a"))).deviceNames == ["gpu-0"]

        # A's replica: the claim made from its template, allocated by the scheduler on the card.
        local_cluster.apply(replica(kube_admin, "order-a", namespace, a))
        wait_until(
            lambda: [c for c in claims_of("order-a") if c.allocated],
            timeout=90,
            what="order-a's claim allocated, in the informers",
        )
        # The booking is dropped and the allocation counts once: 47.5 + 24 GiB fit, 2 x 47.5 + 24 would not.
        # The template's planned place, the booking and the allocation are three views of A that the
        # informers see change one after another: under load the allocation can be seen a moment before
        # the place it settles is let go, and A counts twice (a short, safe over-count: C waits). Once
        # the informers have caught up, A counts once.
        c = wait_until(
            lambda: plan(url, request("order-c", SMALL)).plan,
            timeout=30,
            what="order-a counted once (its allocation, not also its planned place)",
        )
        assert c.deviceNames == ["gpu-0"]
        refused(plan(url, request("order-b")))

        # A's replica goes, and its claim with it: B fits beside C's booking (47.5 + 24 GiB).
        AppsV1Api(kube_admin).delete_namespaced_stateful_set("order-a", namespace, propagation_policy="Background")
        with contextlib.suppress(ApiException):  # the collector may have taken it already (404)
            CoreV1Api(kube_admin).delete_namespaced_pod("order-a-0", namespace, grace_period_seconds=0)
        wait_until(lambda: not claims_of("order-a"), timeout=90, what="order-a's claim gone, in the informers")
        b = planned(plan(url, request("order-b")))
        assert b.deviceNames == ["gpu-0"]
        # The card is now booked to 88 %: a fourth order is refused.
        refused(plan(url, request("order-d")))


def test_a_claim_planned_by_another_planner_counts_for_its_class(
    local_cluster: LocalCluster, kube_admin: ApiClient, informers: InventoryInformers, one_card: str, namespace: str
) -> None:
    """A pending claim no booking covers (the service restarted after answering) holds its class: a
    replica whose pod cannot be scheduled keeps its claim unallocated, and the card stays reserved."""
    policy = AcceleratorPolicy(
        allowedDeviceClasses=[one_card],
        allowedSharingModes=[SharingMode.SHARED],
        allowedPlacementTypes=[PlacementType.WHOLE_DEVICE],
    )
    request = LaunchPlanRequest(facts=OrderFacts(modelName=BIG), acceleratorPolicy=policy, holder=f"{namespace}/new")
    with running_service(create_app(informers, FakeReviewer())) as first:
        wait_until(lambda: plan(first, request.model_copy(update={"holder": None})).plan, timeout=30, what="the card")
        old = planned(plan(first, request.model_copy(update={"holder": f"{namespace}/old"})))
    objects = replica(kube_admin, "old", namespace, old)
    # A node no pod can go to: the claim is made from the template but never allocated.
    objects[1]["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}
    local_cluster.apply(objects)
    wait_until(
        lambda: [c for c in informers.view()[1] if c.holder == f"{namespace}/old" and not c.allocated],
        timeout=60,
        what="old's claim made and pending, in the informers",
    )
    # A new service (no bookings): the pending claim still holds 47.5 GiB of the card.
    with running_service(create_app(informers, FakeReviewer())) as second:
        refused(plan(second, request))
