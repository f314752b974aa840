"""A tiny chat model made on this machine: what the local stack's real engines serve, no model hub needed.

The local stack cannot download a model, so it makes one, the same bytes every time:

* a byte-level BPE tokenizer trained with ``tokenizers`` on the fixed text below (``VOCAB_SIZE``
  entries, the chat roles as special tokens), saved as ``tokenizer.json`` with a
  ``tokenizer_config.json`` that names ``PreTrainedTokenizerFast`` and carries the chat template;
* a Llama config (2 layers, hidden 64, 4 heads of **32** — a head size vLLM's CPU attention
  supports; vLLM's Qwen2 ignores ``head_dim``, Llama honours it — 2 KV heads, 32k positions so a
  recipe's ``--max-model-len`` fits) and random weights from a fixed seed, float16 safetensors.

About 150k parameters and 0.3 MB on disk. It answers with random tokens, which is all a test of
the serving path needs: the engine loads it, tokenizes a chat, generates, streams, and counts.

How a user orders it: as a Hugging Face model, ``ai-inference-dev/tiny-chat`` (a repository on the local hub
only) with ``parameterCount: 131K`` (``deploy/dev/order-tiny-chat.yaml``). The module fetches the
repository into the replica's model volume; in the local stack the stand-in fleet runs that init
container's own script with the Hugging Face CLI against the local hub (``devstack.standins.hub``),
which serves the model made here, into the volume at ``<repo>``, so the engine loads
``/models/ai-inference-dev/tiny-chat`` exactly as the built command says (``devstack.standins.engine``).

A second repository, ``ai-inference-dev/tiny-qwq-chat`` (``FEATURES_REPOSITORY``), is the same model in
the QwQ chat format: the tokenizer also knows ``<think>``, ``</think>``, ``<tool_call>`` and
``</tool_call>`` (plain added tokens, kept when decoding, as in QwQ), and the chat template
(``FEATURES_CHAT_TEMPLATE``) offers ``tools`` in the Hermes format (a JSON call inside
``<tool_call></tool_call>``) and opens the answer with ``<think>``. The recipes know the name as model
family ``qwq`` (recipes/model-families.yaml): the replica launches with ``--enable-auto-tool-choice
--tool-call-parser hermes --tool-strict-level parameter --reasoning-parser deepseek_r1``, which is what the
engine tests exercise (tests/engine/test_engine_features.py; its weights being random, they end its
reasoning with ``thinking_token_budget``). The first repository stays in no known family.

For the hub stand-in (``devstack.standins.hub``), two more repositories: ``GATED_REPOSITORY``, the
same files behind the hub's gated access (a token of a granted user opens it), and
``LARGE_REPOSITORY``, a model of the same family about 200 MiB large (``LARGE_SHAPE``: hidden 1024,
7 layers, random float16 weights from the same seed, in two safetensors shards with their index),
made on first use into the cache (``install_large_model``, a few seconds) so that a download takes
long enough to watch, and the engine can still load it on a CPU.

``python -m devstack.tiny_model DIR [--features | --large]`` writes one to DIR.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

REPOSITORY = "ai-inference-dev/tiny-chat"
FEATURES_REPOSITORY = "ai-inference-dev/tiny-qwq-chat"
# The hub stand-in's gated copy of REPOSITORY, and its larger model (made on demand).
GATED_REPOSITORY = "ai-inference-dev/tiny-chat-gated"
LARGE_REPOSITORY = "ai-inference-dev/chat-200m"
CATALOG_NAME = "tiny-chat"
SERVED_NAME = "tiny-chat"
# What an order says of its size (spec.model.parameterCount): the name carries no size token, and
# the planner sizes a model without a compiled recipe by its parameters. 131,392 parameters.
PARAMETER_COUNT = "131K"
SEED = 20261201
VOCAB_SIZE = 512
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
INTERMEDIATE = 128
LAYERS = 2
MAX_POSITIONS = 32768


@dataclass(frozen=True)
class Shape:
    """A Llama's dimensions: the tiny model's by default."""

    hidden: int = HIDDEN
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    head_dim: int = HEAD_DIM
    intermediate: int = INTERMEDIATE
    layers: int = LAYERS


TINY_SHAPE = Shape()
# About 107M parameters, 204 MiB of float16: two shards of about 100 MiB.
LARGE_SHAPE = Shape(hidden=1024, heads=8, kv_heads=2, head_dim=128, intermediate=4096, layers=7)
LARGE_SHARDS = 2

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
EOS = "<|end|>"
BOS = "<|bos|>"
PAD = "<|pad|>"
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

# The QwQ format's markers: plain added tokens (not special), so a decoded answer keeps them and the
# parsers find them (vLLM's hermes and deepseek_r1 parsers look them up in the vocabulary).
THINK_START, THINK_END = "<think>", "</think>"
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
FEATURE_TOKENS = [THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END]
FEATURES_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}{{ '<|system|>' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n\\n' }}{% endif %}"
    "{{ 'You may call one or more functions to assist with the user query. The functions are listed in "
    "<tools></tools>:\\n<tools>' }}"
    "{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}"
    "{{ '\\n</tools>\\nFor each call, return a JSON object with the function name and arguments within "
    '<tool_call></tool_call>:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\\n</tool_call><|end|>' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and tools %}"
    "{% elif message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] %}"
    "{{ '<|assistant|>' + (message['content'] or '') }}"
    "{% for call in message['tool_calls'] %}{{ '<tool_call>\\n{\"name\": \"' + call['function']['name'] + "
    "'\", \"arguments\": ' + (call['function']['arguments'] if call['function']['arguments'] is string "
    "else call['function']['arguments'] | tojson) + '}\\n</tool_call>' }}{% endfor %}{{ '<|end|>' }}"
    "{% elif message['role'] == 'tool' %}"
    "{{ '<|user|><tool_response>\\n' + message['content'] + '\\n</tool_response><|end|>' }}"
    "{% else %}{{ '<|' + message['role'] + '|>' + (message['content'] or '') + '<|end|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|><think>\\n' }}{% endif %}"
)

# The training text: fixed, so the merges (and so every file) are the same on every machine.
CORPUS = [
    "Hello! How can I help you today? I am a small model that runs on a CPU.",
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.",
    "An inference service serves a model behind an OpenAI compatible API with a token.",
    "Kubernetes runs pods on nodes; a StatefulSet keeps a volume for every replica.",
    "Say this is a test. The answer is forty two. Please write a short poem about the sea.",
    "What is the capital of France? Paris is the capital of France, and Berlin of Germany.",
    "Numbers: zero one two three four five six seven eight nine ten 0 1 2 3 4 5 6 7 8 9.",
    "The engine streams tokens as server sent events until the end of the answer.",
]


def _tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tokenizer


def _weights(vocab: int, shape: Shape = TINY_SHAPE) -> dict[str, np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(SEED))
    hidden = shape.hidden

    def normal(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims) * 0.02).astype(np.float16)

    weights = {"model.embed_tokens.weight": normal(vocab, hidden)}
    for layer in range(shape.layers):
        prefix = f"model.layers.{layer}"
        weights |= {
            f"{prefix}.self_attn.q_proj.weight": normal(shape.heads * shape.head_dim, hidden),
            f"{prefix}.self_attn.k_proj.weight": normal(shape.kv_heads * shape.head_dim, hidden),
            f"{prefix}.self_attn.v_proj.weight": normal(shape.kv_heads * shape.head_dim, hidden),
            f"{prefix}.self_attn.o_proj.weight": normal(hidden, shape.heads * shape.head_dim),
            f"{prefix}.mlp.gate_proj.weight": normal(shape.intermediate, hidden),
            f"{prefix}.mlp.up_proj.weight": normal(shape.intermediate, hidden),
            f"{prefix}.mlp.down_proj.weight": normal(hidden, shape.intermediate),
            f"{prefix}.input_layernorm.weight": np.ones(hidden, dtype=np.float16),
            f"{prefix}.post_attention_layernorm.weight": np.ones(hidden, dtype=np.float16),
        }
    weights["model.norm.weight"] = np.ones(hidden, dtype=np.float16)
    return weights


def _json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_model(dest: Path, features: bool = False, shape: Shape = TINY_SHAPE, shards: int = 1) -> Path:
    """Write the model's files into ``dest`` (made if missing); the same bytes on every call.
    ``features``: the QwQ-format variant (``FEATURES_REPOSITORY``); ``shape`` and ``shards``: another
    size (``LARGE_SHAPE``), its weights split into ``shards`` files with an index as a hub's large
    models are."""
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    if features:
        tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in FEATURE_TOKENS])
    tokenizer.save(str(dest / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size()
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    _json(
        dest / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "model_max_length": MAX_POSITIONS,
            "clean_up_tokenization_spaces": False,
            "chat_template": FEATURES_CHAT_TEMPLATE if features else CHAT_TEMPLATE,
        },
    )
    _json(dest / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD})
    _json(
        dest / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": vocab,
            "hidden_size": shape.hidden,
            "intermediate_size": shape.intermediate,
            "num_hidden_layers": shape.layers,
            "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": MAX_POSITIONS,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "tie_word_embeddings": True,
            "bos_token_id": ids[BOS],
            "eos_token_id": ids[EOS],
            "pad_token_id": ids[PAD],
            "torch_dtype": "float16",
        },
    )
    _json(
        dest / "generation_config.json",
        {"bos_token_id": ids[BOS], "eos_token_id": ids[EOS], "pad_token_id": ids[PAD]},
    )
    weights = _weights(vocab, shape)
    if shards == 1:
        save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
        return dest
    names = list(weights)
    per_shard = -(-len(names) // shards)
    weight_map: dict[str, str] = {}
    for index in range(shards):
        file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: weights[name] for name in names[index * per_shard : (index + 1) * per_shard]}
        save_file(part, str(dest / file), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, file)
    total = sum(int(array.nbytes) for array in weights.values())
    _json(dest / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    return dest


def digest(directory: Path) -> str:
    """One sha256 over the model's files (names and bytes): equal for equal models."""
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        h.update(path.relative_to(directory).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def install_features_model(dest: Path) -> Path:
    """The QwQ-format variant at ``dest`` (``install_model`` with ``features``)."""
    return install_model(dest, features=True)


def install_large_model(dest: Path) -> Path:
    """The larger model (``LARGE_REPOSITORY``: ``LARGE_SHAPE``, ``LARGE_SHARDS`` shards) at ``dest``."""
    return install_model(dest, shape=LARGE_SHAPE, shards=LARGE_SHARDS)


def install_model(dest: Path, features: bool = False, shape: Shape = TINY_SHAPE, shards: int = 1) -> Path:
    """The model at ``dest``, written through a temporary folder so a reader never sees half of it."""
    weights = "model.safetensors" if shards == 1 else "model.safetensors.index.json"
    if (dest / weights).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-model-", dir=dest.parent))
    try:
        write_model(tmp, features, shape, shards)
        try:
            tmp.rename(dest)
        except OSError:  # another writer won: its files are the same bytes
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main() -> None:
    args = [a for a in sys.argv[1:] if a not in ("--features", "--large")]
    if len(args) != 1:
        raise SystemExit("usage: python -m devstack.tiny_model DIR [--features | --large]")
    large = "--large" in sys.argv[1:]
    dest = write_model(
        Path(args[0]),
        features="--features" in sys.argv[1:],
        shape=LARGE_SHAPE if large else TINY_SHAPE,
        shards=LARGE_SHARDS if large else 1,
    )
    size = sum(p.stat().st_size for p in dest.iterdir())
    print(f"{dest}: {size} bytes, sha256 {digest(dest)}")


if __name__ == "__main__":
    main()
