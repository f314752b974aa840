"""The ``ai-inference`` command: one entry point, a sub-command per process or tool."""

from __future__ import annotations

from pathlib import Path

import typer

from inference_api.crd import crd_files, write_crds

app = typer.Typer(no_args_is_help=True, help="ai-inference: LLM inference on shared GPUs for Kubernetes.")

REPO_ROOT = Path(__file__).resolve().parent.parent


@app.command()
def crds(
    output: Path = typer.Option(REPO_ROOT / "deploy" / "crds", help="Directory to write the CRDs into."),
    check: bool = typer.Option(False, help="Fail when the files there differ from the generated ones."),
) -> None:
    """Generate the CustomResourceDefinitions from the API types."""
    if check:
        stale = [name for name, text in crd_files().items() if _read(output / name) != text]
        if stale:
            typer.echo(f"stale CRDs (run `ai-inference crds`): {', '.join(stale)}", err=True)
            raise typer.Exit(1)
        typer.echo("CRDs are up to date")
        return
    for path in write_crds(output):
        typer.echo(f"wrote {path}")


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def _register_subcommands() -> None:
    # Sub-apps live beside the code they drive; importing them here keeps one entry point.
    from worker.cluster.cli import cluster_app

    app.add_typer(cluster_app, name="cluster", help="The local Kubernetes control plane with simulated GPUs.")


_register_subcommands()

if __name__ == "__main__":
    app()
