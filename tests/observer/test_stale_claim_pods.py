"""A waiting replica whose device claim was made from a claim template the order has replaced since
is deleted by the observer, so its StatefulSet makes it again with a claim of the current template
(``decisions.pods_with_stale_claims``, acted on by ``Observer.trouble_of``). Pure decisions here;
the end-to-end case is tests/e2e/test_stale_claim.py.

Without it an order planned onto a device another order took meanwhile stayed ``ClaimNotAllocatable``
for good (the FAQ promises "the order moves by itself"): each replan replaced the claim template, the
pod template did not change, and the StatefulSet controller left the waiting pod with its old claim.
"""

from __future__ import annotations

from typing import Any

import pytest

from worker.observer import decisions as d

ORDER_UID = "u-chat"
STS_UID = "u-sts"
TEMPLATE = "chat-claim"
REFUSED = "0/4 nodes are available: 1 cannot allocate all claims, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."


def the_order(deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "chat", "namespace": "team", "uid": ORDER_UID}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return {"metadata": meta}


def statefulset(owner_uid: str = ORDER_UID) -> dict[str, Any]:
    owners = [{"kind": "InferenceService", "uid": owner_uid, "controller": True}]
    return {"metadata": {"name": "chat", "namespace": "team", "uid": STS_UID, "ownerReferences": owners}}


def template(created: str = "2026-12-01T10:00:20Z", owner_uid: str = ORDER_UID) -> dict[str, Any]:
    owners = [{"kind": "InferenceService", "uid": owner_uid, "controller": True}]
    return {
        "metadata": {"name": TEMPLATE, "namespace": "team", "creationTimestamp": created, "ownerReferences": owners}
    }


def waiting_pod(
    created: str = "2026-12-01T10:00:01Z",
    node: str | None = None,
    message: str = REFUSED,
    reason: str = "Unschedulable",
    sts_uid: str = STS_UID,
    terminating: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "chat-0",
        "namespace": "team",
        "uid": "p-1",
        "creationTimestamp": created,
        "ownerReferences": [{"kind": "StatefulSet", "uid": sts_uid, "controller": True}],
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T10:00:30Z"
    spec: dict[str, Any] = {"resourceClaims": [{"name": "accelerator", "resourceClaimTemplateName": TEMPLATE}]}
    if node:
        spec["nodeName"] = node
    condition = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending", "conditions": [condition]}}


def stale(pods: list[dict[str, Any]], **kw: Any) -> list[d.LostPod]:
    templates = {TEMPLATE: kw.pop("tmpl", template())}
    return d.pods_with_stale_claims(kw.pop("order", the_order()), kw.pop("sts", statefulset()), templates, pods)


def test_a_pod_refused_for_a_claim_of_a_replaced_template_is_deleted() -> None:
    (found,) = stale([waiting_pod()])
    assert (found.namespace, found.name, found.uid, found.node) == ("team", "chat-0", "p-1", "")
    assert found.note() == (
        "pod team/chat-0 deleted, its device claim was made from claim template chat-claim "
        "before a new plan replaced it"
    )


@pytest.mark.parametrize(
    "pod",
    [
        waiting_pod(created="2026-12-01T10:00:20Z"),  # made with the current template (same second)
        waiting_pod(created="2026-12-01T10:00:25Z"),  # made after it
        waiting_pod(node="gpu-t4-0"),  # scheduled: it runs, its claim is allocated
        waiting_pod(message="0/4 nodes are available: 4 Insufficient cpu."),  # not its claim
        waiting_pod(reason="SchedulingGated"),
        waiting_pod(terminating=True),
        waiting_pod(sts_uid="someone-else"),  # not the order's own StatefulSet's
    ],
)
def test_other_pods_are_left_alone(pod: dict[str, Any]) -> None:
    assert stale([pod]) == []


def test_nothing_without_the_orders_own_statefulset_and_template_or_while_it_is_deleted() -> None:
    assert stale([waiting_pod()], order=the_order(deleting=True)) == []
    assert stale([waiting_pod()], sts=statefulset(owner_uid="another-order")) == []
    assert stale([waiting_pod()], tmpl=template(owner_uid="another-order")) == []
    assert d.pods_with_stale_claims(the_order(), statefulset(), {}, [waiting_pod()]) == []
    assert d.pods_with_stale_claims(None, statefulset(), {TEMPLATE: template()}, [waiting_pod()]) == []


def test_a_lost_nodes_note_is_unchanged() -> None:
    lost = d.LostPod(namespace="team", name="chat-0", uid="p-1", node="gpu-1", why="node gpu-1 is deleted")
    assert lost.note() == "pod team/chat-0 force-deleted from node gpu-1, node gpu-1 is deleted"


def test_a_replica_gated_for_placement_with_a_claim_of_a_replaced_template_is_deleted() -> None:
    """A steered order's replica waits behind the replica-placement gate; the placer does not place a claim
    of a template replaced since (worker/observer/replica_placer.py), so the observer deletes the pod."""
    pod = waiting_pod()
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    assert stale([pod]) == []  # gated for another reason: left alone
    pod["spec"]["schedulingGates"] = [{"name": "ai.deckhouse.io/replica-placement"}]
    (found,) = stale([pod])
    assert (found.name, found.uid) == ("chat-0", "p-1")
    # Made after the template: the placer places it.
    assert stale([{**pod, "metadata": {**pod["metadata"], "creationTimestamp": "2026-12-01T10:00:30Z"}}]) == []
