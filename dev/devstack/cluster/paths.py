"""Where the local control plane keeps its binaries, logs and per-cluster state."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
CONTROLPLANE_DIR = REPO_ROOT / "deploy" / "controlplane"
CRDS_DIR = REPO_ROOT / "deploy" / "crds"
DEV_DIR = REPO_ROOT / "deploy" / "dev"
KWOK_STAGES = CONTROLPLANE_DIR / "kwok-stages.yaml"

CACHE_ENV = "AI_INFERENCE_CACHE"
STATE_ENV = "AI_INFERENCE_STATE"


def cache_root() -> Path:
    """``$AI_INFERENCE_CACHE`` or ``~/.cache/ai-inference``: binaries and build logs, shared by all clusters."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ai-inference"


def bin_root() -> Path:
    return cache_root() / "bin"


def build_logs_dir() -> Path:
    return cache_root() / "logs"


def default_state_dir() -> Path:
    """``$AI_INFERENCE_STATE`` or ``~/.local/state/ai-inference/cluster``: one running dev cluster."""
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "ai-inference" / "cluster"
