"""What one order workflow costs the worker to create, in the two sandboxes ``worker.worker`` knows.

    .venv/bin/python -m benchmarks.workflow_instance [--instances 300]

The worker creates a workflow instance for each new order and for each order it replays after
evicting it from its cache (``worker.cachedWorkflows``). With the workflow modules isolated, the
sandbox imports ``workflows/order.py`` afresh for each; passed through (the module's worker), it
imports it once. Prints milliseconds and KiB of resident memory per instance (the instances are
kept, as the cache keeps them) for both, and their ratio, measured in the same run. Run it with
bytecode compiled (``python -m compileall workflows``), as the image installs the wheel.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
from typing import Any

import temporalio.converter
import temporalio.workflow
from temporalio.api.common.v1 import Payloads
from temporalio.api.failure.v1 import Failure
from temporalio.worker import WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox._runner import _fake_info

from benchmarks.scale import compile_bytecode, rss_mib
from worker.worker import workflow_runner
from workflows.order import OrderWorkflow


def details() -> WorkflowInstanceDetails:
    converter = temporalio.converter.DataConverter.default
    return WorkflowInstanceDetails(
        payload_converter_factory=converter._new_payload_converter,
        failure_converter_class=converter.failure_converter_class,
        interceptor_classes=[],
        defn=temporalio.workflow._Definition.must_from_class(OrderWorkflow),
        info=_fake_info,
        randomness_seed=-1,
        extern_functions={},
        disable_eager_activity_execution=False,
        worker_level_failure_exception_types=[],
        patch_activation_callback=None,
        last_completion_result=Payloads(),
        last_failure=Failure(),
    )


async def per_instance(isolate: bool, count: int) -> tuple[float, float]:
    """(ms, KiB) per order workflow instance created by the worker's runner."""
    runner = workflow_runner(isolate_workflow_modules=isolate)
    runner.create_instance(details())  # the first pays for imports both ways
    kept: list[Any] = []
    gc.collect()
    before = rss_mib()[0]
    started = time.perf_counter()
    for _ in range(count):
        kept.append(runner.create_instance(details()))
    elapsed = time.perf_counter() - started
    gc.collect()
    return elapsed / count * 1000, (rss_mib()[0] - before) * 1024 / count


def measured(isolate: bool, count: int) -> tuple[float, float]:
    """``per_instance`` in a process of its own, so neither case reuses the other's freed memory."""
    mode = "isolated" if isolate else "shared"
    command = [sys.executable, "-m", "benchmarks.workflow_instance", "--instances", str(count), "--one", mode]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    return figures["ms"], figures["kib"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=300)
    parser.add_argument("--one", choices=("isolated", "shared"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        ms, kib = asyncio.run(per_instance(args.one == "isolated", args.instances))
        print(json.dumps({"ms": ms, "kib": kib}))
        return 0
    compile_bytecode()
    isolated_ms, isolated_kib = measured(True, args.instances)
    shared_ms, shared_kib = measured(False, args.instances)
    print(f"== order workflow instances ({args.instances} of each, kept)")
    print(f"  workflow modules isolated (re-imported per workflow): {isolated_ms:.2f} ms, {isolated_kib:.0f} KiB")
    print(f"  workflow modules passed through (the module's worker): {shared_ms:.2f} ms, {shared_kib:.0f} KiB")
    print(f"  ratio: {isolated_ms / shared_ms:.1f}x the time, {isolated_kib / max(shared_kib, 1.0):.1f}x the memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
