"""Size and quantization from facts and names; the fallback estimates."""

from __future__ import annotations

import pytest

from inference_api.plan import OrderFacts
from planner.model_facts import (
    UNQUANTIZED,
    SizeSource,
    estimate_cpu,
    estimate_memory_gib,
    estimate_model_volume_gib,
    estimate_vram_mib,
    parameter_count_from_name,
    parse_parameter_count,
    parse_quantization,
    quantization_from_name,
    resolve_parameter_count,
    weights_gib,
)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("32B", 32_000_000_000),
        ("360M", 360_000_000),
        ("360m", 360_000_000),
        ("1.5B", 1_500_000_000),
        ("7b", 7_000_000_000),
        ("1T", 10**12),
        ("500K", 500_000),
        ("7000000000", 7_000_000_000),
        (" 14.7B ", 14_700_000_000),
        ("", None),
        ("big", None),
        ("7 billion", None),
        ("0B", None),
        (None, None),
    ],
)
def test_parse_parameter_count(text: str | None, count: int | None) -> None:
    assert parse_parameter_count(text) == count


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("Qwen/Qwen2.5-32B-Instruct-AWQ", 32 * 10**9),
        ("qwen2-5-32b-instruct-awq", 32 * 10**9),
        ("HuggingFaceTB/SmolLM2-360M-Instruct", 360 * 10**6),
        ("smollm2-360m", 360 * 10**6),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1_500_000_000),
        ("Qwen/Qwen2.5-0.5B-Instruct", 500_000_000),
        ("meta-llama/Llama-2-7b-chat-hf", 7 * 10**9),
        ("meta-llama/Llama-3.1-8B", 8 * 10**9),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 56 * 10**9),
        # The first size counts; "A3B" (active parameters) is not a size token.
        ("Qwen/Qwen3-30B-A3B", 30 * 10**9),
        ("facebook/opt-125m", 125 * 10**6),
        # No size token: context lengths, versions and letters are not sizes.
        ("intfloat/multilingual-e5-large", None),
        ("BAAI/bge-reranker-v2-m3", None),
        ("microsoft/Phi-3-mini-128k-instruct", None),
        ("mistralai/Mistral-Nemo-Instruct-2407", None),
        ("gpt2", None),
        ("Qwen/Qwen2.5-Instruct", None),
    ],
)
def test_parameter_count_from_name(name: str, count: int | None) -> None:
    assert parameter_count_from_name(name) == count


def test_size_ladder_fact_then_order_then_name() -> None:
    name = "Qwen/Qwen2.5-32B-Instruct"
    fact = resolve_parameter_count(OrderFacts(modelName=name, parameterCount="33B", orderParameterCount="34B"))
    assert fact is not None
    assert (fact.parameters, fact.source) == (33 * 10**9, SizeSource.FACT)
    order = resolve_parameter_count(OrderFacts(modelName=name, orderParameterCount="34B"))
    assert order is not None
    assert (order.parameters, order.source) == (34 * 10**9, SizeSource.ORDER)
    by_name = resolve_parameter_count(OrderFacts(modelName=name))
    assert by_name is not None
    assert (by_name.parameters, by_name.source) == (32 * 10**9, SizeSource.NAME)
    # An unreadable rung is skipped, not fatal.
    skipped = resolve_parameter_count(OrderFacts(modelName=name, parameterCount="huge"))
    assert skipped is not None
    assert skipped.source is SizeSource.NAME
    assert resolve_parameter_count(OrderFacts(modelName="org/no-size-here")) is None


@pytest.mark.parametrize(
    ("name", "method", "bpp"),
    [
        ("Qwen/Qwen2.5-32B-Instruct-AWQ", "awq", 0.5),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "gptq", 0.5),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "gptq", 1.0),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "fp8", 1.0),
        ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "fp8", 1.0),
        ("org/model-7b-int4", "int4", 0.5),
        ("org/model-7b-w4a16", "int4", 0.5),
        ("org/model-7b-w8a8", "int8", 1.0),
        ("org/model-7b-int8", "int8", 1.0),
        ("unsloth/llama-3-8b-bnb-4bit", "bitsandbytes", 0.5),
        ("nvidia/Llama-3.1-8B-Instruct-FP4", "fp4", 0.5),
        ("Qwen/Qwen2.5-7B-Instruct", "none", 2.0),
        ("qwen2-5-32b-instruct-awq", "awq", 0.5),
    ],
)
def test_quantization_from_name(name: str, method: str, bpp: float) -> None:
    q = quantization_from_name(name)
    assert (q.method, q.bytesPerParameter) == (method, bpp)


@pytest.mark.parametrize(
    ("fact", "method"),
    [
        ("AWQ", "awq"),
        ("awq", "awq"),
        ("gptq-int4", "gptq"),
        ("FP8", "fp8"),
        ("fp8_dynamic", "fp8"),
        ("bf16", "none"),
        ("float16", "none"),
        ("none", "none"),
        ("", "none"),
        ("INT4", "int4"),
        ("gguf-q4_k_m", "gguf-q4_k_m"),
    ],
)
def test_parse_quantization_fact(fact: str, method: str) -> None:
    q = parse_quantization(fact)
    assert q is not None
    assert q.method == method


def test_parse_quantization_absent() -> None:
    assert parse_quantization(None) is None
    assert not UNQUANTIZED.quantized


def test_fallback_estimates() -> None:
    awq = quantization_from_name("x-AWQ")
    # 32B at half a byte: 14.9 GiB of weights; x 1.2 + 1 GiB.
    assert weights_gib(32 * 10**9, awq) == pytest.approx(14.90, abs=0.01)
    assert estimate_vram_mib(32 * 10**9, awq) == 19335
    assert estimate_vram_mib(500_000_000, UNQUANTIZED) == 2169
    assert estimate_model_volume_gib(14.9) == 19
    assert estimate_model_volume_gib(0.0) == 2
    assert estimate_cpu(1) == "4"
    assert estimate_cpu(2) == "6"
    assert estimate_memory_gib(14.9) == 12
