"""The stand-in runtime over real HTTP: the OpenAI routes, bearer auth as vLLM does it, failure injection, stop."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devstack.standins.runtime import GUARDED_PREFIXES, RuntimeProcess, StandInRuntime, embed, guarded, resolve_token

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOKEN = "standin-token-3f9a0c1d-do-not-log"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def secured() -> Iterator[StandInRuntime]:
    with StandInRuntime(MODEL, token=TOKEN) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def open_runtime() -> Iterator[StandInRuntime]:
    with StandInRuntime(MODEL) as runtime:
        yield runtime


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def test_models_lists_the_served_model(secured: StandInRuntime, client: httpx.Client) -> None:
    response = client.get(f"{secured.url}/v1/models", headers=AUTH)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert [card["id"] for card in body["data"]] == [MODEL]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["none", "wrong", "no-scheme", "basic"],
)
def test_v1_routes_need_the_bearer_token(
    secured: StandInRuntime, client: httpx.Client, headers: dict[str, str]
) -> None:
    assert client.get(f"{secured.url}/v1/models", headers=headers).status_code == 401
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    response = client.post(f"{secured.url}/v1/chat/completions", json=chat, headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": "Unauthorized"}
    assert TOKEN not in response.text


def test_health_and_version_are_open_like_vllm(secured: StandInRuntime, client: httpx.Client) -> None:
    assert client.get(f"{secured.url}/health").status_code == 200
    assert client.get(f"{secured.url}/ping").status_code == 200
    assert client.get(f"{secured.url}/version").json() == {"version": "0.0.0-standin"}
    assert "vllm:num_requests_waiting" in client.get(f"{secured.url}/metrics").text


def test_the_key_guards_only_vllms_path_prefixes() -> None:
    # vLLM's middleware: str.startswith on these four, nothing else.
    assert GUARDED_PREFIXES == ("/v1", "/v2", "/inference", "/cohere")
    for path in ("/v1", "/v1/models", "/v1x", "/v2/rerank", "/inference/v1/generate", "/cohere/v2/rerank"):
        assert guarded(path), path
    for path in ("/", "/rerank", "/score", "/tokenize", "/pooling", "/classify", "/pause", "/metrics", "/health"):
        assert not guarded(path), path


@pytest.mark.parametrize("path", ["/v1/nowhere", "/v2/nowhere", "/inference/nowhere", "/cohere/nowhere", "/v1x"])
def test_any_guarded_path_answers_401_before_routing_like_vllm(
    secured: StandInRuntime, client: httpx.Client, path: str
) -> None:
    assert client.get(f"{secured.url}{path}").status_code == 401
    assert client.post(f"{secured.url}{path}", json={}).status_code == 401
    # With the key the request reaches routing, where nothing lives.
    assert client.get(f"{secured.url}{path}", headers=AUTH).status_code == 404
    # vLLM lets OPTIONS through unauthenticated (CORS preflight).
    assert client.options(f"{secured.url}{path}").status_code != 401


def test_unguarded_inference_routes_serve_anyone_like_vllm(secured: StandInRuntime, client: httpx.Client) -> None:
    """What vLLM serves without the key, the stand-in serves without it too: the module's guard must
    keep these out of reach (the Ingress publishes /v1 only), not the runtime."""
    rerank = {"model": MODEL, "query": "capital of france", "documents": ["paris is the capital of france"]}
    assert client.post(f"{secured.url}/rerank", json=rerank).status_code == 200
    assert client.post(f"{secured.url}/v1/rerank", json=rerank).status_code == 401
    assert client.post(f"{secured.url}/v2/rerank", json=rerank).status_code == 401
    score = {"model": MODEL, "text_1": "capital of france", "text_2": ["paris is the capital of france", "bananas"]}
    answer = client.post(f"{secured.url}/score", json=score)
    assert answer.status_code == 200
    assert [item["index"] for item in answer.json()["data"]] == [0, 1]
    assert answer.json()["data"][0]["score"] > answer.json()["data"][1]["score"]
    assert client.post(f"{secured.url}/v1/score", json=score).status_code == 401
    assert client.post(f"{secured.url}/v1/score", json=score, headers=AUTH).json() == answer.json()
    tokens = client.post(f"{secured.url}/tokenize", json={"model": MODEL, "prompt": "hello there world"})
    assert tokens.status_code == 200
    assert tokens.json()["count"] == 3 == len(tokens.json()["tokens"])
    assert client.post(f"{secured.url}/tokenize", json={"prompt": 3}).status_code == 400
    assert client.post(f"{secured.url}/score", json={"text_1": "q"}).status_code == 400


def test_no_token_configured_means_no_auth(open_runtime: StandInRuntime, client: httpx.Client) -> None:
    assert client.get(f"{open_runtime.url}/v1/models").status_code == 200


def test_chat_completion_is_deterministic(secured: StandInRuntime, client: httpx.Client) -> None:
    request = {
        "model": MODEL,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ping"}],
    }
    first = client.post(f"{secured.url}/v1/chat/completions", json=request, headers=AUTH)
    second = client.post(f"{secured.url}/v1/chat/completions", json=request, headers=AUTH)
    assert first.status_code == 200
    assert first.content == second.content
    body = first.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == MODEL
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert "ping" in choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]


def test_chat_streams_server_sent_events(secured: StandInRuntime, client: httpx.Client) -> None:
    request = {"model": MODEL, "messages": [{"role": "user", "content": "ping"}], "stream": True}
    with client.stream("POST", f"{secured.url}/v1/chat/completions", json=request, headers=AUTH) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)
    assert "ping" in text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_unknown_model_is_404_like_vllm(secured: StandInRuntime, client: httpx.Client) -> None:
    request = {"model": "other/model", "messages": [{"role": "user", "content": "x"}]}
    response = client.post(f"{secured.url}/v1/chat/completions", json=request, headers=AUTH)
    assert response.status_code == 404
    assert "other/model" in response.json()["message"]


def test_bad_requests_are_400(secured: StandInRuntime, client: httpx.Client) -> None:
    url = f"{secured.url}/v1/chat/completions"
    assert client.post(url, content=b"not json", headers=AUTH).status_code == 400
    assert client.post(url, json=[1, 2], headers=AUTH).status_code == 400
    assert client.post(url, json={"messages": []}, headers=AUTH).status_code == 400
    assert client.post(f"{secured.url}/v1/embeddings", json={"input": 3}, headers=AUTH).status_code == 400
    assert client.post(f"{secured.url}/v1/rerank", json={"query": "q"}, headers=AUTH).status_code == 400


def test_embeddings_are_deterministic_unit_vectors(secured: StandInRuntime, client: httpx.Client) -> None:
    request = {"model": MODEL, "input": ["alpha", "beta", "alpha"]}
    body = client.post(f"{secured.url}/v1/embeddings", json=request, headers=AUTH).json()
    vectors = [item["embedding"] for item in body["data"]]
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert vectors[0] == vectors[2] != vectors[1]
    assert len(vectors[0]) == 8
    assert math.isclose(math.sqrt(sum(v * v for v in vectors[0])), 1.0, abs_tol=1e-4)
    single = client.post(f"{secured.url}/v1/embeddings", json={"input": "alpha"}, headers=AUTH).json()
    assert single["data"][0]["embedding"] == vectors[0] == embed("alpha", 8)
    tokens = client.post(f"{secured.url}/v1/embeddings", json={"input": [1, 2, 3]}, headers=AUTH)
    assert tokens.status_code == 200


def test_rerank_orders_documents_by_overlap(secured: StandInRuntime, client: httpx.Client) -> None:
    request = {
        "model": MODEL,
        "query": "what is the capital of france",
        "documents": ["bananas are yellow", "paris is the capital of france", {"text": "france is in europe"}],
        "top_n": 2,
    }
    for path in ("/v1/rerank", "/rerank"):
        body = client.post(f"{secured.url}{path}", json=request, headers=AUTH).json()
        assert [r["index"] for r in body["results"]] == [1, 2]
        scores = [r["relevance_score"] for r in body["results"]]
        assert scores == sorted(scores, reverse=True)
        assert body["results"][0]["document"] == {"text": "paris is the capital of france"}


def test_injected_failure_and_recovery_in_thread(client: httpx.Client) -> None:
    with StandInRuntime(MODEL, token=TOKEN) as runtime:
        runtime.fail()
        assert client.get(f"{runtime.url}/v1/models", headers=AUTH).status_code == 503
        assert client.get(f"{runtime.url}/health").status_code == 503
        runtime.recover()
        assert client.get(f"{runtime.url}/v1/models", headers=AUTH).status_code == 200
        # The admin endpoint does the same over HTTP, with any status.
        assert client.post(f"{runtime.url}/admin/fail", json={"status": 500}).json() == {"failing": 500}
        assert client.get(f"{runtime.url}/v1/models", headers=AUTH).status_code == 500
        stats = client.get(f"{runtime.url}/admin/stats").json()
        assert stats["failing"] == 500
        assert stats["requests"]["models"] >= 3
        client.post(f"{runtime.url}/admin/recover")
        assert client.get(f"{runtime.url}/v1/models", headers=AUTH).status_code == 200
    # Stopped: nothing answers on the port any more.
    with pytest.raises(httpx.TransportError):
        client.get(f"{runtime.url}/v1/models", timeout=1)


def test_fail_file_makes_the_api_answer_503(tmp_path: Path, client: httpx.Client) -> None:
    flag = tmp_path / "fail"
    with StandInRuntime(MODEL, fail_file=flag) as runtime:
        assert client.get(f"{runtime.url}/v1/models").status_code == 200
        flag.touch()
        assert client.get(f"{runtime.url}/v1/models").status_code == 503
        flag.unlink()
        assert client.get(f"{runtime.url}/v1/models").status_code == 200


def test_config_repr_hides_the_token() -> None:
    runtime = StandInRuntime(MODEL, token=TOKEN)
    assert TOKEN not in repr(runtime.config)


def test_resolve_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert resolve_token(token_file, None) == TOKEN
    monkeypatch.setenv("SOME_KEY", "from-env")
    assert resolve_token(None, "SOME_KEY") == "from-env"
    assert resolve_token(token_file, "SOME_KEY") == TOKEN
    assert resolve_token(None, None) is None
    assert resolve_token(None, "UNSET_VARIABLE_XYZ") is None
    (tmp_path / "empty").write_text("")
    with pytest.raises(ValueError, match="is empty"):
        resolve_token(tmp_path / "empty", None)


def test_subprocess_runtime_auth_failure_stop_and_restart(tmp_path: Path, client: httpx.Client) -> None:
    flag = tmp_path / "fail"
    with RuntimeProcess(MODEL, token=TOKEN, fail_file=flag, runtime_version="0.33.0") as process:
        url = process.url
        assert client.get(f"{url}/v1/models").status_code == 401
        assert client.get(f"{url}/v1/models", headers=AUTH).json()["data"][0]["id"] == MODEL
        assert client.get(f"{url}/version").json() == {"version": "0.33.0"}
        process.fail()
        assert client.get(f"{url}/v1/models", headers=AUTH).status_code == 503
        process.recover()
        flag.touch()
        assert client.get(f"{url}/v1/models", headers=AUTH).status_code == 503
        flag.unlink()
        process.stop()
        assert not process.running
        with pytest.raises(httpx.TransportError):
            client.get(f"{url}/v1/models", headers=AUTH, timeout=1)
        process.restart()
        assert process.url == url  # back on the same port
        assert client.get(f"{url}/v1/models", headers=AUTH).status_code == 200
        # The token is handed over in a file and never written to the log or the command line.
        assert TOKEN not in process.log_text
        assert "auth on" in process.log_text


def test_subprocess_token_file(tmp_path: Path, client: httpx.Client) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with RuntimeProcess(MODEL, token_file=token_file) as process:
        assert client.get(f"{process.url}/v1/models").status_code == 401
        assert client.get(f"{process.url}/v1/models", headers=AUTH).status_code == 200
