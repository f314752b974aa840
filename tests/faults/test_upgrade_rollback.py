"""Upgrade and rollback while orders run: two builds of the module take over each other's workflows.

Real: the suite's control plane, its dev server, the stand-in runtimes, and ``ai-inference worker`` /
``ai-inference watch`` of two builds — the previous release (a commit of this repository extracted
with ``git archive``, tests/upgrade/releases.py) and the working tree. Orders are made and serve
under the previous release; the working tree's worker and observer take over while orders are made,
edited and deleted (the upgrade); then the previous release's take over again the same way (the
rollback). Before each takeover every running order workflow's history — made by the build going
away — is replayed by the build coming in (its own workflow code, its own process): the histories
are the frozen ones of this case, made fresh from both builds each run. Each takeover ends with the
suite's convergence check: every order Ready with its edit reconciled, the deleted gone, one workflow
each, no workflow Failed, no serving order's endpoint lost, auth tokens unchanged. And restarts are
counted: a replica of an order that was neither edited nor deleted and whose placement stayed must
be the same pod after the takeover (admin guide, "Upgrading the module": the module's own changes
of the pod template reach new replicas only); printed, and asserted for the upgrade (a rollback runs
the previous release's rules).
See docs/upgrade.md for the discipline that keeps this green.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from temporalio.client import WorkflowHistory

from activities.builders.common import ANNOTATION_PLACEMENT
from tests.e2e.stand import auth_token
from tests.faults.churn import SMALL_ORDER_COUNT, FaultStand, ServingWatch, converge
from tests.upgrade.releases import Release, previous_release, working_tree
from tests.upgrade.takeover import replay_on, switch
from worker.observer.decisions import running_order_query


async def _histories(fs: FaultStand) -> list[WorkflowHistory]:
    running = fs.client.list_workflows(running_order_query(fs.task_queue))
    handles = [fs.client.get_workflow_handle(wf.id) async for wf in running]
    return [await handle.fetch_history() for handle in handles]


def _replicas(fs: FaultStand, names: list[str]) -> dict[str, tuple[str | None, set[str]]]:
    """Order -> (its StatefulSet's placement annotation, the uids of its live pods)."""
    out: dict[str, tuple[str | None, set[str]]] = {}
    for name in names:
        try:
            sts = fs.stand.apps.read_namespaced_stateful_set(name, fs.stand.namespace)
        except Exception:  # gone (deleted meanwhile): not counted
            continue
        placement = (sts.spec.template.metadata.annotations or {}).get(ANNOTATION_PLACEMENT)
        pods = fs.stand.core.list_namespaced_pod(
            fs.stand.namespace, label_selector=f"ai.deckhouse.io/inference-service={name}"
        ).items
        out[name] = (placement, {p.metadata.uid for p in pods if not p.metadata.deletion_timestamp})
    return out


def _restarts(fs: FaultStand, before: dict[str, tuple[str | None, set[str]]]) -> tuple[int, int, list[str]]:
    """(replicas restarted, replicas counted, which) among orders neither edited nor deleted whose
    placement stayed: a pod of ``before`` that is no longer there was restarted."""
    kept = [name for name in before if name not in fs.edited and name not in fs.deleted]
    after = _replicas(fs, kept)
    restarted: list[str] = []
    counted = 0
    for name in kept:
        placement, uids = before[name]
        if name not in after or after[name][0] != placement:
            continue  # a placement change may rebuild: not a restart the guide rules out
        counted += len(uids)
        restarted += [f"{name}/{uid}" for uid in sorted(uids - after[name][1])]
    return len(restarted), counted, restarted


async def _take_over(fs: FaultStand, release: Release, names: list[str], tmp_path: Path, step: str) -> float:
    """``release`` takes over while ``names`` are made, one serving order is edited and one deleted;
    returns the seconds to converge after the takeover."""
    histories = await _histories(fs)
    failures = await asyncio.to_thread(replay_on, release, histories, tmp_path / step)
    assert not failures, f"{step}: histories of the running workflows do not replay on {release.short}: {failures}"
    print(f"\n{step}: {len(histories)} running order workflows replay on {release.short}")
    serving = sorted(fs.live)
    watch = ServingWatch(fs)
    await asyncio.to_thread(watch.note, serving)
    for name in serving:
        fs.tokens[name] = await asyncio.to_thread(auth_token, fs.stand, f"{name}-auth")

    async def takeover() -> None:
        await asyncio.to_thread(switch, fs, release)

    async def orders_change() -> None:
        for i, name in enumerate(names):
            await asyncio.to_thread(fs.create, name)
            if i == 0:
                await asyncio.to_thread(fs.edit, serving[0])
            elif i == 1:
                await asyncio.to_thread(fs.delete, serving[-1])
            await asyncio.sleep(1)

    replicas = await asyncio.to_thread(_replicas, fs, serving)
    started = time.monotonic()
    await watch.during(asyncio.gather(takeover(), orders_change()))
    seconds = await converge(fs)
    print(f"{step} to {release.short}: converged {seconds:.1f} s after ({time.monotonic() - started:.0f} s in all)")
    restarted, counted, which = await asyncio.to_thread(_restarts, fs, replicas)
    print(f"{step} to {release.short}: {restarted} of {counted} serving replicas restarted {which}")
    if release.commit == working_tree().commit:
        assert counted > 0, f"{step}: no serving replica left to count"
        assert restarted == 0, f"{step}: serving replicas restarted by the module's own changes: {which}"
    return seconds


async def test_upgrade_then_rollback_while_orders_run(fault_stand: FaultStand, tmp_path: Path) -> None:
    fs = fault_stand
    previous, current = await asyncio.to_thread(previous_release), working_tree()
    print(f"\nprevious release {previous.commit} ({previous.python}); next release: the working tree")
    # Three at least: one serving order is edited and one deleted at each takeover, one is left to count.
    half = max(3, SMALL_ORDER_COUNT // 2)
    await asyncio.to_thread(switch, fs, previous)
    first = [f"before-{i}" for i in range(half)]
    for name in first:
        await asyncio.to_thread(fs.create, name)
    await fs.all_ready(first, timeout=240)

    await _take_over(fs, current, [f"upgrade-{i}" for i in range(half)], tmp_path, "upgrade")
    await _take_over(fs, previous, [f"rollback-{i}" for i in range(half)], tmp_path, "rollback")
    # Forward again: what the previous release did since replays on the next one.
    failures = await asyncio.to_thread(replay_on, current, await _histories(fs), tmp_path / "forward")
    assert not failures, f"histories made by {previous.short} do not replay on the working tree: {failures}"
    logs = fs.processes.log_text()
    assert "nondeterminism" not in logs.lower(), logs[-3000:]
