"""Autoscaling and preemption on real metrics, end to end on the local stack.

Real parts: the API server, scheduler (DRA devices of the simulated H100s), the controller-manager's
HPA controller, Prometheus scraping every stand-in runtime's ``/metrics`` and the module's own,
prometheus-adapter serving ``custom.metrics.k8s.io`` (registered as an APIService), Temporal, the
worker and the observer (``tests/e2e/stand.py``). Nothing writes an HPA's status by hand.

The load is what vLLM reports: ``vllm:num_requests_waiting`` of each replica. A small load generator
spreads an order's queued requests over its running replicas (``ceil(total / replicas)`` each, as a
Service would) and sets them on the order's stand-in (``POST /admin/load``); the HPA targets an
average of 2 waiting requests per replica (``activities/builders/autoscaling.py``).

Two classes on the four dedicated H100s (one device per replica): a low-priority order holds three
replicas under a load of 6, a high-priority one runs one. A load of 4 on the high order makes its
HPA ask for a second replica; the device class is full; the preemption workflow lowers the low
order's ceiling to 2, the HPA controller scales it down, the scheduler places the high order's
replica. The low order, still loaded for three, is ``Degraded/ScaleUpBlocked``;
``D8AIInferenceCapacityPreempted`` fires in Prometheus. When the high order's load goes, its HPA
gives the replica up after its scale-down window (ten minutes by default; the module setting
``workload.scaleDownStabilizationSeconds`` is 15 s here, and the scale-up window 0 s), the preemption
workflow sees the recipient's demand fall and lifts the donor's ceiling, and the low order grows back
to three replicas and is Ready again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import urllib.error
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from kubernetes.client import AdmissionregistrationV1Api, ApiClient, AutoscalingV2Api, CustomObjectsApi, SchedulingV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from activities.builders.autoscaling import QUEUE_METRIC
from activities.builders.common import LABEL_ORDER
from devstack.cluster.launcher import LocalCluster
from devstack.metrics.servers import custom_metric, prometheus_api
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import Stand, open_stand
from tests.metrics.fixtures import MetricsStand

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

DEVICE_CLASS = "nvidia-h100-dedicated"
PRIORITIES = {"e2e-preempt-low": 100, "e2e-preempt-high": 1000}
MODEL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
PREEMPTED = "D8AIInferenceCapacityPreempted"


def dedicated_class(name: str, priority_class: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]},
            "acceleratorPolicy": {
                "allowedDeviceClasses": [DEVICE_CLASS],
                "allowedSharingModes": ["Dedicated"],
                "allowedPlacementTypes": ["WholeDevice"],
                "maxAcceleratorCount": 1,
            },
            "scalingPolicy": {"minReplicas": 1, "maxReplicas": 4, "allowedPriorityClassNames": [priority_class]},
            "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
            "updatePolicy": {"strategy": "RollingUpdate"},
        },
    }


class Clock:
    """Seconds since the test began, per milestone; printed at the end."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.marks: list[tuple[str, float]] = []

    def mark(self, what: str) -> None:
        self.marks.append((what, time.monotonic() - self.started))
        print(f"[{self.marks[-1][1]:6.1f}s] {what}", flush=True)

    def report(self) -> str:
        return "\n".join(f"  {at:6.1f}s  {what}" for what, at in self.marks)


def running_pods(stand: Stand, name: str) -> list[str]:
    pods = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"{LABEL_ORDER}={name}")
    return sorted(
        p.metadata.name
        for p in pods.items
        if p.spec.node_name and not p.metadata.deletion_timestamp and p.status.phase == "Running"
    )


def hpa(stand: Stand, name: str) -> Any:
    return AutoscalingV2Api(stand.api).read_namespaced_horizontal_pod_autoscaler(name, stand.namespace)


def hpa_report(stand: Stand, name: str) -> str:
    found = hpa(stand, name)
    conditions = "; ".join(f"{c.type}={c.status} {c.reason}: {c.message}" for c in found.status.conditions or [])
    status = found.status
    return f"behavior={found.spec.behavior} desired={status.desired_replicas} {status.current_metrics} [{conditions}]"


def condition(stand: Stand, name: str, type_: str) -> tuple[str, str] | None:
    found = stand.condition(name, type_)
    return (found["status"], found["reason"]) if found else None


class LoadGenerator:
    """Queued requests per order, spread over its running replicas and set on its stand-in."""

    def __init__(self, stand: Stand) -> None:
        self.stand = stand
        self.total: dict[str, int] = {}
        self.applied: dict[str, tuple[int, int]] = {}

    def set(self, name: str, total: int) -> None:
        self.total[name] = total

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=5) as http:
            while True:
                for name, total in list(self.total.items()):
                    runtime = self.stand.fleet.runtime(self.stand.namespace, name)
                    replicas = len(await asyncio.to_thread(running_pods, self.stand, name))
                    if runtime is None or replicas == 0:
                        continue
                    waiting = math.ceil(total / replicas)
                    if self.applied.get(name) != (total, waiting):
                        response = await http.post(f"{runtime.url}/admin/load", json={"waiting": waiting})
                        response.raise_for_status()
                        self.applied[name] = (total, waiting)
                await asyncio.sleep(0.5)


@contextlib.contextmanager
def priority_classes(api: ApiClient) -> Iterator[None]:
    scheduling = SchedulingV1Api(api)
    custom = CustomObjectsApi(api)
    for name, value in PRIORITIES.items():
        with contextlib.suppress(ApiException):
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value, "globalDefault": False})
        try:
            custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", dedicated_class(name, name))
        except ApiException as err:
            if err.status != 409:
                raise
    yield


@pytest_asyncio.fixture
async def stand(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    temporal_env: WorkflowEnvironment,
    metrics_servers: MetricsStand,
) -> AsyncIterator[Stand]:
    overrides = {
        "health": {"scalingIntervalSeconds": 0.5},
        # The HPA's windows (60 s up, 600 s down by default) shortened so that the whole chain, the
        # donor's restoration included, fits a test.
        "workload": {"scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": 15},
    }
    with priority_classes(kube_admin):
        async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as opened:
            yield opened


def served_pods(metrics: MetricsStand, namespace: str) -> list[str]:
    """Pods the custom metrics API serves the queue metric of ([] while the adapter has not listed it)."""
    try:
        items = custom_metric(metrics.cluster, namespace, QUEUE_METRIC)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return []
        raise
    return sorted(i["describedObject"]["name"] for i in items)


def series(metrics: MetricsStand, query: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = prometheus_api(metrics.prometheus_url, "query", {"query": query})["result"]
    return result


def alerts(metrics: MetricsStand, name: str, namespace: str) -> dict[str, str]:
    """recipient -> state of ``name`` alerts about orders of ``namespace``, from Prometheus' API."""
    found = prometheus_api(metrics.prometheus_url, "alerts")["alerts"]
    return {
        a["labels"].get("recipient", ""): a["state"]
        for a in found
        if a["labels"]["alertname"] == name and a["labels"].get("recipient_namespace") == namespace
    }


async def test_scaling_healthy_is_true_on_real_metrics(stand: Stand, metrics_servers: MetricsStand) -> None:
    """Prometheus scrapes the order's replica, the adapter serves it, the HPA reads it: True."""
    stand.create_order("solo", MODEL, class_name="e2e-preempt-low")
    await stand.until_phase("solo", "Ready", timeout=150)
    (pod,) = await asyncio.to_thread(running_pods, stand, "solo")

    def scraped() -> bool:
        found = series(metrics_servers, f'vllm:num_requests_waiting{{namespace="{stand.namespace}"}}')
        return [s["metric"].get("pod") for s in found] == [pod]

    await stand.until(scraped, timeout=60, what=f"Prometheus scrapes {pod} with its namespace and pod labels")
    await stand.until(
        lambda: served_pods(metrics_servers, stand.namespace) == [pod],
        timeout=60,
        what=f"custom.metrics.k8s.io serves {QUEUE_METRIC} of {pod}",
    )
    await stand.until(
        lambda: condition(stand, "solo", "ScalingHealthy") == ("True", "ScalingAllowed"),
        timeout=90,
        what=lambda: (
            f"ScalingHealthy True (now {stand.describe('solo')}; "
            f"adapter: {metrics_servers.log_tail('prometheus-adapter', 5)})"
        ),
    )
    active = next(c for c in hpa(stand, "solo").status.conditions if c.type == "ScalingActive")
    assert (active.status, active.reason) == ("True", "ValidMetricFound")
    assert stand.phase("solo")[0] == "Ready"


async def test_load_grows_a_high_order_by_a_replica_of_a_low_one_and_the_alert_fires(
    stand: Stand, metrics_servers: MetricsStand
) -> None:
    clock = Clock()
    load = LoadGenerator(stand)
    generator = asyncio.create_task(load.run())
    try:
        stand.create_order("low", MODEL, class_name="e2e-preempt-low")
        await stand.until_phase("low", "Ready", timeout=150)
        # Six queued requests keep three replicas busy (2 each, the HPA's target): the StatefulSet is
        # scaled to three at once (the HPA would take two minutes, one pod a minute), the HPA keeps it.
        load.set("low", 6)
        stand.apps.patch_namespaced_stateful_set_scale("low", stand.namespace, {"spec": {"replicas": 3}})
        await stand.until(lambda: len(running_pods(stand, "low")) == 3, timeout=120, what="low runs 3 replicas")
        stand.create_order("high", MODEL, class_name="e2e-preempt-high")
        await stand.until_phase("high", "Ready", timeout=150)
        load.set("high", 0)
        await stand.until(
            lambda: (
                condition(stand, "low", "ScalingHealthy") == ("True", "ScalingAllowed")
                and condition(stand, "high", "ScalingHealthy") == ("True", "ScalingAllowed")
            ),
            timeout=120,
            what=lambda: f"both ScalingHealthy True (low: {stand.describe('low')}; high: {stand.describe('high')})",
        )
        assert hpa(stand, "low").status.desired_replicas == 3
        clock.mark("low runs 3, high runs 1: the device class is full; both ScalingHealthy True")

        # Load on the high order: four queued requests on one replica.
        load.set("high", 4)
        await stand.until(
            lambda: (hpa(stand, "high").status.desired_replicas or 0) >= 2,
            timeout=180,
            what="the HPA of high asks for a second replica",
        )
        clock.mark("the HPA asks for a second replica of high (real metrics)")
        await stand.until(lambda: hpa(stand, "low").spec.max_replicas == 2, timeout=120, what="low maxReplicas 2")
        clock.mark("preemption lowered low's maxReplicas to 2")
        await stand.until(lambda: len(running_pods(stand, "high")) == 2, timeout=330, what="high's 2nd replica runs")
        clock.mark("high's second replica placed")
        await stand.until_phase("high", "Ready", timeout=120)
        await stand.until(
            lambda: (
                stand.phase("low") == ("Degraded", "ScaleUpBlocked")
                and condition(stand, "low", "ScalingHealthy") == ("False", "ScaleUpBlocked")
            ),
            timeout=120,
            what=lambda: f"low Degraded/ScaleUpBlocked (now {stand.describe('low')})",
        )
        assert len(running_pods(stand, "low")) == 2
        clock.mark("recipient Ready with 2, donor Degraded/ScaleUpBlocked with 2")
        await stand.until(
            lambda: alerts(metrics_servers, PREEMPTED, stand.namespace).get("high") in ("pending", "firing"),
            timeout=60,
            what=f"{PREEMPTED} for high in Prometheus",
        )
        clock.mark(f"{PREEMPTED} {alerts(metrics_servers, PREEMPTED, stand.namespace)['high']} in Prometheus")

        # The load goes: after its scale-down window the HPA of high gives the replica up, the
        # preemption workflow lifts the donor's ceiling, and the donor, still loaded for three, grows back.
        load.set("high", 0)
        await stand.until(
            lambda: (hpa(stand, "high").status.desired_replicas or 0) == 1,
            timeout=180,
            what=lambda: f"high's HPA gives its second replica up (HPA now: {hpa_report(stand, 'high')})",
        )
        clock.mark("load removed: the HPA of high is back to 1 replica after its scale-down window")
        await stand.until(
            lambda: hpa(stand, "low").spec.max_replicas == 4,
            timeout=120,
            what=lambda: f"low's ceiling lifted (now {stand.describe('low')})",
        )
        clock.mark("preemption lifted low's ceiling: maxReplicas 4 again")
        await stand.until(lambda: len(running_pods(stand, "low")) == 3, timeout=240, what="low runs 3 again")
        await stand.until(
            lambda: (
                stand.phase("low")[0] == "Ready"
                and condition(stand, "low", "ScalingHealthy") == ("True", "ScalingAllowed")
            ),
            timeout=120,
            what=lambda: f"low Ready again (now {stand.describe('low')})",
        )
        assert condition(stand, "low", "ScalingHealthy") == ("True", "ScalingAllowed")
        assert len(running_pods(stand, "high")) == 1
        clock.mark("donor restored: low Ready with 3 replicas, ScalingHealthy True; high Ready with 1")
    finally:
        generator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await generator
        print("timings:\n" + clock.report(), flush=True)


def scale_refusal(namespace: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) refusing every change of one StatefulSet's scale:
    what a cluster policy or a quota admission does to the HPA controller's writes."""
    policy_name = f"e2e-refuse-scale-{namespace}-{name}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["statefulsets/scale"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"!(request.namespace == '{namespace}' && object.metadata.name == '{name}')",
                    "message": "scaling this StatefulSet is refused by a test policy",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name},
        "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
    }
    return policy, binding


async def test_an_hpa_refused_its_scale_makes_the_order_degraded_until_it_may_scale(
    stand: Stand, metrics_servers: MetricsStand, kube_admin: ApiClient
) -> None:
    """The real HPA controller's scale update refused (AbleToScale=False/FailedUpdateScale): the order
    is Degraded with ScalingHealthy False/AutoscalerUnableToScale; once it may scale, True again."""
    clock = Clock()
    load = LoadGenerator(stand)
    generator = asyncio.create_task(load.run())
    admission = AdmissionregistrationV1Api(kube_admin)
    policy, binding = scale_refusal(stand.namespace, "capped")
    try:
        stand.create_order("capped", MODEL, class_name="e2e-preempt-low")
        await stand.until_phase("capped", "Ready", timeout=150)
        await stand.until(
            lambda: condition(stand, "capped", "ScalingHealthy") == ("True", "ScalingAllowed"),
            timeout=120,
            what=lambda: f"ScalingHealthy True (now {stand.describe('capped')})",
        )
        admission.create_validating_admission_policy(policy)
        admission.create_validating_admission_policy_binding(binding)
        clock.mark("a policy refuses every change of capped's scale")
        load.set("capped", 6)
        await stand.until(
            lambda: (
                stand.phase("capped") == ("Degraded", "AutoscalerUnableToScale")
                and condition(stand, "capped", "ScalingHealthy") == ("False", "AutoscalerUnableToScale")
            ),
            timeout=180,
            what=lambda: (
                f"capped Degraded/AutoscalerUnableToScale (now {stand.describe('capped')}; "
                f"HPA: {hpa_report(stand, 'capped')})"
            ),
        )
        able = next(c for c in hpa(stand, "capped").status.conditions if c.type == "AbleToScale")
        assert (able.status, able.reason) == ("False", "FailedUpdateScale")
        clock.mark(
            "the HPA cannot scale (AbleToScale=False/FailedUpdateScale): capped Degraded/AutoscalerUnableToScale"
        )
        admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
        admission.delete_validating_admission_policy(policy["metadata"]["name"])
        await stand.until(lambda: len(running_pods(stand, "capped")) >= 2, timeout=180, what="capped scales up")
        await stand.until(
            lambda: (
                stand.phase("capped")[0] == "Ready"
                and condition(stand, "capped", "ScalingHealthy") == ("True", "ScalingAllowed")
            ),
            timeout=120,
            what=lambda: f"capped Ready, ScalingHealthy True (now {stand.describe('capped')})",
        )
        clock.mark("policy gone: capped scaled up, Ready, ScalingHealthy True")
    finally:
        for delete, name in (
            (admission.delete_validating_admission_policy_binding, binding["metadata"]["name"]),
            (admission.delete_validating_admission_policy, policy["metadata"]["name"]),
        ):
            with contextlib.suppress(ApiException):
                delete(name)
        generator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await generator
        print("timings:\n" + clock.report(), flush=True)
