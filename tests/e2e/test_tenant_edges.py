"""Issue 33's attacks on an order's edges, on the real control plane and the real Temporal behind the
real terminator, with the module's real worker and watcher:

* a run of an order's workflow started with ``deleting=True`` (what a holder of a module certificate
  did): the workload and the finalizer survive, a ``DeleteRefused`` Event names the run, the order
  is Ready again by itself;
* an order whose auth Secret's token is emptied is not Ready (``AuthTokenInvalid``); a new Secret
  makes it Ready, with the new token only (the front's own fail-closed refusal of an empty token is
  tested on the real front process in tests/builders/test_endpoint_guard.py);
* an order whose auth Secret's token is edited (a token the running replicas never read) says so
  (``AuthTokenInvalid``, what to do), and is Ready on the new token once its replicas restart;
* two orders whose External hosts collide: the first keeps its host, the second is refused
  ``HostNameTaken`` with nothing published; a platform host (``exposure.reservedHosts``) is refused.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from kubernetes.client import NetworkingV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.common import WorkflowIDConflictPolicy

from devstack.standins.fleet import PROBE_URL_ANNOTATION
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import MakeStand, Stand
from workflows.order import OrderWorkflow
from workflows.order_state import OrderState

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

MODEL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B-Instruct"}}


def events_of(stand: Stand, name: str, reason: str) -> list[Any]:
    listed = stand.core.list_namespaced_event(
        stand.namespace, field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return list(listed.items)


async def test_a_run_started_to_delete_a_live_order_deletes_nothing_and_the_order_heals(stand: Stand) -> None:
    stand.create_order("victim", MODEL)
    await stand.until_phase("victim", "Ready")
    sts_uid = stand.apps.read_namespaced_stateful_set("victim", stand.namespace).metadata.uid
    secret_uid = stand.core.read_namespaced_secret("victim-auth", stand.namespace).metadata.uid
    handle = stand.workflow("victim")
    state: OrderState = await handle.query(OrderWorkflow.query_state)
    # The attack: a new run of the order's workflow whose state says the order is being deleted.
    forged = await stand.client.start_workflow(
        OrderWorkflow.run,
        state.model_copy(update={"deleting": True}),
        id=handle.id,
        task_queue=stand.settings.temporal.taskQueue,
        id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
    )
    await stand.until(lambda: bool(events_of(stand, "victim", "DeleteRefused")), timeout=60, what="DeleteRefused")
    event = events_of(stand, "victim", "DeleteRefused")[0]
    assert event.type == "Warning"
    assert forged.result_run_id is not None
    assert forged.result_run_id in event.message
    # Nothing went: the same StatefulSet and auth Secret, the finalizer; the order serves again.
    assert stand.apps.read_namespaced_stateful_set("victim", stand.namespace).metadata.uid == sts_uid
    assert stand.core.read_namespaced_secret("victim-auth", stand.namespace).metadata.uid == secret_uid
    order = stand.order("victim")
    assert order is not None
    assert order["metadata"].get("finalizers")
    assert not order["metadata"].get("deletionTimestamp")
    await stand.until_phase("victim", "Ready", timeout=60)
    ready = stand.condition("victim", "Ready")
    assert ready is not None
    assert ready["reason"] != "Deleting"
    # And a real delete still finishes.
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", "victim")
    await stand.until(lambda: stand.order("victim") is None, timeout=60, what="the order deleted")


def endpoint_of(stand: Stand, name: str) -> str:
    service = stand.core.read_namespaced_service(name, stand.namespace)
    return str(service.metadata.annotations[PROBE_URL_ANNOTATION]).rstrip("/")


async def test_an_emptied_token_makes_the_order_not_ready_and_a_new_secret_serves(stand: Stand) -> None:
    # Before, the probe went without a token and the order stayed Ready while its Secret said "".
    stand.create_order("emptied", MODEL)
    await stand.until_phase("emptied", "Ready")
    stand.core.patch_namespaced_secret("emptied-auth", stand.namespace, {"data": {"token": ""}})
    await stand.until_phase("emptied", "Pending", reason="AuthTokenInvalid", timeout=60)
    ready = stand.condition("emptied", "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "AuthTokenInvalid")
    assert "no usable token" in ready["message"]
    # The way out the FAQ gives: delete the Secret; the module makes a new token and the pods roll.
    old_uid = stand.core.read_namespaced_secret("emptied-auth", stand.namespace).metadata.uid
    stand.core.delete_namespaced_secret("emptied-auth", stand.namespace)
    await stand.until_phase("emptied", "Ready", timeout=120)
    renewed = stand.core.read_namespaced_secret("emptied-auth", stand.namespace)
    assert renewed.metadata.uid != old_uid
    token = base64.b64decode(renewed.data["token"]).decode()
    async with httpx.AsyncClient(timeout=5) as http:
        url = endpoint_of(stand, "emptied")
        assert (await http.get(f"{url}/v1/models")).status_code == 401
        assert (await http.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {token}"})).status_code == 200


async def test_an_edited_token_is_named_on_the_order_until_the_replicas_restart_on_it(stand: Stand) -> None:
    # Before, the probe's 401 with the Secret's new token was a nameless health failure.
    stand.create_order("edited", MODEL)
    await stand.until_phase("edited", "Ready")
    old = base64.b64decode(stand.core.read_namespaced_secret("edited-auth", stand.namespace).data["token"]).decode()
    new = "an-edited-token-0f3b9a"
    encoded = base64.b64encode(new.encode()).decode()
    stand.core.patch_namespaced_secret("edited-auth", stand.namespace, {"data": {"token": encoded}})
    await stand.until_phase("edited", "Pending", reason="AuthTokenInvalid", timeout=90)
    ready = stand.condition("edited", "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "AuthTokenInvalid")
    assert "an edited token has not reached them yet" in ready["message"]
    assert "kubectl rollout restart statefulset/<order>" in ready["message"]
    assert new not in ready["message"]
    assert old not in ready["message"]
    url = endpoint_of(stand, "edited")
    async with httpx.AsyncClient(timeout=5) as http:
        # The replicas still hold the old token: what the order said.
        assert (await http.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {old}"})).status_code == 200
    # What the message says to do, as `kubectl rollout restart` does it: the replicas restart and read
    # the Secret again (the module's apply leaves the annotation alone: it is not its field).
    restarted = {"kubectl.kubernetes.io/restartedAt": "2026-12-04T00:00:00Z"}
    stand.apps.patch_namespaced_stateful_set(
        "edited", stand.namespace, {"spec": {"template": {"metadata": {"annotations": restarted}}}}
    )
    await stand.until_phase("edited", "Ready", timeout=120)
    url = endpoint_of(stand, "edited")
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {new}"})).status_code == 200
        assert (await http.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {old}"})).status_code == 401


async def test_colliding_hosts_the_first_order_keeps_its_host_and_the_second_is_refused(make_stand: MakeStand) -> None:
    # Hosts made from the name alone collide across namespaces, as {name}-{namespace} does for a-b in c
    # and a in b-c under the platform's public domain.
    overrides = {
        "exposure": {"domainTemplate": "{name}.shared.example.com", "reservedHosts": ["console.shared.example.com"]}
    }
    first, second = await make_stand(overrides), await make_stand(overrides)
    first.create_order("chat", MODEL)
    await first.until_phase("chat", "Ready")
    second.create_order("chat", MODEL)
    await second.until_phase("chat", "Pending", reason="HostNameTaken", timeout=90)
    refused = second.condition("chat", "WorkloadReady")
    assert refused is not None
    assert refused["reason"] == "HostNameTaken"
    assert "chat.shared.example.com is already the endpoint of another order" in refused["message"]
    assert first.namespace not in refused["message"]  # another tenant's order is never named
    with pytest.raises(ApiException) as missing:
        NetworkingV1Api(second.api).read_namespaced_ingress("chat", second.namespace)
    assert missing.value.status == 404  # nothing published for the second order
    # The first order is untouched and still serves on its host.
    await first.until_phase("chat", "Ready")
    assert first.status("chat")["endpoint"]["url"] == "https://chat.shared.example.com"
    # A platform host is refused the same way.
    first.create_order("console", MODEL)
    await first.until_phase("console", "Pending", reason="HostNameTaken", timeout=90)
    why = first.condition("console", "WorkloadReady")
    assert why is not None
    assert "reserved for the platform" in why["message"]


async def test_a_forged_plans_sizing_is_refused_and_the_order_heals_by_itself(stand: Stand) -> None:
    # Before, the order kept WorkloadReady=False (WorkloadRefused) after a forged run for as long as it
    # was watched: the run held the refused plan and waited for an edit that never came.
    stand.create_order("mended", MODEL)
    await stand.until_phase("mended", "Ready")
    sts_uid = stand.apps.read_namespaced_stateful_set("mended", stand.namespace).metadata.uid
    handle = stand.workflow("mended")
    state: OrderState = await handle.query(OrderWorkflow.query_state)
    assert state.plan is not None
    # Sizing the tables cannot judge: more CPU and memory than the planner gave (the seal catches it).
    forged_plan = state.plan.model_copy(update={"cpu": "64", "memory": "512Gi"})
    await stand.client.start_workflow(
        OrderWorkflow.run,
        state.model_copy(update={"plan": forged_plan, "dirty": True}),
        id=handle.id,
        task_queue=stand.settings.temporal.taskQueue,
        id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
    )

    def refused() -> bool:
        cond = stand.condition("mended", "WorkloadReady")
        return cond is not None and cond["reason"] == "WorkloadRefused"

    await stand.until(refused, timeout=60, what="the forged plan refused")
    cond = stand.condition("mended", "WorkloadReady")
    assert cond is not None
    assert "seal does not match" in cond["message"]
    assert "planned again from what the cluster says" in cond["message"]
    # Within a minute, by itself: planned again, applied, serving; the workload was never replaced.
    await stand.until(
        lambda: (stand.condition("mended", "WorkloadReady") or {}).get("status") == "True",
        timeout=60,
        what="WorkloadReady again",
    )
    await stand.until_phase("mended", "Ready", timeout=60)
    assert stand.apps.read_namespaced_stateful_set("mended", stand.namespace).metadata.uid == sts_uid
    runtime = stand.apps.read_namespaced_stateful_set("mended", stand.namespace).spec.template.spec.containers
    assert all((c.resources.requests or {}).get("cpu") != "64" for c in runtime)
