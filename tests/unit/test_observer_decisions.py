"""The observer's pure decisions: what each change tells an order's workflow, and what does not.

Objects are plain dicts shaped as the API server returns them. No service, no I/O.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

import pytest

from activities.builders.common import ANNOTATION_RUNTIME_IMAGE, FIELD_MANAGER, LABEL_MANAGED_BY, LABEL_ORDER
from activities.health import models_verdict, probe_target, token_from_secret
from activities.scaling import priority_value
from inference_api.observation import HealthReport, ObservedChange, OrderSignal
from inference_api.payloads import OrderRef
from inference_api.preemption import SCALING_LIMITED, TOO_MANY_REPLICAS, HpaCondition, ScalingObservation
from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings, ObserverSettings
from inference_api.types import Phase
from worker.observer import decisions as d
from worker.observer.informer import Informer
from worker.observer.outbox import Delivery, backoff_seconds, merge, signal_to

# ----------------------------------------------------------------------------- builders


def order(
    name: str = "chat",
    uid: str = "u-1",
    generation: int = 1,
    deleting: bool = False,
    rv: str = "1",
    cls: str = "default-llm",
    model: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "uid": uid,
        "generation": generation,
        "resourceVersion": rv,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": meta,
        "spec": {
            "inferenceServiceClassName": cls,
            "model": model or {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B"}},
        },
        "status": status or {},
    }


def klass(generation: int = 1, rv: str = "1", status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "default-llm", "generation": generation, "resourceVersion": rv},
        "spec": {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}},
        "status": status or {},
    }


def entry(manager: str, time: str, subresource: str | None = None, operation: str = "Apply") -> dict[str, Any]:
    out: dict[str, Any] = {"manager": manager, "operation": operation, "time": time, "fieldsType": "FieldsV1"}
    if subresource:
        out["subresource"] = subresource
    return out


def statefulset(
    ready: int = 0,
    replicas: int = 1,
    managed: list[dict[str, Any]] | None = None,
    rv: str = "1",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "chat",
            "namespace": "team",
            "uid": "s-1",
            "resourceVersion": rv,
            "generation": 1,
            "labels": labels or {LABEL_MANAGED_BY: "ai-inference", LABEL_ORDER: "chat"},
            "ownerReferences": [{"kind": "InferenceService", "name": "chat", "uid": "u-1", "controller": True}],
            "managedFields": managed or [entry(FIELD_MANAGER, "2026-11-30T10:00:00Z")],
        },
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "runtime",
                            "args": [
                                "--model",
                                "/models/x",
                                "--served-model-name",
                                "Qwen/Qwen2.5-7B",
                                "--port",
                                "8000",
                            ],
                        }
                    ]
                }
            },
        },
        "status": {"readyReplicas": ready},
    }


def pod(ready: bool = False, image: str | None = "vllm:0.33.0", name: str = "chat-0") -> dict[str, Any]:
    annotations = {ANNOTATION_RUNTIME_IMAGE: image} if image else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "labels": {LABEL_ORDER: "chat"},
            "annotations": annotations,
            "resourceVersion": "1",
        },
        "spec": {"nodeName": "gpu-1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def ready_condition(status: str, reason: str) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": "2026-11-30T10:00:00Z"}


# ------------------------------------------------------------------------------ orders


class TestOrderIntent:
    def test_first_sight_sends_the_generation_with_start(self) -> None:
        memory = d.OrderMemory()
        intent = d.order_intent(d.SYNC, order(generation=3), memory)
        assert intent == d.Intent(OrderSignal.SPEC_CHANGED, 3, start=True)
        assert intent.args == [3]

    def test_sync_after_a_restart_sends_once(self) -> None:
        memory = d.OrderMemory()
        intent = d.order_intent(d.SYNC, order(generation=2), memory)
        assert intent is not None
        d.remember(memory, intent)
        assert d.order_intent(d.SYNC, order(generation=2), memory) is None

    def test_newer_generation_is_sent(self) -> None:
        memory = d.OrderMemory(generation=2)
        assert d.order_intent(d.MODIFIED, order(generation=3), memory) == d.Intent(
            OrderSignal.SPEC_CHANGED, 3, start=True
        )

    @pytest.mark.parametrize("generation", [1, 2])
    def test_same_or_older_generation_is_nothing(self, generation: int) -> None:
        # A status write keeps the generation: the module's own writes never come back.
        memory = d.OrderMemory(generation=2)
        assert d.order_intent(d.MODIFIED, order(generation=generation, rv="9"), memory) is None

    def test_deleting_order_gets_delete_with_start_once(self) -> None:
        memory = d.OrderMemory(generation=1)
        intent = d.order_intent(d.MODIFIED, order(deleting=True), memory)
        assert intent == d.Intent(OrderSignal.DELETE, None, start=True)
        assert intent.args == []
        d.remember(memory, intent)
        assert d.order_intent(d.MODIFIED, order(deleting=True, rv="5"), memory) is None

    def test_deleting_order_seen_first_on_the_listing_gets_delete(self) -> None:
        # No workflow may exist (a lost database): signal-with-start still removes the finalizer.
        intent = d.order_intent(d.SYNC, order(deleting=True), d.OrderMemory())
        assert intent is not None
        assert intent.signal == OrderSignal.DELETE
        assert intent.start

    def test_gone_without_a_deletion_seen_gets_a_plain_delete(self) -> None:
        intent = d.order_intent(d.DELETED, order(), d.OrderMemory(generation=1))
        assert intent == d.Intent(OrderSignal.DELETE)
        assert d.order_intent(d.DELETED, order(), d.OrderMemory(generation=1, delete_sent=True)) is None

    def test_remember(self) -> None:
        memory = d.OrderMemory()
        d.remember(memory, d.Intent(OrderSignal.SPEC_CHANGED, 4, start=True))
        assert memory.generation == 4
        assert not memory.delete_sent
        d.remember(memory, d.Intent(OrderSignal.DELETE, start=True))
        assert memory.delete_sent


# ----------------------------------------------------------------------------- classes


class TestClassChanged:
    def test_spec_edit_sends_the_new_generation(self) -> None:
        assert d.class_changed_generation(d.MODIFIED, klass(generation=1), klass(generation=2, rv="2")) == 2

    def test_status_only_write_is_nothing(self) -> None:
        # The observer's own class status write comes back as MODIFIED with the same generation.
        written = klass(generation=2, rv="3", status={"phase": "Ready", "observedGeneration": 2})
        assert d.class_changed_generation(d.MODIFIED, klass(generation=2, rv="2"), written) is None

    def test_first_listing_is_nothing(self) -> None:
        assert d.class_changed_generation(d.SYNC, None, klass(generation=5)) is None

    def test_a_class_made_later_tells_its_waiting_orders(self) -> None:
        assert d.class_changed_generation(d.ADDED, None, klass(generation=1)) == 1

    def test_deleted_class_tells_its_orders(self) -> None:
        assert d.class_changed_generation(d.DELETED, klass(generation=4), None) == d.CLASS_GONE


# ------------------------------------------------------------------------ owned objects


class TestManagedFields:
    def test_newest_non_status_entry_wins(self) -> None:
        obj = statefulset(
            managed=[
                entry(FIELD_MANAGER, "2026-11-30T10:00:00Z"),
                entry("kubectl-edit", "2026-11-30T10:05:00Z", operation="Update"),
                entry("kube-controller-manager", "2026-11-30T10:09:00Z", subresource="status", operation="Update"),
            ]
        )
        assert d.last_writer(obj) == "kubectl-edit"

    def test_same_second_prefers_someone_else(self) -> None:
        obj = statefulset(
            managed=[
                entry("kubectl-edit", "2026-11-30T10:05:00Z", operation="Update"),
                entry(FIELD_MANAGER, "2026-11-30T10:05:00Z"),
            ]
        )
        assert d.last_writer(obj) == "kubectl-edit"

    def test_no_entries(self) -> None:
        obj = statefulset()
        obj["metadata"]["managedFields"] = []
        assert d.last_writer(obj) is None


class TestOwnedChange:
    def test_deleted(self) -> None:
        assert d.owned_change("StatefulSet", d.DELETED, statefulset(), statefulset()) == "StatefulSet team/chat deleted"
        assert d.owned_change("Service", d.DELETED, None, {"metadata": {"name": "chat", "namespace": "team"}}) == (
            "Service team/chat deleted"
        )

    def test_spec_changed_by_the_module_is_nothing(self) -> None:
        old = statefulset()
        new = statefulset(replicas=2, rv="2", managed=[entry(FIELD_MANAGER, "2026-11-30T10:07:00Z")])
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) is None

    def test_spec_changed_by_kubectl_is_observed(self) -> None:
        old = statefulset()
        new = statefulset(
            replicas=3,
            rv="2",
            managed=[
                entry(FIELD_MANAGER, "2026-11-30T10:00:00Z"),
                entry("kubectl-edit", "2026-11-30T10:07:00Z", operation="Update"),
            ],
        )
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) == "StatefulSet team/chat changed by kubectl-edit"

    def test_metadata_changed_by_kubectl_is_observed(self) -> None:
        old = statefulset()
        new = statefulset(
            rv="2",
            labels={LABEL_MANAGED_BY: "ai-inference", LABEL_ORDER: "chat", "extra": "x"},
            managed=[entry(FIELD_MANAGER, "2026-11-30T10:00:00Z"), entry("kubectl-label", "2026-11-30T10:07:00Z")],
        )
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) == "StatefulSet team/chat changed by kubectl-label"

    def test_status_write_by_a_controller_is_nothing(self) -> None:
        # Even after an old kubectl edit: only what changed counts, and a status write changes no spec.
        managed = [
            entry(FIELD_MANAGER, "2026-11-30T10:00:00Z"),
            entry("kubectl-edit", "2026-11-30T10:05:00Z", operation="Update"),
        ]
        old = statefulset(managed=managed)
        new = copy.deepcopy(old)
        new["metadata"]["resourceVersion"] = "2"
        new["status"]["currentRevision"] = "chat-abc"
        new["metadata"]["managedFields"] = [
            *managed,
            entry("kube-controller-manager", "2026-11-30T10:09:00Z", "status", "Update"),
        ]
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) is None

    def test_hpa_scaling_through_the_scale_subresource_is_nothing(self) -> None:
        old = statefulset()
        new = statefulset(
            replicas=2,
            rv="2",
            managed=[
                entry(FIELD_MANAGER, "2026-11-30T10:00:00Z"),
                entry("kube-controller-manager", "2026-11-30T10:08:00Z", "scale", "Update"),
            ],
        )
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) is None

    def test_kubectl_scale_is_observed(self) -> None:
        old = statefulset()
        new = statefulset(
            replicas=5,
            rv="2",
            managed=[entry(FIELD_MANAGER, "2026-11-30T10:00:00Z"), entry("kubectl", "2026-11-30T10:08:00Z", "scale")],
        )
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) == "StatefulSet team/chat changed by kubectl"

    def test_ready_replicas_change_is_observed(self) -> None:
        assert (
            d.owned_change("StatefulSet", d.MODIFIED, statefulset(ready=0), statefulset(ready=1, rv="2"))
            == "StatefulSet team/chat readyReplicas 0→1"
        )

    def test_ready_replicas_only_matter_for_statefulsets(self) -> None:
        service_old = {"metadata": {"name": "chat", "namespace": "team"}, "status": {"readyReplicas": 0}}
        service_new = {"metadata": {"name": "chat", "namespace": "team"}, "status": {"readyReplicas": 1}}
        assert d.owned_change("Service", d.MODIFIED, service_old, service_new) is None

    @pytest.mark.parametrize("event_type", [d.SYNC, d.ADDED])
    def test_additions_are_the_modules_own(self, event_type: str) -> None:
        assert d.owned_change("StatefulSet", event_type, None, statefulset()) is None

    def test_deletion_timestamp_is_no_drift(self) -> None:
        old = statefulset(managed=[entry("kubectl-edit", "2026-11-30T10:05:00Z")])
        new = copy.deepcopy(old)
        new["metadata"]["deletionTimestamp"] = "2026-11-30T10:10:00Z"
        new["metadata"]["resourceVersion"] = "2"
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) is None

    def test_an_ignored_annotation_written_by_someone_else_is_nothing(self) -> None:
        old = statefulset()
        new = copy.deepcopy(old)
        new["metadata"]["resourceVersion"] = "2"
        new["metadata"]["annotations"] = {"probe-url": "http://127.0.0.1:1234"}
        new["metadata"]["managedFields"] = [*old["metadata"]["managedFields"], entry("fleet", "2026-11-30T10:09:00Z")]
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new, frozenset({"probe-url"})) is None
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new) == "StatefulSet team/chat changed by fleet"

    def test_owner_and_label(self) -> None:
        assert d.owner_order_uid(statefulset()) == "u-1"
        assert d.order_name_label(statefulset()) == "chat"
        assert d.owner_order_uid(pod()) is None
        assert d.order_name_label(pod()) == "chat"

    def test_served_name(self) -> None:
        assert d.served_name(statefulset()) == "Qwen/Qwen2.5-7B"
        other = statefulset()
        other["spec"]["template"]["spec"]["containers"][0]["args"] = ["--served-model-name=m"]
        assert d.served_name(other) == "m"
        assert d.served_name(None) is None


class TestPods:
    def test_readiness_flip(self) -> None:
        assert d.pod_change(d.MODIFIED, pod(ready=False), pod(ready=True)) == "Pod team/chat-0 ready"
        assert d.pod_change(d.MODIFIED, pod(ready=True), pod(ready=False)) == "Pod team/chat-0 not ready"

    def test_runtime_image_change(self) -> None:
        assert (
            d.pod_change(d.MODIFIED, pod(ready=True, image="vllm:0.32"), pod(ready=True, image="vllm:0.33"))
            == "Pod team/chat-0 runtime image vllm:0.32→vllm:0.33"
        )

    def test_no_change(self) -> None:
        assert d.pod_change(d.MODIFIED, pod(ready=True), pod(ready=True)) is None

    def test_a_new_replica_counts_once_ready(self) -> None:
        assert d.pod_change(d.ADDED, None, pod(ready=False)) is None
        assert d.pod_change(d.ADDED, None, pod(ready=True)) == "Pod team/chat-0 ready"

    def test_first_listing_is_nothing(self) -> None:
        assert d.pod_change(d.SYNC, None, pod(ready=True)) is None

    def test_gone(self) -> None:
        assert d.pod_change(d.DELETED, pod(ready=True), pod(ready=True)) == "Pod team/chat-0 gone"
        assert d.pod_change(d.DELETED, pod(ready=False), None) is None


class TestAwaitingReplicas:
    """While the workflow brings an order up it waits for the replicas itself: their news says nothing."""

    def test_a_new_order_is_being_brought_up(self) -> None:
        assert d.awaiting_replicas(order())
        progressing = {"type": "WorkloadReady", "status": "False", "reason": "WorkloadProgressing"}
        assert d.awaiting_replicas(order(status={"phase": "Pending", "conditions": [progressing]}))

    @pytest.mark.parametrize(
        ("phase", "status", "reason"),
        [
            ("Ready", "True", "ProbeSucceeded"),
            ("Degraded", "True", "ProbeSucceeded"),
            ("Failed", "False", "ServiceUnhealthy"),
        ],
    )
    def test_a_serving_order_hears_its_replicas(self, phase: str, status: str, reason: str) -> None:
        assert not d.awaiting_replicas(serving_order(phase, status, reason))

    def test_after_the_first_probe_gave_up_replicas_count_again(self) -> None:
        assert not d.awaiting_replicas(serving_order("Pending", "False", "HealthCheckFailed"))

    def test_ready_replicas_can_be_left_out(self) -> None:
        old, new = statefulset(ready=0), statefulset(ready=1, rv="2")
        assert d.owned_change("StatefulSet", d.MODIFIED, old, new, replicas=False) is None
        assert d.owned_change("StatefulSet", d.DELETED, old, new, replicas=False) == "StatefulSet team/chat deleted"


class TestCoalesced:
    def test_one_signal_for_many_changes(self) -> None:
        c = d.Coalesced()
        c.add("StatefulSet", "a")
        c.add("Pod", "b")
        c.add("Pod", "b")
        assert c.summary() == ("StatefulSet", "a; b")

    def test_long_lists_are_cut(self) -> None:
        c = d.Coalesced()
        for i in range(6):
            c.add("Pod", f"p{i}")
        assert c.summary(most=4) == ("Pod", "p0; p1; p2; p3; and 2 more")


# ------------------------------------------------------------------------------- models


CATALOG_ORDER = order(model={"src": "ai-models", "ref": {"kind": "ClusterModel", "name": "qwen"}})
MODEL_ORDER = order(model={"src": "ai-models", "ref": {"kind": "Model", "name": "qwen"}})


class TestModels:
    def test_reference_keys(self) -> None:
        assert d.model_ref_key(CATALOG_ORDER) == ("ClusterModel", "", "qwen")
        assert d.model_ref_key(MODEL_ORDER) == ("Model", "team", "qwen")
        other_ns = order(model={"src": "ai-models", "ref": {"kind": "Model", "name": "qwen", "namespace": "lib"}})
        assert d.model_ref_key(other_ns) == ("Model", "lib", "qwen")
        assert d.model_ref_key(order()) is None

    def test_catalog_key_matches_the_reference(self) -> None:
        cluster_model = {"metadata": {"name": "qwen"}}
        model = {"metadata": {"name": "qwen", "namespace": "team"}}
        assert d.catalog_key("ClusterModel", cluster_model) == d.model_ref_key(CATALOG_ORDER)
        assert d.catalog_key("Model", model) == d.model_ref_key(MODEL_ORDER)

    def test_appeared(self) -> None:
        new = {"metadata": {"name": "qwen"}, "status": {"phase": "Pending"}}
        assert d.model_change("ClusterModel", d.ADDED, None, new) == "ClusterModel qwen appeared"

    def test_turned_ready(self) -> None:
        old = {"metadata": {"name": "qwen"}, "status": {"phase": "Pending"}}
        new = {"metadata": {"name": "qwen"}, "status": {"phase": "Ready"}}
        assert d.model_change("ClusterModel", d.MODIFIED, old, new) == "ClusterModel qwen is Ready"

    def test_other_changes_are_nothing(self) -> None:
        ready = {"metadata": {"name": "qwen"}, "status": {"phase": "Ready"}}
        failed = {"metadata": {"name": "qwen"}, "status": {"phase": "Failed"}}
        assert d.model_change("ClusterModel", d.MODIFIED, ready, ready) is None
        assert d.model_change("ClusterModel", d.MODIFIED, ready, failed) is None
        assert d.model_change("ClusterModel", d.SYNC, None, ready) is None
        assert d.model_change("ClusterModel", d.DELETED, ready, None) is None


# ------------------------------------------------------------------------------- health


def serving_order(phase: str, status: str, reason: str) -> dict[str, Any]:
    return order(status={"phase": phase, "conditions": [ready_condition(status, reason)]})


class TestServing:
    @pytest.mark.parametrize("phase", ["Ready", "Degraded"])
    def test_ready_true_is_healthy(self, phase: str) -> None:
        assert d.serving(serving_order(phase, "True", "ServiceReady")) == d.Serving.HEALTHY

    def test_service_unhealthy_is_probed_for_recovery(self) -> None:
        assert d.serving(serving_order("Failed", "False", "ServiceUnhealthy")) == d.Serving.UNHEALTHY

    @pytest.mark.parametrize(
        ("phase", "status", "reason"),
        [
            ("Pending", "False", "WorkloadProgressing"),
            ("Pending", "True", "ServiceReady"),
            ("Ready", "False", "WaitingForPreviousStep"),
            ("Failed", "False", "NoCapacity"),
        ],
    )
    def test_not_serving(self, phase: str, status: str, reason: str) -> None:
        assert d.serving(serving_order(phase, status, reason)) == d.Serving.NO

    def test_no_status_and_deleting(self) -> None:
        assert d.serving(order()) == d.Serving.NO
        deleting = serving_order("Ready", "True", "ServiceReady")
        deleting["metadata"]["deletionTimestamp"] = "2026-11-30T10:00:00Z"
        assert d.serving(deleting) == d.Serving.NO
        assert d.serving(None) == d.Serving.NO


class TestHealthTrack:
    def test_threshold_failures_in_a_row_flip_a_healthy_order_once(self) -> None:
        track = d.HealthTrack()
        assert track.observe(d.Serving.HEALTHY, False, "HTTP 503", 3) is None
        assert track.observe(d.Serving.HEALTHY, False, "HTTP 503", 3) is None
        report = track.observe(d.Serving.HEALTHY, False, "HTTP 503", 3)
        assert report == HealthReport(healthy=False, detail="HTTP 503", failures=3)
        # Status still says healthy (the workflow has not written yet): not told again.
        assert track.observe(d.Serving.HEALTHY, False, "HTTP 503", 3) is None
        assert track.failures == 4

    def test_a_success_resets_the_count(self) -> None:
        track = d.HealthTrack()
        track.observe(d.Serving.HEALTHY, False, "x", 3)
        track.observe(d.Serving.HEALTHY, False, "x", 3)
        assert track.observe(d.Serving.HEALTHY, True, "ok", 3) is None
        assert track.failures == 0
        assert track.observe(d.Serving.HEALTHY, False, "x", 3) is None

    def test_a_healthy_order_costs_nothing(self) -> None:
        track = d.HealthTrack()
        for _ in range(10):
            assert track.observe(d.Serving.HEALTHY, True, "ok", 3) is None

    def test_one_success_flips_an_unhealthy_order(self) -> None:
        track = d.HealthTrack()
        assert track.observe(d.Serving.UNHEALTHY, False, "x", 3) is None
        assert track.observe(d.Serving.UNHEALTHY, True, "lists m", 3) == HealthReport(healthy=True, detail="lists m")
        assert track.observe(d.Serving.UNHEALTHY, True, "lists m", 3) is None

    def test_failures_of_an_unhealthy_order_are_nothing(self) -> None:
        track = d.HealthTrack()
        for _ in range(5):
            assert track.observe(d.Serving.UNHEALTHY, False, "x", 3) is None

    def test_once_the_status_moves_on_a_new_flip_is_told(self) -> None:
        track = d.HealthTrack()
        for _ in range(3):
            track.observe(d.Serving.HEALTHY, False, "x", 3)
        # The workflow wrote ServiceUnhealthy; then the API answers again.
        assert track.observe(d.Serving.UNHEALTHY, True, "ok", 3) == HealthReport(healthy=True, detail="ok")
        # Ready again; the API fails again: a new streak is told.
        for _ in range(2):
            assert track.observe(d.Serving.HEALTHY, False, "y", 3) is None
        assert track.observe(d.Serving.HEALTHY, False, "y", 3) == HealthReport(healthy=False, detail="y", failures=3)

    def test_forget_tells_again(self) -> None:
        track = d.HealthTrack()
        for _ in range(3):
            track.observe(d.Serving.HEALTHY, False, "x", 3)
        track.forget()
        assert track.observe(d.Serving.HEALTHY, False, "x", 3) == HealthReport(healthy=False, detail="x", failures=4)


class TestProbeHelpers:
    def test_verdict(self) -> None:
        body = b'{"data": [{"id": "m"}]}'
        assert models_verdict(200, body, "m").ok
        assert not models_verdict(200, body, "other").ok
        assert models_verdict(200, body, None).ok
        assert not models_verdict(200, b'{"data": []}', None).ok
        assert models_verdict(401, b"", "m").detail == "GET /v1/models: HTTP 401"
        assert models_verdict(401, b"", "m").reason is None
        for refused in (401, 403):
            # With the Secret's token sent, a refusal means the replicas hold another one.
            edited = models_verdict(refused, b"", "m", token_sent=True)
            assert not edited.ok
            assert edited.reason == "AuthTokenInvalid"
            assert f"HTTP {refused} with the token of the order's auth Secret" in edited.detail
        assert models_verdict(500, b"", "m", token_sent=True).reason is None
        assert models_verdict(200, b"<html>", "m").detail == "GET /v1/models: not JSON"

    def test_target(self) -> None:
        service = {"metadata": {"annotations": {"probe": "http://127.0.0.1:9000/"}}}
        assert probe_target("chat", "team") == "http://chat.team.svc"
        assert probe_target("chat", "team", service, "probe") == "http://127.0.0.1:9000"
        assert probe_target("chat", "team", service, None) == "http://chat.team.svc"
        assert probe_target("chat", "team", {"metadata": {}}, "probe") == "http://chat.team.svc"

    def test_token(self) -> None:
        secret = {"data": {"token": base64.b64encode(b"s3cret").decode()}}
        assert token_from_secret(secret) == "s3cret"
        assert token_from_secret(None) is None
        assert token_from_secret({"data": {"token": "!!!"}}) is None


# ------------------------------------------------------------------------------ scaling


def test_priority_value() -> None:
    classes = [
        {"metadata": {"name": "high"}, "value": 1000},
        {"metadata": {"name": "default"}, "value": 10, "globalDefault": True},
    ]
    assert priority_value("high", classes) == 1000
    assert priority_value(None, classes) == 10
    assert priority_value("missing", classes) == 0
    assert priority_value(None, classes[:1]) == 0


# ------------------------------------------------------------------------------ shards


class TestShards:
    def test_membership_is_the_uid_hash_modulo(self) -> None:
        uid = "0f9d2b1c-1111-4e2a-9c3b-222233334444"
        expected = int(hashlib.sha256(uid.encode()).hexdigest(), 16) % 3
        assert d.shard_of(uid, 3) == expected
        assert [d.in_shard(uid, 3, s) for s in range(3)] == [s == expected for s in range(3)]

    def test_every_order_has_exactly_one_shard(self) -> None:
        uids = [f"uid-{i}" for i in range(300)]
        for shards in (1, 2, 5):
            for uid in uids:
                assert sum(d.in_shard(uid, shards, s) for s in range(shards)) == 1
        # and the split is roughly even
        counts = [sum(d.in_shard(u, 3, s) for u in uids) for s in range(3)]
        assert min(counts) > 60

    def test_one_shard_takes_everything(self) -> None:
        assert d.in_shard("anything", 1, 0)

    def test_settings(self) -> None:
        assert ObserverSettings().shards == 1
        with pytest.raises(ValueError, match=r"is not below observer\.shards"):
            ObserverSettings(shards=2, shard=2)

    def test_observer_settings_are_not_part_of_the_release(self) -> None:
        a = ModuleSettings(observer=ObserverSettings(shards=4, shard=1))
        b = ModuleSettings()
        assert "observer" not in a.model_dump(mode="json")
        assert a.model_dump(mode="json") == b.model_dump(mode="json")


# ------------------------------------------------------------------------------ resync


def ref(uid: str, name: str = "o") -> OrderRef:
    return OrderRef(namespace="team", name=name, uid=uid)


def wf(uid: str, type_: str = "OrderWorkflowV2", release: str | None = "fp", run: str = "r1") -> d.RunningWorkflow:
    return d.RunningWorkflow(f"order/team/o/{uid}", run, type_, release)


class TestResyncPlan:
    def test_missing_workflow_is_started(self) -> None:
        plan = d.plan_resync([d.ListedOrder(ref("a"), 2)], [], "fp")
        assert plan.start == [(ref("a"), d.Intent(OrderSignal.SPEC_CHANGED, 2, start=True))]
        assert plan.counts() == {"start": 1, "move": 0, "delete": 0, "terminate": 0, "redelete": 0, "settings": 0}

    def test_a_workflow_started_moments_ago_is_not_started_again(self) -> None:
        # Visibility lags: the event path's signal-with-start may not be listed yet.
        plan = d.plan_resync([d.ListedOrder(ref("a"), 2)], [], "fp", recently_started={"order/team/o/a"})
        assert plan.start == []

    def test_a_workflow_started_moments_ago_is_not_told_the_settings_its_first_reconcile_reads(self) -> None:
        # The event path started it; its first reconcile has not set OrderRelease yet. Told
        # settings_changed now, it would reconcile (and apply) a second time.
        listed = [d.ListedOrder(ref("a"), 1)]
        started = d.plan_resync(listed, [wf("a", release=None)], "fp", recently_started={"order/team/o/a"})
        assert started.counts() == dict.fromkeys(started.counts(), 0)
        # Once the start is no longer recent, a workflow still without the release in force hears it.
        later = d.plan_resync(listed, [wf("a", release=None)], "fp")
        assert later.settings == [ref("a")]

    def test_missing_workflow_of_a_deleting_order_is_started_with_delete(self) -> None:
        plan = d.plan_resync([d.ListedOrder(ref("a"), 2, deleting=True)], [], "fp")
        assert plan.start == [(ref("a"), d.Intent(OrderSignal.DELETE, start=True))]

    def test_running_and_current_is_nothing(self) -> None:
        plan = d.plan_resync([d.ListedOrder(ref("a"), 2)], [wf("a")], "fp")
        assert plan.counts() == dict.fromkeys(plan.counts(), 0)

    def test_legacy_workflow_is_moved(self) -> None:
        plan = d.plan_resync([d.ListedOrder(ref("a"), 2)], [wf("a", "OrderWorkflow", None, "old")], "fp")
        assert plan.move == [(ref("a"), "old", d.Intent(OrderSignal.SPEC_CHANGED, 2, start=True))]
        assert not plan.start
        assert not plan.settings

    def test_orphan_hears_delete_then_is_terminated(self) -> None:
        first = d.plan_resync([], [wf("gone")], "fp")
        assert first.delete == [ref("gone")]
        assert first.orphans == {("order/team/o/gone", "r1")}
        second = d.plan_resync([], [wf("gone")], "fp", previous_orphans=first.orphans)
        assert second.terminate == [("order/team/o/gone", "r1")]
        assert not second.delete
        assert not second.orphans

    def test_an_orphan_that_continued_as_new_hears_delete_again(self) -> None:
        first = d.plan_resync([], [wf("gone", run="r1")], "fp")
        second = d.plan_resync([], [wf("gone", run="r2")], "fp", previous_orphans=first.orphans)
        assert second.delete == [ref("gone")]
        assert not second.terminate

    def test_legacy_orphan_is_an_orphan(self) -> None:
        plan = d.plan_resync([], [wf("gone", "OrderWorkflow")], "fp")
        assert plan.delete == [ref("gone")]
        assert not plan.move

    def test_stale_release_hears_settings_changed(self) -> None:
        plan = d.plan_resync([d.ListedOrder(ref("a"), 1)], [wf("a", release="old")], "fp")
        assert plan.settings == [ref("a")]

    def test_unset_release_hears_settings_changed(self) -> None:
        plan = d.plan_resync([d.ListedOrder(ref("a"), 1)], [wf("a", release=None)], "fp")
        assert plan.settings == [ref("a")]

    def test_a_workflow_told_is_not_told_again(self) -> None:
        told = {"order/team/o/a": "fp"}
        plan = d.plan_resync([d.ListedOrder(ref("a"), 1)], [wf("a", release="old")], "fp", told_release=told)
        assert plan.settings == []
        told = {"order/team/o/a": "older-fp"}
        plan = d.plan_resync([d.ListedOrder(ref("a"), 1)], [wf("a", release="old")], "fp", told_release=told)
        assert plan.settings == [ref("a")]

    def test_deleting_order_with_a_running_workflow_hears_delete_again(self) -> None:
        plan = d.plan_resync([d.ListedOrder(ref("a"), 1, deleting=True)], [wf("a", release="old")], "fp")
        assert plan.redelete == [ref("a")]
        assert not plan.settings

    def test_foreign_ids_and_types_are_left_alone(self) -> None:
        running = [
            d.RunningWorkflow("preemption/q/dc", "r", "PreemptionWorkflow"),
            d.RunningWorkflow("order/team/o/x", "r", "SomethingElse"),
        ]
        plan = d.plan_resync([], running, "fp")
        assert plan.counts() == dict.fromkeys(plan.counts(), 0)

    def test_only_this_shards_orders_and_workflows(self) -> None:
        uids = [f"u{i}" for i in range(40)]
        orders = [d.ListedOrder(ref(u), 1) for u in uids]
        running = [wf(f"gone{i}") for i in range(40)]
        plans = [d.plan_resync(orders, running, "fp", shards=2, shard=s) for s in range(2)]
        started = [{r.uid for r, _ in p.start} for p in plans]
        assert started[0] | started[1] == set(uids)
        assert not started[0] & started[1]
        for s, p in enumerate(plans):
            assert all(d.in_shard(r.uid, 2, s) for r in p.delete)
        assert len(plans[0].delete) + len(plans[1].delete) == 40

    def test_workflow_ids(self) -> None:
        assert d.order_workflow_ref("order/team/chat/u-1") == OrderRef(namespace="team", name="chat", uid="u-1")
        assert d.order_workflow_ref("preemption/q/dc") is None
        assert d.order_workflow_ref("order/team/chat") is None
        assert d.order_workflow_ref("order//chat/u") is None

    def test_query(self) -> None:
        assert d.running_order_query("ai-inference") == (
            "ExecutionStatus = 'Running' AND WorkflowType IN ('OrderWorkflowV2', 'OrderWorkflow') "
            "AND TaskQueue = 'ai-inference'"
        )


# ----------------------------------------------------------------------- informer cache


class TestInformerCache:
    def test_first_listing_is_sync(self) -> None:
        inf = Informer("InferenceService")
        changes = inf.listed([order(uid="a", name="a"), order(uid="b", name="b")])
        assert [c.type for c in changes] == [d.SYNC, d.SYNC]
        assert inf.synced
        assert set(inf.cache) == {"team/a", "team/b"}

    def test_relist_delivers_only_differences(self) -> None:
        inf = Informer("InferenceService")
        inf.listed([order(uid="a", name="a"), order(uid="b", name="b"), order(uid="c", name="c")])
        changes = inf.listed(
            [order(uid="a", name="a"), order(uid="b", name="b", rv="2", generation=2), order(uid="d", name="d")]
        )
        kinds = sorted((c.type, d.object_key(c.obj)) for c in changes)
        assert kinds == [(d.ADDED, "team/d"), (d.DELETED, "team/c"), (d.MODIFIED, "team/b")]

    def test_watch_events(self) -> None:
        inf = Informer("InferenceService")
        inf.listed([])
        (added,) = inf.watched(d.ADDED, order())
        assert added.type == d.ADDED
        assert added.old is None
        assert inf.watched(d.MODIFIED, order()) == []  # same resourceVersion: nothing new
        (modified,) = inf.watched(d.MODIFIED, order(rv="2"))
        assert modified.type == d.MODIFIED
        assert modified.old is not None
        (deleted,) = inf.watched(d.DELETED, order(rv="3"))
        assert deleted.type == d.DELETED
        assert "team/chat" not in inf.cache

    def test_same_name_other_uid_is_a_delete_and_an_add(self) -> None:
        inf = Informer("InferenceService")
        inf.listed([order(uid="old")])
        changes = inf.watched(d.MODIFIED, order(uid="new", rv="5"))
        assert [(c.type, d.meta(c.obj)["uid"]) for c in changes] == [(d.DELETED, "old"), (d.ADDED, "new")]


# ------------------------------------------------------------------------------- outbox


class TestOutboxMerge:
    def test_keys(self) -> None:
        r = ref("a")
        assert signal_to(r, "spec_changed", [1], start=True).key == ("order/team/o/a", "spec_changed")
        move = signal_to(r, "spec_changed", [1], start=True)
        move.terminate_run = "old"
        assert move.key == ("order/team/o/a", "move")
        terminate = Delivery("order/team/o/a", "terminate", terminate_run="r")
        assert terminate.key == ("order/team/o/a", "terminate")

    def test_spec_changed_keeps_the_highest_generation(self) -> None:
        queued = signal_to(ref("a"), "spec_changed", [3], start=True)
        merge(queued, signal_to(ref("a"), "spec_changed", [2], start=True))
        assert queued.args == [3]
        merge(queued, signal_to(ref("a"), "spec_changed", [5], start=True))
        assert queued.args == [5]
        assert queued.start == ref("a")

    def test_observed_joins(self) -> None:
        queued = signal_to(ref("a"), "observed", [ObservedChange(what="Pod x ready", kind="Pod")])
        merge(queued, signal_to(ref("a"), "observed", [ObservedChange(what="Service y deleted", kind="Service")]))
        assert queued.args == [ObservedChange(what="Pod x ready; Service y deleted", kind="Pod")]
        merge(queued, signal_to(ref("a"), "observed", [ObservedChange(what="Pod x ready", kind="Pod")]))
        assert queued.args[0].what == "Pod x ready; Service y deleted"

    def test_others_take_the_newest(self) -> None:
        queued = signal_to(ref("a"), "health_changed", [HealthReport(healthy=False)])
        merge(queued, signal_to(ref("a"), "health_changed", [HealthReport(healthy=True)]))
        assert queued.args == [HealthReport(healthy=True)]

    def test_backoff(self) -> None:
        assert [backoff_seconds(n, cap=60) for n in (1, 2, 3, 7, 20)] == [1, 2, 4, 60, 60]


# ------------------------------------------------------------------------------ start window

WORKING = {
    Reason.CLASS_RESOLVED,
    Reason.MODEL_RESOLVED,
    Reason.LAUNCH_PLAN_CALCULATED,
    Reason.WORKLOAD_APPLIED,
    Reason.WAITING_FOR_PREVIOUS_STEP,
}


@pytest.mark.parametrize("phase", [None, "", *Phase])
@pytest.mark.parametrize("reason", [None, "", *Reason])
def test_a_start_settles_on_any_status_but_a_pending_one_at_work(phase: str | None, reason: str | None) -> None:
    """Every phase and reason: no phase (no workflow carried the order yet) and Pending on a working
    step (or with no reason) hold the start window's place; Ready, Degraded, Failed and Pending on a
    wait (a load, capacity, a refusal, a trouble) free it."""
    expected = bool(phase) and (phase != Phase.PENDING or (bool(reason) and reason not in WORKING))
    assert d.start_settled(phase, reason) is expected
    status = {k: v for k, v in (("phase", phase), ("reason", reason)) if v is not None}
    assert d.order_start_settled({"metadata": {}, "status": status}) is expected


def test_an_order_is_new_until_a_workflow_writes_its_phase() -> None:
    assert d.is_new_order({"metadata": {}})
    assert d.is_new_order({"metadata": {}, "status": {}})
    assert d.is_new_order({"metadata": {}, "status": {"conditions": []}})
    assert not d.is_new_order({"metadata": {}, "status": {"phase": "Pending"}})
    assert not d.is_new_order(None)
    assert not d.order_start_settled(None)


def test_a_pending_order_loading_or_waiting_for_capacity_has_settled() -> None:
    for reason in (Reason.WORKLOAD_PROGRESSING, Reason.MODEL_LOADING, Reason.NO_CAPACITY, Reason.QUOTA_EXCEEDED):
        assert d.start_settled("Pending", reason)
    assert not d.start_settled("Pending", Reason.LAUNCH_PLAN_CALCULATED)


# ------------------------------------------------------------------ scaling news while an order loads

_LOADING = {"phase": "Pending", "reason": "WorkloadProgressing"}
_SERVING = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True", "reason": "ProbeSucceeded"}]}
_GAVE_UP = {
    "phase": "Pending",
    "conditions": [{"type": "Ready", "status": "False", "reason": Reason.HEALTH_CHECK_FAILED.value}],
}


@pytest.mark.parametrize(
    ("status", "observation", "now"),
    [
        # Brought up: its workflow reads scaling only after the load step; the news waits.
        (None, ScalingObservation(placedReplicas=1, desiredReplicas=2), False),
        (_LOADING, ScalingObservation(placedReplicas=0, desiredReplicas=1), False),
        # ... unless it needs acting on as soon as the step ends.
        (_LOADING, ScalingObservation(unschedulableReplicas=1), True),
        (
            _LOADING,
            ScalingObservation(
                conditions=[HpaCondition(type=SCALING_LIMITED, status="True", reason=TOO_MANY_REPLICAS)]
            ),
            True,
        ),
        (_LOADING, ScalingObservation(autoscalerFound=False), True),
        # Serving, or the wait gave up (the workflow sleeps on a backoff in its main loop): told now.
        (_SERVING, ScalingObservation(placedReplicas=1), True),
        (_GAVE_UP, ScalingObservation(placedReplicas=1), True),
    ],
    ids=["new", "loading", "unschedulable", "wants-above-bound", "hpa-gone", "serving", "gave-up"],
)
def test_scaling_news_waits_while_an_order_is_brought_up_unless_it_needs_acting_on(
    status: dict[str, Any] | None, observation: ScalingObservation, now: bool
) -> None:
    assert d.scaling_news_now(order(status=status), observation) is now


def test_the_period_of_the_secret_reads_grows_only_past_the_budget() -> None:
    """Every 30 s while the budget lets every Secret be read that often; past it, as often as it lets."""
    assert d.secret_period(30, 0, 20) == 30
    assert d.secret_period(30, 600, 20) == 30
    assert d.secret_period(30, 1200, 20) == 60
    assert d.secret_period(30, 10_000, 0) == 30  # 0: no bound
