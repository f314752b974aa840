"""Recipes: how vLLM is launched on a hardware family, compiled, preset or synthesized.

Three tables under ``recipes/``, loaded once and validated with pydantic:

* ``runtime-recipes.compiled.yaml`` — compiled recipes keyed by (hardware family, model), each with
  latency / throughput / balance branches (the planner reads latency), and family-independent
  ``presets`` that carry a model's geometry (vramMinimumGiB, size, quantization) when no family has
  a compiled entry for it;
* ``recipe-taxonomy.yaml`` — families of models (chat, embedding, rerank) and their default args;
* ``platform-hardware-families.yaml`` — product name → hardware family, its compute capability,
  dtype and the quantizations it can run (with the vLLM ``--quantization`` value for each);
* ``model-families.yaml`` — model families (Qwen3, Llama 3, gpt-oss, ...) and the serving features a
  chat recipe of the family compiles: tool-call parser, reasoning parser, chat template
  (``serving_features``).

Precedence for one (family, model): compiled, then preset, then — when runtime fallback is enabled —
a generic recipe synthesized from the taxonomy and the hardware family with an estimated
vramMinimumGiB (phase 2.4.1). Loading reads files; everything else here is pure.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from inference_api.plan import OrderFacts, Recipe, RecipeFeatures, RecipeSource
from inference_api.reasons import Reason
from inference_api.types import EndpointType, ServingFeature
from planner.model_facts import (
    UNQUANTIZED,
    Quantization,
    estimate_vram_mib,
    parameter_count_from_name,
    parse_parameter_count,
    parse_quantization,
    quantization_from_name,
    resolve_parameter_count,
)

# The shipped tables are package data of the top-level ``recipes`` package (``recipes/``), read through
# importlib.resources so an installed wheel plans exactly as the source tree does.
RECIPES_PACKAGE = "recipes"
COMPILED_FILE = "runtime-recipes.compiled.yaml"
TAXONOMY_FILE = "recipe-taxonomy.yaml"
FAMILIES_FILE = "platform-hardware-families.yaml"
MODEL_FAMILIES_FILE = "model-families.yaml"

ArgValue = str | int | float | bool | None
Branch = Literal["latency", "throughput", "balance"]
READ_BRANCH: Branch = "latency"

GPU_MEMORY_UTILIZATION = "--gpu-memory-utilization"
TENSOR_PARALLEL_SIZE = "--tensor-parallel-size"
QUANTIZATION_ARG = "--quantization"
AUTO_TOOL_CHOICE = "--enable-auto-tool-choice"
TOOL_CALL_PARSER = "--tool-call-parser"
REASONING_PARSER = "--reasoning-parser"
CHAT_TEMPLATE = "--chat-template"


class _Strict(BaseModel):
    # A typo in a recipe table must fail loudly at load, not silently drop an argument.
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------- compiled recipes


class RecipeBranch(_Strict):
    vramMinimumGiB: float = Field(ge=0, description="Accelerator memory the branch needs, whole model.")
    gpuMemoryUtilization: float = Field(
        default=0.90, gt=0, le=1, description="Used on a whole device; a share below 100 sets its own."
    )
    args: dict[str, ArgValue] = Field(
        default_factory=dict, description="vLLM flags; true renders a bare flag, false or null drops it."
    )
    env: dict[str, str] = Field(default_factory=dict)


class CompiledRecipe(_Strict):
    parameterCount: str | None = Field(default=None, description="Size, e.g. 32B; sizes the volume and cpu.")
    quantization: str | None = Field(default=None, description="Canonical quantization, none when unquantized.")
    taxonomy: str | None = Field(default=None, description="Family in recipe-taxonomy.yaml.")
    runtimeVersion: str | None = Field(default=None, description="Overrides the file's runtime.version.")
    image: str | None = Field(default=None, description="Overrides the file's runtime.image.")
    modelVolumeGiB: int | None = Field(default=None, ge=1, description="Overrides the volume estimate.")
    branches: dict[Branch, RecipeBranch]

    @model_validator(mode="after")
    def _has_latency(self) -> Self:
        if READ_BRANCH not in self.branches:
            raise ValueError("a recipe needs a latency branch: the planner reads it")
        if self.parameterCount is not None and parse_parameter_count(self.parameterCount) is None:
            raise ValueError(f"parameterCount {self.parameterCount!r} is not a size such as 32B")
        return self

    @property
    def latency(self) -> RecipeBranch:
        return self.branches[READ_BRANCH]


class RuntimeRelease(_Strict):
    name: str = "vllm"
    version: str
    image: str


class CompiledRecipes(_Strict):
    schemaVersion: Literal[1] = 1
    runtime: RuntimeRelease
    recipes: dict[str, dict[str, CompiledRecipe]] = Field(
        default_factory=dict, description="hardware family → model name → recipe"
    )
    presets: dict[str, CompiledRecipe] = Field(
        default_factory=dict, description="model name → family-independent recipe (geometry and args)"
    )


# ---------------------------------------------------------------------- taxonomy


class TaxonomyFamily(_Strict):
    description: str = ""
    endpointTypes: list[EndpointType] = Field(default_factory=list)
    namePatterns: list[str] = Field(default_factory=list, description="Regular expressions, case-insensitive.")
    gpuMemoryUtilization: float = Field(default=0.90, gt=0, le=1)
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _patterns(self) -> Self:
        for pattern in self.namePatterns:
            re.compile(pattern)
        return self

    def matches_name(self, name: str) -> bool:
        return any(re.search(p, name, re.IGNORECASE) for p in self.namePatterns)


class RecipeTaxonomy(_Strict):
    schemaVersion: Literal[1] = 1
    defaultFamily: str
    families: dict[str, TaxonomyFamily]

    @model_validator(mode="after")
    def _default_exists(self) -> Self:
        if self.defaultFamily not in self.families:
            raise ValueError(f"defaultFamily {self.defaultFamily!r} is not one of the families")
        return self

    def family_for(self, facts: OrderFacts) -> str:
        """A catalog fact about the contract wins; then the name; then the default.

        On the direct path the endpoint type is Chat whatever the model is, so a Chat fact does not
        outrank the name: an embedding model still gets an embedding runtime.
        """
        if facts.endpointType is not EndpointType.CHAT:
            for name, family in self.families.items():
                if facts.endpointType in family.endpointTypes:
                    return name
        for name, family in self.families.items():
            if family.matches_name(facts.modelName):
                return name
        return self.defaultFamily


# --------------------------------------------------------------- hardware families


class HardwareFamily(_Strict):
    description: str = ""
    computeCapability: str
    productNames: list[str] = Field(description="Shell patterns of product names, case-insensitive.")
    dtypes: list[str]
    quantizations: dict[str, str | None] = Field(
        description="Canonical quantization the family can run → vLLM --quantization value "
        "(null: vLLM reads it from the checkpoint)."
    )
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    def runs(self, quantization: Quantization) -> bool:
        return quantization.method in self.quantizations


class PlatformHardwareFamilies(_Strict):
    schemaVersion: Literal[1] = 1
    families: dict[str, HardwareFamily]

    def family_of(self, product_name: str | None) -> str | None:
        if not product_name:
            return None
        for name, family in self.families.items():
            if any(fnmatch.fnmatchcase(product_name.lower(), p.lower()) for p in family.productNames):
                return name
        return None


# ------------------------------------------------------------------ model families


class ModelFamily(_Strict):
    description: str = ""
    namePatterns: list[str] = Field(min_length=1, description="Regular expressions, case-insensitive.")
    examples: list[str] = Field(min_length=1, description="Models of the family (the docs' table names them).")
    toolCallParser: str | None = Field(default=None, description="vLLM --tool-call-parser; null: no tool calls.")
    reasoningParser: str | None = Field(default=None, description="vLLM --reasoning-parser; null: none.")
    chatTemplate: str | None = Field(default=None, description="vLLM --chat-template; null: the repository's.")

    @model_validator(mode="after")
    def _patterns(self) -> Self:
        for pattern in self.namePatterns:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"namePattern {pattern!r}: {error}") from None
        return self

    def matches_name(self, name: str) -> bool:
        return any(re.search(p, name, re.IGNORECASE) for p in self.namePatterns)


class ModelFamilies(_Strict):
    schemaVersion: Literal[1] = 1
    chatArgs: dict[str, ArgValue] = Field(
        default_factory=dict, description="Args every chat recipe gets, whatever the family (structured output)."
    )
    toolCallArgs: dict[str, ArgValue] = Field(
        default_factory=dict,
        description="Args a chat recipe gets on top of chatArgs (replacing the same flag) when it compiles a "
        "tool-call parser (the structured-output backend tool calls need, the tool strict level).",
    )
    families: dict[str, ModelFamily] = Field(default_factory=dict)

    def family_of(self, model: str) -> str | None:
        """The first family whose name patterns match ``model``, or None."""
        return next((name for name, family in self.families.items() if family.matches_name(model)), None)


def serving_features(
    families: ModelFamilies, facts: OrderFacts, serves_chat: bool
) -> tuple[dict[str, ArgValue], RecipeFeatures]:
    """The args a recipe of ``facts.modelName`` gets for its clients, and what they serve. Pure.

    Only a chat recipe (``serves_chat``: its taxonomy family serves Chat) gets any; the model's family
    (name patterns) names the parsers; the class's ``disabledFeatures`` (``facts``) drops them. A compiled
    tool-call parser brings ``toolCallArgs`` with it (after the parser, so ``--enable-auto-tool-choice
    --tool-call-parser NAME`` stay together; a flag chatArgs has keeps its place and takes the new value).
    """
    if not serves_chat:
        return {}, RecipeFeatures(note="not a chat recipe: no tool calls or reasoning, whatever the model")
    args: dict[str, ArgValue] = dict(families.chatArgs)
    name = families.family_of(facts.modelName)
    if name is None:
        return args, RecipeFeatures(
            note=f"{facts.modelName} is in no model family the recipes know (recipes/model-families.yaml): "
            "no tool-call or reasoning parser; a request with tool_choice auto is answered 400"
        )
    family = families.families[name]
    disabled = set(facts.disabledFeatures)
    notes: list[str] = []
    tool = family.toolCallParser
    reasoning = family.reasoningParser
    if tool is not None and ServingFeature.TOOL_CALLING in disabled:
        tool = None
        notes.append("the class turns tool calling off")
    if reasoning is not None and ServingFeature.REASONING in disabled:
        reasoning = None
        notes.append("the class turns reasoning output off")
    if family.toolCallParser is None:
        notes.append(f"family {name} has no tool-call parser")
    if family.reasoningParser is None:
        notes.append(f"family {name} has no reasoning parser")
    if tool is not None:
        args[AUTO_TOOL_CHOICE] = True
        args[TOOL_CALL_PARSER] = tool
        args.update(families.toolCallArgs)
    if reasoning is not None:
        args[REASONING_PARSER] = reasoning
    if family.chatTemplate is not None:
        args[CHAT_TEMPLATE] = family.chatTemplate
    features = RecipeFeatures(
        modelFamily=name,
        toolCallParser=tool,
        reasoningParser=reasoning,
        chatTemplate=family.chatTemplate,
        note="; ".join(notes),
    )
    return args, features


# ------------------------------------------------------------------- recipe book


def _norm(model: str) -> str:
    return model.strip().lower()


class RecipeBook(_Strict):
    compiled: CompiledRecipes
    taxonomy: RecipeTaxonomy
    platform: PlatformHardwareFamilies
    models: ModelFamilies = Field(default_factory=ModelFamilies)

    @model_validator(mode="after")
    def _references(self) -> Self:
        for family, models in self.compiled.recipes.items():
            if family not in self.platform.families:
                raise ValueError(f"compiled recipes name hardware family {family!r}, unknown to the platform table")
            for model, recipe in models.items():
                self._check_taxonomy(model, recipe)
        for model, recipe in self.compiled.presets.items():
            self._check_taxonomy(model, recipe)
        return self

    def _check_taxonomy(self, model: str, recipe: CompiledRecipe) -> None:
        if recipe.taxonomy is not None and recipe.taxonomy not in self.taxonomy.families:
            raise ValueError(f"recipe for {model}: taxonomy {recipe.taxonomy!r} is not in recipe-taxonomy.yaml")

    def hardware_family(self, name: str | None, product_name: str | None) -> str | None:
        """The device's own family when it names one, else the family of its product name."""
        if name:
            return name.strip().lower()
        return self.platform.family_of(product_name)

    def compiled_for(self, family: str, model: str) -> CompiledRecipe | None:
        for name, recipe in self.compiled.recipes.get(family, {}).items():
            if _norm(name) == _norm(model):
                return recipe
        return None

    def compiled_elsewhere(self, model: str) -> list[tuple[str, CompiledRecipe]]:
        return [
            (family, recipe)
            for family, models in self.compiled.recipes.items()
            for name, recipe in models.items()
            if _norm(name) == _norm(model)
        ]

    def preset_for(self, model: str) -> CompiledRecipe | None:
        return next((r for n, r in self.compiled.presets.items() if _norm(n) == _norm(model)), None)


def _read(path: Traversable) -> object:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _load(directory: Traversable) -> RecipeBook:
    models = directory / MODEL_FAMILIES_FILE
    return RecipeBook(
        compiled=CompiledRecipes.model_validate(_read(directory / COMPILED_FILE)),
        taxonomy=RecipeTaxonomy.model_validate(_read(directory / TAXONOMY_FILE)),
        platform=PlatformHardwareFamilies.model_validate(_read(directory / FAMILIES_FILE)),
        # Optional: a directory of tables written before model families were (tests, a copy) has none.
        models=ModelFamilies.model_validate(_read(models)) if models.is_file() else ModelFamilies(),
    )


@lru_cache(maxsize=8)
def _load_directory(directory: Path) -> RecipeBook:
    return _load(directory)


@lru_cache(maxsize=1)
def _load_shipped() -> RecipeBook:
    return _load(shipped_recipes())


def shipped_recipes() -> Traversable:
    """Where the shipped tables are: package data of the installed ``planner``."""
    return resources.files(RECIPES_PACKAGE)


def load_recipe_book(directory: Path | str | None = None) -> RecipeBook:
    """The three tables of ``directory`` (default: the shipped package data), read and validated once."""
    if directory is None:
        return _load_shipped()
    return _load_directory(Path(directory).resolve())


# ------------------------------------------------------------ choosing a recipe


class RecipeProblem(StrEnum):
    QUANTIZATION = "quantization"
    NO_RUNTIME = "no-runtime"


@dataclass(frozen=True)
class RecipeChoice:
    """A recipe for one hardware family, before the share and the device count are known."""

    source: RecipeSource
    family: str
    needMiB: int
    runtimeVersion: str
    image: str
    args: dict[str, ArgValue]
    env: dict[str, str]
    gpuMemoryUtilization: float
    quantization: Quantization
    parameters: int | None = None
    modelVolumeGiB: int | None = None
    taxonomy: str | None = None
    features: RecipeFeatures | None = None


@dataclass(frozen=True)
class RecipeFailure:
    problem: RecipeProblem
    family: str
    message: str

    @property
    def reason(self) -> Reason:
        if self.problem is RecipeProblem.QUANTIZATION:
            return Reason.QUANTIZATION_MISMATCH
        return Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE


@dataclass(frozen=True)
class RecipeResolution:
    choice: RecipeChoice | None = None
    failure: RecipeFailure | None = field(default=None)


def _describe(q: Quantization) -> str:
    return "unquantized (16-bit)" if not q.quantized else q.method.upper()


def _mib(gib: float) -> int:
    return math.ceil(gib * 1024)


def _merge(*layers: dict[str, ArgValue]) -> dict[str, ArgValue]:
    merged: dict[str, ArgValue] = {}
    for layer in layers:
        merged.update(layer)
    return merged


def _quantization_args(hardware: HardwareFamily, q: Quantization) -> dict[str, ArgValue]:
    value = hardware.quantizations.get(q.method)
    return {QUANTIZATION_ARG: value} if q.quantized and value else {}


def _from_table(
    book: RecipeBook,
    family: str,
    model: str,
    recipe: CompiledRecipe,
    source: RecipeSource,
    facts: OrderFacts,
) -> RecipeChoice:
    branch = recipe.latency
    q = parse_quantization(recipe.quantization) or parse_quantization(facts.quantization) or UNQUANTIZED
    taxonomy = recipe.taxonomy or book.taxonomy.family_for(facts)
    if source is RecipeSource.COMPILED:
        # A compiled recipe was compiled against this hardware: its args are complete as written.
        args = dict(branch.args)
        env = dict(branch.env)
    else:
        # A preset is family-independent geometry: the family and the taxonomy fill in the rest.
        hardware = book.platform.families[family]
        kind = book.taxonomy.families[taxonomy]
        args = _merge(kind.args, hardware.args, _quantization_args(hardware, q), branch.args)
        env = {**kind.env, **hardware.env, **branch.env}
    size = parse_parameter_count(recipe.parameterCount) or parameter_count_from_name(model)
    return RecipeChoice(
        source=source,
        family=family,
        needMiB=_mib(branch.vramMinimumGiB),
        runtimeVersion=recipe.runtimeVersion or book.compiled.runtime.version,
        image=recipe.image or book.compiled.runtime.image,
        args=args,
        env=env,
        gpuMemoryUtilization=branch.gpuMemoryUtilization,
        quantization=q,
        parameters=size,
        modelVolumeGiB=recipe.modelVolumeGiB,
        taxonomy=taxonomy,
    )


def resolve_recipe(book: RecipeBook, family: str, facts: OrderFacts, *, fallback_enabled: bool) -> RecipeResolution:
    """The recipe for ``facts.modelName`` on ``family``, or why there is none; a chat recipe with the
    serving features of the model's family (``serving_features``) after the table's own args."""
    resolution = _resolve_recipe(book, family, facts, fallback_enabled=fallback_enabled)
    choice = resolution.choice
    if choice is None:
        return resolution
    kind = book.taxonomy.families.get(choice.taxonomy or "")
    serves_chat = kind is not None and EndpointType.CHAT in kind.endpointTypes
    args, features = serving_features(book.models, facts, serves_chat)
    return RecipeResolution(choice=replace(choice, args=_merge(choice.args, args), features=features))


def _resolve_recipe(book: RecipeBook, family: str, facts: OrderFacts, *, fallback_enabled: bool) -> RecipeResolution:
    model = facts.modelName
    hardware = book.platform.families.get(family)
    if hardware is None:
        return RecipeResolution(
            failure=RecipeFailure(
                RecipeProblem.NO_RUNTIME,
                family,
                f"hardware family {family!r} is not in the platform table, so no runtime is known for it",
            )
        )
    fact_q = parse_quantization(facts.quantization)

    compiled = book.compiled_for(family, model)
    if compiled is not None:
        entry_q = parse_quantization(compiled.quantization)
        if fact_q is not None and entry_q is not None and fact_q.method != entry_q.method:
            return RecipeResolution(
                failure=RecipeFailure(
                    RecipeProblem.QUANTIZATION,
                    family,
                    f"the compiled recipe for {model} on {family} is for {_describe(entry_q)}, "
                    f"but the model is {_describe(fact_q)}",
                )
            )
        return RecipeResolution(choice=_from_table(book, family, model, compiled, RecipeSource.COMPILED, facts))

    # No compiled recipe on this family. What the tables already know about the model's quantization
    # (the catalog fact, a preset, a compiled recipe on another family) decides whether the family can
    # run it at all; the name is read only on the fallback branch below.
    preset = book.preset_for(model)
    known_q = fact_q
    if known_q is None and preset is not None:
        known_q = parse_quantization(preset.quantization)
    if known_q is None:
        known_q = next(
            (q for _, r in book.compiled_elsewhere(model) if (q := parse_quantization(r.quantization))), None
        )
    if known_q is not None and not hardware.runs(known_q):
        elsewhere = sorted(f for f, _ in book.compiled_elsewhere(model))
        compiled_note = f" (compiled recipes exist for {', '.join(elsewhere)})" if elsewhere else ""
        return RecipeResolution(
            failure=RecipeFailure(
                RecipeProblem.QUANTIZATION,
                family,
                f"{family} hardware (compute capability {hardware.computeCapability}) cannot run "
                f"{_describe(known_q)} {model}{compiled_note}",
            )
        )
    if preset is not None:
        preset_q = parse_quantization(preset.quantization)
        if fact_q is not None and preset_q is not None and fact_q.method != preset_q.method:
            return RecipeResolution(
                failure=RecipeFailure(
                    RecipeProblem.QUANTIZATION,
                    family,
                    f"the recipe preset for {model} is for {_describe(preset_q)}, but the model is {_describe(fact_q)}",
                )
            )
        return RecipeResolution(choice=_from_table(book, family, model, preset, RecipeSource.PRESET, facts))

    if not fallback_enabled:
        return RecipeResolution(
            failure=RecipeFailure(
                RecipeProblem.NO_RUNTIME,
                family,
                f"there is no compiled recipe for {model} on {family} hardware and runtime fallback is disabled",
            )
        )
    return _fallback(book, family, hardware, facts, fact_q)


def _fallback(
    book: RecipeBook,
    family: str,
    hardware: HardwareFamily,
    facts: OrderFacts,
    fact_q: Quantization | None,
) -> RecipeResolution:
    model = facts.modelName
    q = fact_q or quantization_from_name(model)
    if not hardware.runs(q):
        return RecipeResolution(
            failure=RecipeFailure(
                RecipeProblem.QUANTIZATION,
                family,
                f"{family} hardware (compute capability {hardware.computeCapability}) cannot run "
                f"{_describe(q)} {model}",
            )
        )
    size = resolve_parameter_count(facts)
    if size is None:
        return RecipeResolution(
            failure=RecipeFailure(
                RecipeProblem.NO_RUNTIME,
                family,
                f"there is no compiled recipe for {model} and its size is unknown, so no generic recipe can be "
                "sized: the catalog has no parameterCount, the order sets no spec.model.parameterCount and the "
                "name carries no size token such as 7B or 360M",
            )
        )
    taxonomy = book.taxonomy.family_for(facts)
    kind = book.taxonomy.families[taxonomy]
    return RecipeResolution(
        choice=RecipeChoice(
            source=RecipeSource.FALLBACK,
            family=family,
            needMiB=estimate_vram_mib(size.parameters, q),
            runtimeVersion=book.compiled.runtime.version,
            image=book.compiled.runtime.image,
            args=_merge(kind.args, hardware.args, _quantization_args(hardware, q)),
            env={**kind.env, **hardware.env},
            gpuMemoryUtilization=kind.gpuMemoryUtilization,
            quantization=q,
            parameters=size.parameters,
            taxonomy=taxonomy,
        )
    )


# ------------------------------------------------------------------- rendering


def render_args(args: dict[str, ArgValue]) -> list[str]:
    rendered: list[str] = []
    for flag, value in args.items():
        if value is None or value is False:
            continue
        rendered.append(flag)
        if value is not True:
            rendered.append(str(value))
    return rendered


def gpu_memory_utilization(choice: RecipeChoice, share_percent: int, need_mib: int, device_mib: int | None) -> float:
    """The fraction of the device vLLM may take.

    A share below 100 is the order's whole allowance on a card others use too: exactly the share.
    On a whole device the recipe's value stands, raised when the model needs more of the card than it.
    """
    if share_percent < 100:
        return share_percent / 100
    if device_mib:
        needed = math.ceil(100 * need_mib / device_mib) / 100
        return min(1.0, max(choice.gpuMemoryUtilization, needed))
    return choice.gpuMemoryUtilization


def render_recipe(choice: RecipeChoice, *, share_percent: int, device_count: int, device_mib: int | None) -> Recipe:
    per_device = math.ceil(choice.needMiB / device_count)
    planned: dict[str, ArgValue] = {
        GPU_MEMORY_UTILIZATION: f"{gpu_memory_utilization(choice, share_percent, per_device, device_mib):.2f}"
    }
    # One device: no tensor parallelism, whatever a table says (None drops the flag).
    planned[TENSOR_PARALLEL_SIZE] = device_count if device_count > 1 else None
    return Recipe(
        source=choice.source,
        runtimeVersion=choice.runtimeVersion,
        image=choice.image,
        args=render_args(_merge(choice.args, planned)),
        env=dict(choice.env),
        hardwareFamily=choice.family,
        branch=READ_BRANCH,
        vramMinimumGiB=math.ceil(choice.needMiB / 1024 * 100) / 100,
        features=choice.features,
    )
