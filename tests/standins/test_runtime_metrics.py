"""The stand-in runtime's /metrics: vLLM's series under vLLM's names, counted from what it served."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from devstack.standins.runtime import StandInRuntime

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOKEN = "standin-metrics-token-do-not-log"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

VLLM_SERIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
)


@pytest.fixture
def runtime() -> Iterator[StandInRuntime]:
    with StandInRuntime(MODEL, token=TOKEN) as r:
        yield r


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def _samples(client: httpx.Client, url: str) -> dict[str, list[Sample]]:
    response = client.get(f"{url}/metrics")  # open, as in vLLM: no token
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def _value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    (match,) = [s for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    return match.value


def test_metrics_serve_every_vllm_series_by_name(runtime: StandInRuntime, client: httpx.Client) -> None:
    text = client.get(f"{runtime.url}/metrics").text
    for series in VLLM_SERIES:
        assert series in text, series
    samples = _samples(client, runtime.url)
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_count",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_sum",
    ):
        assert name in samples, name
        assert all(s.labels["model_name"] == MODEL for s in samples[name])
    assert _value(samples, "vllm:request_success_total", finished_reason="stop") == 0
    assert _value(samples, "vllm:e2e_request_latency_seconds_bucket", le="+Inf") == 0


def test_served_requests_are_counted(runtime: StandInRuntime, client: httpx.Client) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]}
    answer = client.post(f"{runtime.url}/v1/chat/completions", json=chat, headers=AUTH).json()
    embedded = client.post(f"{runtime.url}/v1/embeddings", json={"input": "one two three"}, headers=AUTH).json()
    samples = _samples(client, runtime.url)
    prompt = answer["usage"]["prompt_tokens"] + embedded["usage"]["prompt_tokens"]
    assert _value(samples, "vllm:prompt_tokens_total") == prompt
    assert _value(samples, "vllm:generation_tokens_total") == answer["usage"]["completion_tokens"]
    assert _value(samples, "vllm:request_success_total", finished_reason="stop") == 2
    for histogram in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        assert _value(samples, f"{histogram}_count") == 2
        assert _value(samples, f"{histogram}_bucket", le="+Inf") == 2
        buckets = [s.value for s in samples[f"{histogram}_bucket"]]
        assert buckets == sorted(buckets)  # cumulative


def test_a_wrong_token_is_refused_and_not_counted(runtime: StandInRuntime, client: httpx.Client) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    for headers in ({"Authorization": "Bearer not-the-token"}, {"Authorization": f"Bearer {TOKEN}x"}, {}):
        response = client.post(f"{runtime.url}/v1/chat/completions", json=chat, headers=headers)
        assert response.status_code == 401
        assert TOKEN not in response.text
    samples = _samples(client, runtime.url)
    assert _value(samples, "vllm:request_success_total", finished_reason="stop") == 0
    assert _value(samples, "vllm:prompt_tokens_total") == 0
    assert TOKEN not in client.get(f"{runtime.url}/metrics").text


def test_load_gauges_are_set_from_outside(runtime: StandInRuntime, client: httpx.Client) -> None:
    load = {"running": 3, "waiting": 7, "kv_cache_usage": 0.42}
    assert client.post(f"{runtime.url}/admin/load", json=load).json() == load
    samples = _samples(client, runtime.url)
    assert _value(samples, "vllm:num_requests_running") == 3
    assert _value(samples, "vllm:num_requests_waiting") == 7
    assert _value(samples, "vllm:kv_cache_usage_perc") == pytest.approx(0.42)
    # The key named after vLLM's gauge before 0.33 is still accepted.
    assert client.post(f"{runtime.url}/admin/load", json={"gpu_cache_usage": 0.5}).json()["kv_cache_usage"] == 0.5
    assert _value(_samples(client, runtime.url), "vllm:kv_cache_usage_perc") == pytest.approx(0.5)
    assert client.post(f"{runtime.url}/admin/load", json={"waiting": "many"}).status_code == 400
    assert client.post(f"{runtime.url}/admin/load", json=[1]).status_code == 400


def test_metrics_answer_the_injected_failure(runtime: StandInRuntime, client: httpx.Client) -> None:
    runtime.fail(503)
    try:
        assert client.get(f"{runtime.url}/metrics").status_code == 503
    finally:
        runtime.recover()
    assert client.get(f"{runtime.url}/metrics").status_code == 200
