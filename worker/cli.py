"""The ``ai-inference`` command: one entry point, a sub-command per process or tool."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer

from inference_api.crd import crd_files, write_crds
from inference_api.settings import ModuleSettings, load_settings

app = typer.Typer(no_args_is_help=True, help="ai-inference: LLM inference on shared GPUs for Kubernetes.")


@app.command()
def crds(
    output: Path = typer.Option(
        Path("deploy") / "crds", help="Directory to write the CRDs into (run from the repository root)."
    ),
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


KUBECONFIG_OPTION = typer.Option(None, help="Kubeconfig (default: in-cluster, then KUBECONFIG).")
HEALTH_PORT_OPTION = typer.Option(None, "--health-port", help="Serve GET /healthz and GET /metrics on this port.")
METRICS_PORT_OPTION = typer.Option(
    None, "--metrics-port", help="Serve the Temporal SDK's Prometheus metrics on this port (default: off)."
)


def _runtime(kubeconfig: str | None) -> tuple[ModuleSettings, Any]:
    from activities.kube import load_api_client
    from worker.logs import configure_logging

    configure_logging()
    return load_settings(), load_api_client(kubeconfig)


@app.command()
def worker(
    kubeconfig: str | None = KUBECONFIG_OPTION,
    health_port: int | None = HEALTH_PORT_OPTION,
    metrics_port: int | None = METRICS_PORT_OPTION,
) -> None:
    """Run the Temporal worker: the order workflow and its activities."""
    from worker.processes import run_worker, with_health
    from worker.temporal_client import connect, install_sdk_metrics

    settings, api = _runtime(kubeconfig)
    install_sdk_metrics(metrics_port)

    async def main() -> None:
        await with_health(health_port, run_worker(await connect(settings), api, settings))

    asyncio.run(main())


def watch(
    kubeconfig: str | None = KUBECONFIG_OPTION,
    health_port: int | None = HEALTH_PORT_OPTION,
    metrics_port: int | None = METRICS_PORT_OPTION,
) -> None:
    """Run the watcher: InferenceService and InferenceServiceClass changes become workflow signals."""
    from worker.processes import run_watcher, with_health
    from worker.temporal_client import connect, install_sdk_metrics

    settings, api = _runtime(kubeconfig)
    install_sdk_metrics(metrics_port)

    async def main() -> None:
        await with_health(health_port, run_watcher(await connect(settings), api, settings))

    asyncio.run(main())


# `ai-inference watch` is the name; `watcher` (the name before) still works, hidden from --help.
app.command("watch")(watch)
app.command("watcher", hidden=True)(watch)


@app.command()
def planner(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8080, help="Port to listen on."),
    kubeconfig: str | None = KUBECONFIG_OPTION,
    tls_cert_file: Path | None = typer.Option(
        None,
        "--tls-cert-file",
        help="PEM serving certificate (with its chain): serve HTTPS. Reloaded when the file changes.",
    ),
    tls_key_file: Path | None = typer.Option(None, "--tls-key-file", help="PEM private key of --tls-cert-file."),
) -> None:
    """Run the planner service over HTTPS: POST /api/v1/launch-plan, GET /healthz, GET /openapi.json.

    Callers send a ServiceAccount token bound to planner.audience. Without --tls-cert-file the
    command refuses to start unless planner.allowInsecureHttp is true (unsafe: tests only).
    """
    import ssl

    import uvicorn

    from activities.inventory import read_inventory
    from planner.recipes import load_recipe_book
    from planner.service import CertificateReloader, KubernetesAccessReviewer, create_app

    if (tls_cert_file is None) != (tls_key_file is None):
        raise typer.BadParameter("give --tls-cert-file and --tls-key-file together", param_hint="--tls-key-file")
    settings, api = _runtime(kubeconfig)
    if tls_cert_file is None and not settings.planner.allowInsecureHttp:
        typer.echo(
            "refusing to serve the planner over plain http (callers' tokens would travel in clear): give "
            "--tls-cert-file and --tls-key-file, or set planner.allowInsecureHttp: true (unsafe, tests only)",
            err=True,
        )
        raise typer.Exit(2)
    timeout = settings.planner.timeoutSeconds
    reviewer = KubernetesAccessReviewer(api, timeout, audience=settings.planner.audience)
    recipes = load_recipe_book(settings.planner.recipesDirectory)
    service = create_app(lambda: read_inventory(api, timeout=timeout), reviewer, recipes=recipes)
    tls: dict[str, Any] = {}
    if tls_cert_file is not None and tls_key_file is not None:
        tls = {"ssl_certfile": str(tls_cert_file), "ssl_keyfile": str(tls_key_file)}
    config = uvicorn.Config(service, host=host, port=port, log_config=None, **tls)
    config.load()  # makes config.ssl from the files now: a bad pair fails the start, not the first call
    if isinstance(config.ssl, ssl.SSLContext):
        config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        CertificateReloader(config.ssl, tls["ssl_certfile"], tls["ssl_keyfile"]).start()
    uvicorn.Server(config).run()


@app.command()
def replan(
    order: str = typer.Argument(..., help="NAMESPACE/NAME of the InferenceService."),
    kubeconfig: str | None = KUBECONFIG_OPTION,
) -> None:
    """Ask an order's workflow to recompute its launch plan, and print the outcome."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    from inference_api.payloads import order_workflow_id
    from inference_api.types import GROUP, ORDERS, VERSION
    from worker.temporal_client import connect
    from workflows.order import ReplanOutcome

    if "/" not in order:
        raise typer.BadParameter("give the order as NAMESPACE/NAME", param_hint="ORDER")
    namespace, name = order.split("/", 1)
    settings, api = _runtime(kubeconfig)
    try:
        obj = CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, name)
    except ApiException as err:
        typer.echo(f"cannot read InferenceService {order}: HTTP {err.status} {err.reason}", err=True)
        raise typer.Exit(1) from None
    workflow_id = order_workflow_id(namespace, name, obj["metadata"]["uid"])

    async def main() -> ReplanOutcome:
        client = await connect(settings)
        return await client.get_workflow_handle(workflow_id).execute_update("replan", result_type=ReplanOutcome)

    try:
        outcome = asyncio.run(main())
    except WorkflowUpdateFailedError as err:
        typer.echo(f"replan refused: {err.cause}", err=True)
        raise typer.Exit(2) from None
    except RPCError as err:
        typer.echo(f"replan not delivered to workflow {workflow_id}: {err}", err=True)
        raise typer.Exit(1) from None
    verdict = "planned" if outcome.planned else "not planned"
    typer.echo(f"{order}: {verdict} ({outcome.reason}), replanCount={outcome.replanCount}\n{outcome.message}")


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


COMMANDS_ENTRY_POINTS = "ai_inference.commands"

# What each plug-in sub-command is for, shown in --help.
_PLUGIN_HELP = {
    "cluster": "The local Kubernetes control plane with simulated GPUs.",
    "dev": "The whole module locally: up, down, env, status.",
}


def _register_subcommands() -> None:
    """Add the sub-commands of installed plug-ins (the local stack's ``dev`` and ``cluster``).

    Production installs have none: the local stack is its own distribution, so a production
    ``ai-inference`` never imports it.
    """
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group=COMMANDS_ENTRY_POINTS), key=lambda e: e.name):
        app.add_typer(entry.load(), name=entry.name, help=_PLUGIN_HELP.get(entry.name))


_register_subcommands()

if __name__ == "__main__":
    app()
