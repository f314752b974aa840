"""Plan latency on the local cluster's simulated inventory: in-process against the planner service.

    python -m tests.planner_service.bench_plan [--calls 50]

Starts a local cluster (or reuses the one ``AI_INFERENCE_TEST_KUBECONFIG_DIR`` names), serves the
planner with uvicorn in a thread on a loopback port, and times the same LaunchPlanRequest
``--calls`` times each way, interleaved so both see the same machine load:

* in-process — ``plan_in_process``: ``read_inventory`` (four LIST calls) + ``plan_launch``;
* HTTP — ``HttpPlanner.request``: POST /api/v1/launch-plan, the service doing the same work, the
  caller's review cached (the steady state);
* HTTP, reviews uncached — a second service with ``cache_ttl=0``: a TokenReview and a
  SubjectAccessReview on every call.

Prints medians and 90th percentiles in milliseconds and the ratio HTTP / in-process of the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from activities.inventory import read_inventory
from activities.planner_client import HttpPlanner, plan_in_process
from devstack.cluster.launcher import LocalCluster
from inference_api.plan import LaunchPlanRequest, OrderFacts
from inference_api.settings import ModuleSettings
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner import PlanningRequest, plan_launch
from planner.service import KubernetesAccessReviewer, create_app
from tests.planner_service import running_service

REQUEST = LaunchPlanRequest(
    facts=OrderFacts(modelName="Qwen/Qwen2.5-32B-Instruct-AWQ"),
    acceleratorPolicy=AcceleratorPolicy(
        allowedSharingModes=[SharingMode.SHARED, SharingMode.DEDICATED],
        allowedPlacementTypes=[PlacementType.WHOLE_DEVICE, PlacementType.PARTITION],
        maxAcceleratorCount=1,
    ),
    className="default-llm",
    holder="bench/support-llm",
)


@contextlib.contextmanager
def cluster() -> Iterator[LocalCluster]:
    reuse = os.environ.get("AI_INFERENCE_TEST_KUBECONFIG_DIR")
    if reuse:
        found = LocalCluster(Path(reuse))
        if not found.is_up():
            sys.exit(f"AI_INFERENCE_TEST_KUBECONFIG_DIR={reuse}: no running cluster there")
        yield found
        return
    from devstack.cluster.build import CONTROL_PLANE_TOOLS, ensure_binaries

    with tempfile.TemporaryDirectory(prefix="bench-plan-") as state:
        started = LocalCluster(Path(state), binaries=ensure_binaries(CONTROL_PLANE_TOOLS))
        started.up(progress=lambda line: print(line, file=sys.stderr, flush=True))
        try:
            yield started
        finally:
            started.down()


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1]


def line(name: str, samples: list[float]) -> str:
    return f"  {name:<52} median {statistics.median(samples):7.1f} ms   p90 {p90(samples):7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    # The service logs a line per plan; the figures are the output here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    with cluster() as kube, kube.api_client("admin") as caller_api, kube.api_client("admin") as service_api:
        # The service has its own ApiClient, as the planner Deployment does.
        cached = create_app(lambda: read_inventory(service_api), KubernetesAccessReviewer(service_api))
        uncached = create_app(lambda: read_inventory(service_api), KubernetesAccessReviewer(service_api), cache_ttl=0)
        with running_service(cached) as url, running_service(uncached) as url_uncached:
            token = kube.token("admin")
            http = HttpPlanner(url, lambda: token, 30, ModuleSettings())
            http_uncached = HttpPlanner(url_uncached, lambda: token, 30, ModuleSettings())
            snapshot = read_inventory(caller_api)
            planning = PlanningRequest(**dict(REQUEST), inventory=snapshot)
            outcome = plan_in_process(REQUEST, caller_api)
            assert outcome == http.request(REQUEST) == http_uncached.request(REQUEST), "paths disagree"

            runs: dict[str, list[float]] = {k: [] for k in ("in", "read", "plan", "http", "uncached")}
            for _ in range(5):  # warm: connection pools, CEL verdicts, recipe tables
                plan_in_process(REQUEST, caller_api)
                http.request(REQUEST)
                http_uncached.request(REQUEST)
            for _ in range(args.calls):
                runs["in"].append(timed(lambda: plan_in_process(REQUEST, caller_api)))
                runs["http"].append(timed(lambda: http.request(REQUEST)))
                runs["uncached"].append(timed(lambda: http_uncached.request(REQUEST)))
                runs["read"].append(timed(lambda: read_inventory(caller_api)))
                runs["plan"].append(timed(lambda: plan_launch(planning)))
            http.close()
            http_uncached.close()

    plan = outcome.plan
    where = f"{plan.deviceClass} {plan.nodeName}/{','.join(plan.deviceNames)} {plan.sharePercent}%" if plan else "-"
    print(
        f"plan latency, simulated inventory ({len(snapshot.devices)} devices, {len(snapshot.deviceClasses)} "
        f"DeviceClasses), {args.calls} calls each; plan: {where}"
    )
    print(line("in-process (read_inventory + plan_launch)", runs["in"]))
    print(line("  of which read_inventory (4 LIST calls)", runs["read"]))
    print(line("  of which plan_launch", runs["plan"]))
    print(line("HTTP POST /api/v1/launch-plan (review cached)", runs["http"]))
    print(line("HTTP, TokenReview + SubjectAccessReview every call", runs["uncached"]))
    ratio = statistics.median(runs["http"]) / statistics.median(runs["in"])
    ratio_uncached = statistics.median(runs["uncached"]) / statistics.median(runs["in"])
    print(f"  ratio HTTP / in-process (medians): {ratio:.2f} (reviews uncached: {ratio_uncached:.2f})")


if __name__ == "__main__":
    main()
