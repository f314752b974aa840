"""Switching a fault stand's worker and observer between builds, and replaying its workflows on a build.

``switch(fs, release)``: the stand's ``ai-inference worker`` and ``ai-inference watch`` stopped and
started again from ``release`` (a rolling update whose new pods take over; the old pods are gone —
SIGKILL, the harshest way they go). ``replay_on(release, histories)``: the histories replayed by that
build's own workflow code (its ``worker.worker.WORKFLOWS``, its sandbox), in a process of its own.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import WorkflowHistory

from tests.e2e.stand import Processes
from tests.faults.churn import FaultStand
from tests.upgrade.releases import Release

REPLAY = """
import asyncio, json, os, sys
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from worker.worker import WORKFLOWS, workflow_runner

async def main():
    failures = []
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter, workflow_runner=workflow_runner())
    for path in sys.argv[1:]:
        body = json.loads(open(path).read())
        history = WorkflowHistory.from_json(body["workflowId"], body["history"])
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures.append(f"{history.workflow_id}: {result.replay_failure!r}"[:2000])
    print(json.dumps({"replayed": len(sys.argv) - 1, "failures": failures}), flush=True)

asyncio.run(main())
# The answer is out. The SDK's core threads can still be releasing the GIL while the interpreter
# finalizes ("Fatal Python error: PyGILState_Release ... finalizing", seen in CI): a crash after the
# work that would read as a failed replay. Exit without finalizing.
os._exit(0)
"""


@dataclass
class ReleaseProcesses(Processes):
    """``Processes`` of a given build: its Python, its tree first on the path, its tree as the cwd."""

    release: Release | None = None

    def start(self, command: str, *args: str) -> subprocess.Popen[bytes]:
        assert self.release is not None
        log = (self.logs / f"{command}-{len(self.started)}-{self.release.short}.log").open("wb")
        process = subprocess.Popen(
            [str(self.release.python), "-m", "worker.cli", command, "--kubeconfig", str(self.kubeconfig), *args],
            cwd=self.release.tree,
            env=self.release.env(self.env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.started.append(process)
        self.commands.append(command)
        return process


def switch(fs: FaultStand, release: Release) -> None:
    """The stand's worker and observer replaced by ``release``'s (the same settings, the same lists of
    processes: the fixture's teardown stops them all)."""
    fs.kill_worker()
    fs.kill_observer()
    fs.processes = ReleaseProcesses(
        fs.processes.kubeconfig,
        fs.processes.env,
        fs.processes.logs,
        started=fs.processes.started,
        commands=fs.processes.commands,
        release=release,
    )
    fs.start_worker()
    fs.start_observer()


def replay_on(release: Release, histories: list[WorkflowHistory], directory: Path) -> list[str]:
    """The replay failures of ``histories`` on ``release``'s workflow code (empty: all replayed)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, history in enumerate(histories):
        path = directory / f"{index}.json"
        path.write_text(json.dumps({"workflowId": history.workflow_id, "history": json.loads(history.to_json())}))
        paths.append(str(path))
    done = release.run_python(REPLAY, *paths)
    assert done.returncode == 0, f"the replay on {release.short} did not run: {done.stderr[-3000:]}"
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["replayed"] == len(histories)
    failures: list[str] = outcome["failures"]
    return failures
