"""The model fetcher's script, run by a real POSIX shell against a folder standing in for the volume.

A stand-in ``hf`` on PATH writes the files a download would; everything else is the script as the
init container runs it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from activities.builders.statefulset import FETCH_MARKER, FETCH_SCRIPT

FAKE_HF = """#!/bin/sh
# hf download REPO --local-dir DIR [--revision R]
repo="$2"; dir="$4"
mkdir -p "$dir"
echo "weights of $repo" > "$dir/model.safetensors"
echo "$repo" >> "$HF_CALLS"
"""


def fetch(root: Path, tools: Path, repository: str) -> str:
    env = {
        "PATH": f"{tools}:{os.environ['PATH']}",
        "MODEL_ROOT": str(root),
        "MODEL_DIR": str(root / repository),
        "MODEL_REPOSITORY": repository,
        "HF_CALLS": str(tools / "calls"),
    }
    done = subprocess.run(["sh", "-c", FETCH_SCRIPT], env=env, capture_output=True, text=True, check=True, timeout=30)
    return done.stdout


def test_editing_the_model_leaves_only_the_new_model_on_the_volume(tmp_path: Path) -> None:
    root, tools = tmp_path / "models", tmp_path / "bin"
    tools.mkdir()
    (tools / "hf").write_text(FAKE_HF)
    (tools / "hf").chmod(0o755)

    fetch(root, tools, "Qwen/Qwen2.5-0.5B-Instruct")
    assert (root / "Qwen/Qwen2.5-0.5B-Instruct" / FETCH_MARKER).read_text() == "Qwen/Qwen2.5-0.5B-Instruct@main"

    said = fetch(root, tools, "Qwen/Qwen2.5-7B-Instruct")
    assert "removing" in said
    assert "Qwen2.5-0.5B-Instruct" in said
    assert not (root / "Qwen/Qwen2.5-0.5B-Instruct").exists()
    assert (root / "Qwen/Qwen2.5-7B-Instruct/model.safetensors").read_text() == "weights of Qwen/Qwen2.5-7B-Instruct\n"

    # The same model again: nothing is fetched twice.
    assert "already present" in fetch(root, tools, "Qwen/Qwen2.5-7B-Instruct")
    assert (tools / "calls").read_text().splitlines() == ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]


def test_an_interrupted_fetch_of_another_model_is_removed_too(tmp_path: Path) -> None:
    root, tools = tmp_path / "models", tmp_path / "bin"
    tools.mkdir()
    (tools / "hf").write_text(FAKE_HF)
    (tools / "hf").chmod(0o755)
    partial = root / "acme/big-model"
    partial.mkdir(parents=True)
    (partial / ".ai-inference-fetching").write_text("acme/big-model@main")
    (partial / "shard-1.safetensors").write_text("half")

    fetch(root, tools, "Qwen/Qwen2.5-0.5B-Instruct")
    assert not partial.exists()
