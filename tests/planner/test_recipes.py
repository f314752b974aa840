"""The recipe tables: loading, validation, and which recipe a (family, model) gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from inference_api.plan import OrderFacts, RecipeSource
from inference_api.reasons import Reason
from inference_api.types import EndpointType
from planner.recipes import (
    COMPILED_FILE,
    FAMILIES_FILE,
    TAXONOMY_FILE,
    CompiledRecipe,
    RecipeBook,
    RecipeChoice,
    RecipeProblem,
    gpu_memory_utilization,
    load_recipe_book,
    render_args,
    render_recipe,
    resolve_recipe,
    shipped_recipes,
)

BOOK = load_recipe_book()


def resolve(model: str, family: str, *, fallback: bool = True, **facts: Any) -> RecipeChoice:
    resolution = resolve_recipe(BOOK, family, OrderFacts(modelName=model, **facts), fallback_enabled=fallback)
    assert resolution.failure is None, resolution.failure
    assert resolution.choice is not None
    return resolution.choice


def fail(model: str, family: str, *, fallback: bool = True, **facts: Any) -> tuple[RecipeProblem, str]:
    resolution = resolve_recipe(BOOK, family, OrderFacts(modelName=model, **facts), fallback_enabled=fallback)
    assert resolution.choice is None
    assert resolution.failure is not None
    return resolution.failure.problem, resolution.failure.message


# ------------------------------------------------------------------------ tables


def test_tables_load_once() -> None:
    assert load_recipe_book() is BOOK
    assert load_recipe_book() is load_recipe_book()
    assert BOOK.compiled.runtime.image == "vllm/vllm-openai:v0.33.0"


@pytest.mark.parametrize(
    ("family", "model"),
    [
        ("hopper", "Qwen/Qwen2.5-32B-Instruct-AWQ"),
        ("hopper", "Qwen/Qwen2.5-7B-Instruct"),
        ("hopper", "meta-llama/Llama-3.1-8B"),
        ("hopper", "intfloat/multilingual-e5-large"),
        ("hopper", "BAAI/bge-reranker-v2-m3"),
        ("hopper", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("turing", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("turing", "intfloat/multilingual-e5-large"),
        ("turing", "BAAI/bge-reranker-v2-m3"),
    ],
)
def test_shipped_recipes_have_three_branches(family: str, model: str) -> None:
    recipe = BOOK.compiled_for(family, model)
    assert recipe is not None
    assert set(recipe.branches) == {"latency", "throughput", "balance"}
    # The share sets --gpu-memory-utilization and the plan sets --tensor-parallel-size; no table may.
    for branch in recipe.branches.values():
        assert "--gpu-memory-utilization" not in branch.args
        assert "--tensor-parallel-size" not in branch.args


def test_every_turing_recipe_runs_eager_in_float16() -> None:
    for recipe in BOOK.compiled.recipes["turing"].values():
        for branch in recipe.branches.values():
            assert branch.args.get("--enforce-eager") is True
            assert branch.args.get("--dtype") == "float16"


@pytest.mark.parametrize(
    ("product", "family"),
    [
        ("NVIDIA H100 80GB HBM3", "hopper"),
        ("NVIDIA H200", "hopper"),
        ("Tesla T4", "turing"),
        ("NVIDIA A100-SXM4-80GB", "ampere"),
        ("NVIDIA A10G", "ampere"),
        ("NVIDIA L4", "ada"),
        ("NVIDIA L40S", "ada"),
        ("Tesla V100-SXM2-32GB", "volta"),
        ("NVIDIA B200", "blackwell"),
        ("Some Accelerator", None),
        (None, None),
    ],
)
def test_product_name_to_family(product: str | None, family: str | None) -> None:
    assert BOOK.platform.family_of(product) == family


def test_a_device_naming_its_family_wins_over_the_product() -> None:
    assert BOOK.hardware_family("Hopper", "Tesla T4") == "hopper"
    assert BOOK.hardware_family(None, "Tesla T4") == "turing"


@pytest.mark.parametrize(
    ("model", "endpoint", "family"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", EndpointType.CHAT, "chat"),
        ("intfloat/multilingual-e5-large", EndpointType.CHAT, "embedding"),
        ("BAAI/bge-m3", EndpointType.CHAT, "embedding"),
        ("BAAI/bge-reranker-v2-m3", EndpointType.CHAT, "rerank"),
        ("Alibaba-NLP/gte-large-en-v1.5", EndpointType.CHAT, "embedding"),
        # A catalog fact about the contract names the family.
        ("org/some-model", EndpointType.EMBEDDINGS, "embedding"),
        ("org/some-model", EndpointType.RERANK, "rerank"),
    ],
)
def test_taxonomy_family(model: str, endpoint: EndpointType, family: str) -> None:
    assert BOOK.taxonomy.family_for(OrderFacts(modelName=model, endpointType=endpoint)) == family


# ------------------------------------------------------------- table validation


def copy_tables(tmp_path: Path, **edits: Any) -> Path:
    for name in (COMPILED_FILE, TAXONOMY_FILE, FAMILIES_FILE):
        data = yaml.safe_load((shipped_recipes() / name).read_text())
        if name in edits:
            edits[name](data)
        (tmp_path / name).write_text(yaml.safe_dump(data))
    return tmp_path


def test_copied_tables_load(tmp_path: Path) -> None:
    book = load_recipe_book(copy_tables(tmp_path))
    assert isinstance(book, RecipeBook)
    assert book is not BOOK


def test_a_recipe_without_latency_branch_is_refused(tmp_path: Path) -> None:
    def drop(data: dict[str, Any]) -> None:
        del data["recipes"]["hopper"]["Qwen/Qwen2.5-7B-Instruct"]["branches"]["latency"]

    with pytest.raises(ValidationError, match="latency"):
        load_recipe_book(copy_tables(tmp_path, **{COMPILED_FILE: drop}))


def test_an_unknown_family_is_refused(tmp_path: Path) -> None:
    def add(data: dict[str, Any]) -> None:
        data["recipes"]["pascal"] = data["recipes"]["turing"]

    with pytest.raises(ValidationError, match="pascal"):
        load_recipe_book(copy_tables(tmp_path, **{COMPILED_FILE: add}))


def test_an_unknown_taxonomy_is_refused(tmp_path: Path) -> None:
    def add(data: dict[str, Any]) -> None:
        data["recipes"]["hopper"]["Qwen/Qwen2.5-7B-Instruct"]["taxonomy"] = "vision"

    with pytest.raises(ValidationError, match="vision"):
        load_recipe_book(copy_tables(tmp_path, **{COMPILED_FILE: add}))


def test_a_typo_is_refused(tmp_path: Path) -> None:
    def typo(data: dict[str, Any]) -> None:
        data["recipes"]["hopper"]["Qwen/Qwen2.5-7B-Instruct"]["branches"]["latency"]["vramMinimumGB"] = 3

    with pytest.raises(ValidationError, match="vramMinimumGB"):
        load_recipe_book(copy_tables(tmp_path, **{COMPILED_FILE: typo}))


def test_a_bad_size_is_refused() -> None:
    with pytest.raises(ValidationError, match="parameterCount"):
        CompiledRecipe.model_validate({"parameterCount": "huge", "branches": {"latency": {"vramMinimumGiB": 1}}})


def test_a_default_family_must_exist(tmp_path: Path) -> None:
    def bad(data: dict[str, Any]) -> None:
        data["defaultFamily"] = "poetry"

    with pytest.raises(ValidationError, match="poetry"):
        load_recipe_book(copy_tables(tmp_path, **{TAXONOMY_FILE: bad}))


# ------------------------------------------------------------ choosing a recipe


def test_compiled_recipe_wins() -> None:
    choice = resolve("Qwen/Qwen2.5-32B-Instruct-AWQ", "hopper")
    assert choice.source is RecipeSource.COMPILED
    assert choice.needMiB == 24 * 1024
    assert choice.args["--quantization"] == "awq_marlin"
    assert choice.quantization.method == "awq"
    assert choice.modelVolumeGiB == 22
    assert choice.parameters == 32_800_000_000


def test_compiled_recipe_matches_names_case_insensitively() -> None:
    assert resolve("qwen/qwen2.5-7b-instruct", "hopper").source is RecipeSource.COMPILED


def test_compiled_recipe_wins_even_with_fallback_disabled() -> None:
    assert resolve("Qwen/Qwen2.5-7B-Instruct", "turing", fallback=False).source is RecipeSource.COMPILED


def test_preset_wins_over_fallback_and_takes_family_args() -> None:
    on_turing = resolve("Qwen/Qwen2.5-14B-Instruct", "turing", fallback=False)
    assert on_turing.source is RecipeSource.PRESET
    assert on_turing.needMiB == 34 * 1024
    assert on_turing.args["--enforce-eager"] is True
    assert on_turing.args["--dtype"] == "float16"
    assert on_turing.args["--max-model-len"] == 8192
    on_hopper = resolve("Qwen/Qwen2.5-14B-Instruct", "hopper")
    assert on_hopper.args["--dtype"] == "auto"
    assert "--enforce-eager" not in on_hopper.args


def test_fallback_synthesizes_a_generic_recipe() -> None:
    choice = resolve("org/Some-Model-32B-Instruct-AWQ", "hopper")
    assert choice.source is RecipeSource.FALLBACK
    assert choice.quantization.method == "awq"
    assert choice.parameters == 32 * 10**9
    assert choice.needMiB == 19335
    assert choice.args["--quantization"] == "awq_marlin"
    assert choice.args["--max-model-len"] == 4096
    assert choice.image == BOOK.compiled.runtime.image
    on_turing = resolve("org/Some-Model-32B-Instruct-AWQ", "turing")
    assert on_turing.args["--quantization"] == "awq"
    assert on_turing.args["--enforce-eager"] is True


def test_fallback_for_an_embedding_model_runs_pooling() -> None:
    choice = resolve("org/my-embed-model-335m", "hopper")
    assert choice.taxonomy == "embedding"
    assert choice.args["--runner"] == "pooling"
    assert choice.args["--convert"] == "embed"


def test_fallback_size_from_facts_and_order() -> None:
    assert resolve("org/mystery", "hopper", parameterCount="7B").parameters == 7 * 10**9
    assert resolve("org/mystery", "hopper", orderParameterCount="360M").parameters == 360 * 10**6


def test_fallback_quantization_from_the_fact_wins_over_the_name() -> None:
    choice = resolve("org/Model-8B-AWQ", "hopper", quantization="fp8")
    assert choice.quantization.method == "fp8"
    assert choice.args["--quantization"] == "fp8"


def test_no_runtime_when_fallback_disabled() -> None:
    problem, message = fail("org/Model-8B", "hopper", fallback=False)
    assert problem is RecipeProblem.NO_RUNTIME
    assert "runtime fallback is disabled" in message


def test_no_runtime_without_a_size() -> None:
    problem, message = fail("org/mystery-model", "hopper")
    assert problem is RecipeProblem.NO_RUNTIME
    assert "spec.model.parameterCount" in message


def test_no_runtime_on_an_unknown_family() -> None:
    problem, _ = fail("Qwen/Qwen2.5-7B-Instruct", "gaudi")
    assert problem is RecipeProblem.NO_RUNTIME


def test_quantization_mismatch_against_the_compiled_recipe() -> None:
    problem, message = fail("Qwen/Qwen2.5-32B-Instruct-AWQ", "hopper", quantization="gptq")
    assert problem is RecipeProblem.QUANTIZATION
    assert "AWQ" in message
    assert "GPTQ" in message


def test_quantization_mismatch_when_the_family_cannot_run_a_compiled_models_quantization() -> None:
    # Compiled for hopper only, in FP8: turing has no FP8, whether fallback is on or off.
    for fallback in (True, False):
        problem, message = fail("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "turing", fallback=fallback)
        assert problem is RecipeProblem.QUANTIZATION
        assert "compiled recipes exist for hopper" in message


def test_quantization_mismatch_on_the_fallback_branch_from_the_name() -> None:
    problem, message = fail("org/Model-8B-FP8", "turing")
    assert problem is RecipeProblem.QUANTIZATION
    assert "FP8" in message
    # The name is not read when fallback is off: the answer is "no runtime", not a mismatch.
    problem, _ = fail("org/Model-8B-FP8", "turing", fallback=False)
    assert problem is RecipeProblem.NO_RUNTIME


def test_quantization_mismatch_from_a_fact() -> None:
    problem, _ = fail("org/Model-8B", "volta", quantization="awq")
    assert problem is RecipeProblem.QUANTIZATION


def test_quantization_mismatch_against_a_preset() -> None:
    problem, message = fail("Qwen/Qwen2.5-14B-Instruct", "hopper", quantization="awq")
    assert problem is RecipeProblem.QUANTIZATION
    assert "preset" in message


def test_failure_reasons() -> None:
    resolution = resolve_recipe(BOOK, "turing", OrderFacts(modelName="org/Model-8B-FP8"), fallback_enabled=True)
    assert resolution.failure is not None
    assert resolution.failure.reason is Reason.QUANTIZATION_MISMATCH
    resolution = resolve_recipe(BOOK, "turing", OrderFacts(modelName="org/x"), fallback_enabled=True)
    assert resolution.failure is not None
    assert resolution.failure.reason is Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE


# --------------------------------------------------------------------- rendering


def test_render_args() -> None:
    assert render_args({"--a": 1, "--b": True, "--c": False, "--d": None, "--e": "x"}) == [
        "--a",
        "1",
        "--b",
        "--e",
        "x",
    ]


def test_render_recipe_sets_the_share_and_the_device_count() -> None:
    choice = resolve("Qwen/Qwen2.5-32B-Instruct-AWQ", "hopper")
    shared = render_recipe(choice, share_percent=31, device_count=1, device_mib=80 * 1024)
    assert shared.args[-2:] == ["--gpu-memory-utilization", "0.31"]
    assert "--tensor-parallel-size" not in shared.args
    assert shared.source is RecipeSource.COMPILED
    assert shared.branch == "latency"
    assert shared.vramMinimumGiB == 24.0
    assert shared.runtimeVersion == "0.33.0"
    whole = render_recipe(choice, share_percent=100, device_count=2, device_mib=80 * 1024)
    assert whole.args[-4:] == ["--gpu-memory-utilization", "0.90", "--tensor-parallel-size", "2"]


def test_gpu_memory_utilization() -> None:
    choice = resolve("Qwen/Qwen2.5-32B-Instruct-AWQ", "hopper")
    assert gpu_memory_utilization(choice, 50, 40 * 1024, 80 * 1024) == 0.5
    # A whole device: the recipe's value, raised when the model needs more of the card.
    assert gpu_memory_utilization(choice, 100, 24 * 1024, 80 * 1024) == 0.9
    assert gpu_memory_utilization(choice, 100, 76 * 1024, 80 * 1024) == 0.95
    assert gpu_memory_utilization(choice, 100, 24 * 1024, None) == 0.9
