"""What the planner can tell about a model from its facts and its name: size, quantization, memory.

The size comes from the catalog fact, then the order's ``spec.model.parameterCount``, then a size
token in the model name ("32B", "360m", "1.5B", "7b"). The quantization comes from the catalog fact
or — on the fallback branch only, as phase 2.4.1 says — from a name token (AWQ, GPTQ, FP8, INT4…).

The fallback memory estimate is geometry-blind on purpose (the catalog publishes no tensor
geometry yet): weights x 1.2 + 1 GiB.
  * weights = parameters x bytes per parameter of the quantization;
  * x 1.2 leaves a fifth of the weights for the KV cache of a short context and for activations;
  * + 1 GiB is the CUDA context and the runtime's own buffers, which do not shrink with the model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from inference_api.plan import OrderFacts

GIB = 2**30
MIB = 2**20

VRAM_OVERHEAD_FACTOR = 1.2
VRAM_OVERHEAD_MIB = 1024
VOLUME_MARGIN_FACTOR = 1.1
VOLUME_MARGIN_GIB = 2

_MAGNITUDE = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
_COUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmbt])\s*$", re.IGNORECASE)
# A size token stands alone between separators: "Qwen2.5-32B-Instruct", "SmolLM2-360M", "Mixtral-8x7B".
# K is not a size in names ("128k", "4k" are context lengths), and a letter before the number rules out
# "A3B" (active parameters of a mixture of experts) and version strings.
_NAME_TOKEN = re.compile(r"(?<![a-z0-9.])(?:([0-9]+)x)?([0-9]+(?:\.[0-9]+)?)([mbt])(?![a-z0-9])")


class SizeSource(StrEnum):
    FACT = "fact"
    ORDER = "order"
    NAME = "name"


def parse_parameter_count(text: str | None) -> int | None:
    """ "32B" → 32_000_000_000, "360M", "1.5B", "7b"; a bare integer is a count. None when unreadable."""
    if text is None:
        return None
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped) or None
    match = _COUNT.match(stripped)
    if not match:
        return None
    try:
        count = Decimal(match[1]) * _MAGNITUDE[match[2].lower()]
    except InvalidOperation:
        return None
    return int(count) or None


def parameter_count_from_name(name: str) -> int | None:
    """The first size token of the model name, or None."""
    match = _NAME_TOKEN.search(name.lower())
    if not match:
        return None
    experts = int(match[1]) if match[1] else 1
    return int(Decimal(match[2]) * _MAGNITUDE[match[3]] * experts) or None


@dataclass(frozen=True)
class ModelSize:
    parameters: int
    source: SizeSource


def resolve_parameter_count(facts: OrderFacts) -> ModelSize | None:
    """Fact, then the order's value, then the name: the first rung that reads wins."""
    for text, source in ((facts.parameterCount, SizeSource.FACT), (facts.orderParameterCount, SizeSource.ORDER)):
        count = parse_parameter_count(text)
        if count:
            return ModelSize(count, source)
    count = parameter_count_from_name(facts.modelName)
    return ModelSize(count, SizeSource.NAME) if count else None


# ------------------------------------------------------------------- quantization

NONE = "none"


@dataclass(frozen=True)
class Quantization:
    """A canonical quantization method and what one parameter costs in memory under it."""

    method: str
    bytesPerParameter: float

    @property
    def quantized(self) -> bool:
        return self.method != NONE


UNQUANTIZED = Quantization(NONE, 2.0)

# Unquantized checkpoints are served in 16 bits (vLLM's dtype auto serves fp32 checkpoints in 16 bits too).
_UNQUANTIZED_WORDS = {"none", "", "fp16", "bf16", "float16", "bfloat16", "half", "fp32", "float32", "f16", "bf"}


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[-_/.\s]+", text.lower()) if t]


def _from_tokens(tokens: list[str]) -> Quantization | None:
    words = set(tokens)
    eight_bit = bool(words & {"int8", "8bit", "w8a16", "w8a8"})
    if "awq" in words:
        return Quantization("awq", 0.5)
    if "gptq" in words:
        return Quantization("gptq", 1.0 if eight_bit else 0.5)
    if words & {"nvfp4", "fp4", "mxfp4"}:
        return Quantization("fp4", 0.5)
    if words & {"fp8", "f8", "w8a8fp8", "fp8dynamic"}:
        return Quantization("fp8", 1.0)
    if words & {"bnb", "bitsandbytes", "4bit", "nf4"}:
        return Quantization("bitsandbytes", 0.5)
    if words & {"int4", "w4a16", "w4a4"}:
        return Quantization("int4", 0.5)
    if eight_bit:
        return Quantization("int8", 1.0)
    return None


def parse_quantization(text: str | None) -> Quantization | None:
    """A catalog fact ("AWQ", "gptq-int4", "fp8", "bf16", "none"). Unknown words stay as they are, at
    16 bits a parameter: no hardware family lists them, so the plan refuses them as a mismatch rather than
    guessing a kernel."""
    if text is None:
        return None
    if text.strip().lower() in _UNQUANTIZED_WORDS:
        return UNQUANTIZED
    known = _from_tokens(_tokens(text)) or _from_tokens([text.strip().lower().replace("-", "").replace("_", "")])
    return known or Quantization(text.strip().lower(), 2.0)


def quantization_from_name(name: str) -> Quantization:
    """The quantization a name announces; an unmarked name is an unquantized (16-bit) checkpoint."""
    return _from_tokens(_tokens(name)) or UNQUANTIZED


# ------------------------------------------------------------------------ memory


def weights_gib(parameters: int, quantization: Quantization) -> float:
    return parameters * quantization.bytesPerParameter / GIB


def estimate_vram_mib(parameters: int, quantization: Quantization) -> int:
    """Fallback vramMinimum in MiB: weights x 1.2 + 1 GiB (see the module docstring)."""
    weights_mib = parameters * quantization.bytesPerParameter / MIB
    return math.ceil(weights_mib * VRAM_OVERHEAD_FACTOR + VRAM_OVERHEAD_MIB)


def estimate_model_volume_gib(weights: float) -> int:
    """The volume holds the checkpoint plus tokenizer and configs: weights x 1.1 + 2 GiB."""
    return max(1, math.ceil(weights * VOLUME_MARGIN_FACTOR + VOLUME_MARGIN_GIB))


def estimate_cpu(device_count: int) -> str:
    """Two cores for the API server and tokenizer, two for each device's worker."""
    return str(2 + 2 * device_count)


def estimate_memory_gib(weights: float) -> int:
    """vLLM with torch and the CUDA libraries takes about 8 GiB of host memory; loading streams the
    checkpoint shard by shard, so a quarter of the weights covers the peak."""
    return 8 + math.ceil(weights / 4)
