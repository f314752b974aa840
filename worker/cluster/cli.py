"""``ai-inference cluster build|up|down|env|inventory``."""

from __future__ import annotations

import typer

cluster_app = typer.Typer(no_args_is_help=True)
