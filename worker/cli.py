"""The ``ai-inference`` command: one entry point, a sub-command per process or tool.

Exit codes (:class:`ExitCode`, documented in docs/reference.md): 0 done; 1 failed otherwise; 2 usage
(typer's own, and a bad option value); 3 refused (a replan or a plan the module refuses: the answer,
not a failure to get one); 4 unreachable (the API server, Temporal or the planner cannot be reached);
5 not found (the order, its workflow or the class does not exist). Commands that print state take
``-o json`` (``--output json``): one JSON object on stdout.
"""

from __future__ import annotations

import asyncio
import json
import logging
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any, NoReturn

import typer

from inference_api import DISTRIBUTION, package_version
from inference_api.crd import crd_files, write_crds
from inference_api.settings import ModuleSettings, load_settings


class ExitCode(IntEnum):
    """What ``ai-inference`` exits with: the one place they are defined."""

    OK = 0
    FAILED = 1
    USAGE = 2
    REFUSED = 3
    UNREACHABLE = 4
    NOT_FOUND = 5


class Output(StrEnum):
    TEXT = "text"
    JSON = "json"


OUTPUT_OPTION = typer.Option(Output.TEXT, "--output", "-o", help="text, or json: one JSON object on stdout.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"{DISTRIBUTION} {package_version()}")
        raise typer.Exit(ExitCode.OK)


app = typer.Typer(no_args_is_help=True, help="ai-inference: LLM inference on shared GPUs for Kubernetes.")


@app.callback()
def _main(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """ai-inference: LLM inference on shared GPUs for Kubernetes."""


def fail(code: ExitCode, message: str) -> NoReturn:
    """One line on stderr, then exit with ``code``."""
    typer.echo(message, err=True)
    raise typer.Exit(code)


def emit(output: Output, data: dict[str, Any], text: str) -> None:
    """State on stdout: ``text`` for a terminal, ``data`` as JSON for ``-o json``."""
    typer.echo(json.dumps(data, indent=2, sort_keys=False) if output == Output.JSON else text)


@app.command()
def crds(
    output: Path = typer.Option(
        Path("deploy") / "crds", help="Directory to write the CRDs into (run from the repository root)."
    ),
    check: bool = typer.Option(False, help="Fail when the files there differ from the generated ones."),
    apply: bool = typer.Option(
        False,
        "--apply",
        help="Instead of files: server-side apply the module's two CRDs, generated from the installed "
        "package, to the cluster (the chart's pre-upgrade hook). Exit 3 when the API server refuses (403).",
    ),
    kubeconfig: str | None = typer.Option(
        None, help="With --apply: kubeconfig (default: in-cluster, then KUBECONFIG)."
    ),
) -> None:
    """Generate the CustomResourceDefinitions from the API types (with --apply: upgrade them in the cluster)."""
    if apply:
        if check:
            fail(ExitCode.USAGE, "--apply and --check exclude each other")
        _apply_crds(kubeconfig)
        return
    if check:
        stale = [name for name, text in crd_files().items() if _read(output / name) != text]
        if stale:
            fail(ExitCode.FAILED, f"stale CRDs (run `ai-inference crds`): {', '.join(stale)}")
        typer.echo("CRDs are up to date")
        return
    for path in write_crds(output):
        typer.echo(f"wrote {path}")


def _apply_crds(kubeconfig: str | None) -> None:
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException
    from kubernetes.dynamic.exceptions import DynamicApiError
    from urllib3.exceptions import HTTPError

    from activities.builders.common import FIELD_MANAGER
    from activities.kube import load_api_client
    from worker.crd_upgrade import RefusedError, kube_client, module_crds, server_message, upgrade

    try:
        with load_api_client(kubeconfig) as api:
            lines = upgrade(kube_client(api, FIELD_MANAGER), module_crds())
    except RefusedError as err:
        fail(ExitCode.REFUSED, str(err))
    except ConfigException as err:
        fail(ExitCode.FAILED, f"no cluster credentials (in-cluster or kubeconfig): {err}")
    except (HTTPError, OSError) as err:
        fail(ExitCode.UNREACHABLE, f"the API server cannot be reached: {type(err).__name__}")
    except (ApiException, DynamicApiError) as err:
        status = getattr(err, "status", "?")
        fail(ExitCode.FAILED, f"the API server answered {status}: {server_message(getattr(err, 'body', None))}")
    except RuntimeError as err:
        fail(ExitCode.FAILED, str(err))
    for line in lines:
        typer.echo(line)


KUBECONFIG_OPTION = typer.Option(None, help="Kubeconfig (default: in-cluster, then KUBECONFIG).")
HEALTH_PORT_OPTION = typer.Option(None, "--health-port", help="Serve GET /healthz and GET /metrics on this port.")
METRICS_PORT_OPTION = typer.Option(
    None, "--metrics-port", help="Serve the Temporal SDK's Prometheus metrics on this port (default: off)."
)


def _runtime(kubeconfig: str | None, component: str = "cli") -> tuple[ModuleSettings, Any]:
    """Settings, logging at ``logLevel``, and an API client that names ``component`` to the server."""
    from activities.kube import load_api_client
    from worker.logs import configure_logging

    settings = load_settings()
    configure_logging(settings.logLevel)
    return settings, load_api_client(kubeconfig, component)


def _traced(settings: ModuleSettings, process: str) -> None:
    """A long-running process's traces (``tracing.otlpEndpoint``; off when unset): docs/tracing.md."""
    from worker.tracing import setup_tracing

    setup_tracing(settings.tracing, process)


@app.command()
def worker(
    kubeconfig: str | None = KUBECONFIG_OPTION,
    health_port: int | None = HEALTH_PORT_OPTION,
    metrics_port: int | None = METRICS_PORT_OPTION,
) -> None:
    """Run the Temporal worker: the order workflow and its activities.

    At start it registers the search attributes the workflows set (in temporal.namespace), when
    missing; exit 1 when Temporal does not let it, 4 when Temporal cannot be reached.
    """
    from worker.processes import Health, run_worker, with_health
    from worker.temporal_client import install_sdk_metrics

    settings, api = _runtime(kubeconfig, "worker")
    _traced(settings, "worker")
    install_sdk_metrics(metrics_port)
    health = Health(starting=True)

    async def main() -> None:
        client = await _connect_or_exit(settings)
        await with_health(health_port, run_worker(client, api, settings, health), health)

    _run_process(main())


def watch(
    kubeconfig: str | None = KUBECONFIG_OPTION,
    health_port: int | None = HEALTH_PORT_OPTION,
    metrics_port: int | None = METRICS_PORT_OPTION,
) -> None:
    """Run the watcher: InferenceService and InferenceServiceClass changes become workflow signals."""
    from worker.processes import Health, run_watcher, until_terminated, with_health
    from worker.temporal_client import install_sdk_metrics

    settings, api = _runtime(kubeconfig, "watch")
    _traced(settings, "watch")
    install_sdk_metrics(metrics_port)
    health = Health(starting=True)

    async def main() -> None:
        client = await _connect_or_exit(settings)
        # SIGTERM stops it cleanly: a leading observer releases its Lease (exit 0).
        await until_terminated(with_health(health_port, run_watcher(client, api, settings, health), health))

    _run_process(main())


async def _connect_or_exit(settings: ModuleSettings) -> Any:
    """The Temporal client of a process; exit 4 when Temporal cannot be reached, 1 for unreadable
    credential files (the message names the setting, never the contents)."""
    from worker.temporal_client import TemporalCredentialsError, connect

    try:
        return await connect(settings)
    except TemporalCredentialsError as err:
        fail(ExitCode.FAILED, str(err))
    except RuntimeError as err:
        fail(ExitCode.UNREACHABLE, f"cannot reach Temporal at {settings.temporal.address}: {err}")


def _run_process(main: Any) -> None:
    """Run a long-running process; a search-attribute problem is its message and exit 1."""
    from worker.search_attribute_registration import SearchAttributeError

    try:
        asyncio.run(main)
    except SearchAttributeError as err:
        fail(ExitCode.FAILED, f"cannot start: {err}")


# `ai-inference watch` is the name; `watcher` (the name before) still works, hidden from --help.
app.command("watch")(watch)
app.command("watcher", hidden=True)(watch)


@app.command()
def disable(
    module_namespace: str = typer.Option("d8-ai-inference", help="The namespace of the release's processes."),
    wait_seconds: float = typer.Option(120, help="The longest wait for the processes' and replicas' pods to go."),
    kubeconfig: str | None = KUBECONFIG_OPTION,
) -> None:
    """Stop every order's workload and keep the orders (the chart's pre-delete hook; worker/disable.py)."""
    from activities.kube import load_api_client
    from worker.disable import disable as run_disable
    from worker.logs import configure_logging

    configure_logging("INFO")
    report = run_disable(load_api_client(kubeconfig, "disable"), module_namespace, wait_seconds)
    typer.echo(report.line())
    if report.failures:
        fail(ExitCode.FAILED, "not finished: " + "; ".join(report.failures[:10]))


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
    """Run the planner service over HTTPS: POST /api/v1/launch-plan, GET /healthz, /readyz, /openapi.json.

    Callers send a ServiceAccount token bound to planner.audience. Without --tls-cert-file the
    command refuses to start unless planner.allowInsecureHttp is true (unsafe: tests only).
    """
    import ssl

    import uvicorn

    from planner.recipes import load_recipe_book
    from planner.service import CertificateReloader, KubernetesAccessReviewer, create_app
    from worker.observer.inventory import InventoryInformers

    if (tls_cert_file is None) != (tls_key_file is None):
        raise typer.BadParameter("give --tls-cert-file and --tls-key-file together", param_hint="--tls-key-file")
    settings, api = _runtime(kubeconfig, "planner")
    _traced(settings, "planner")
    if tls_cert_file is None and not settings.planner.allowInsecureHttp:
        typer.echo(
            "refusing to serve the planner over plain http (callers' tokens would travel in clear): give "
            "--tls-cert-file and --tls-key-file, or set planner.allowInsecureHttp: true (unsafe, tests only)",
            err=True,
        )
        raise typer.Exit(ExitCode.USAGE)
    timeout = settings.planner.timeoutSeconds
    reviewer = KubernetesAccessReviewer(api, timeout, audience=settings.planner.audience)
    recipes = load_recipe_book(settings.planner.recipesDirectory)
    # Informers keep the inventory (list+watch); a plan reads no API. /readyz: synced.
    # Each answered plan is booked until its claims are allocated (planner.bookingTTLSeconds at most).
    service = create_app(
        InventoryInformers.for_cluster(api).start(),
        reviewer,
        recipes=recipes,
        booking_ttl=settings.planner.bookingTTLSeconds,
    )
    tls: dict[str, Any] = {}
    if tls_cert_file is not None and tls_key_file is not None:
        tls = {"ssl_certfile": str(tls_cert_file), "ssl_keyfile": str(tls_key_file)}
    config = uvicorn.Config(service, host=host, port=port, log_config=None, **tls)
    config.load()  # makes config.ssl from the files now: a bad pair fails the start, not the first call
    if isinstance(config.ssl, ssl.SSLContext):
        config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        CertificateReloader(config.ssl, tls["ssl_certfile"], tls["ssl_keyfile"]).start()
    uvicorn.Server(config).run()


def _tool_runtime(kubeconfig: str | None) -> tuple[ModuleSettings, Any]:
    """Settings and an API client for a command a person runs: a bad setting or no kubeconfig is a
    clear message and exit 1, not a traceback."""
    from kubernetes.config import ConfigException
    from pydantic import ValidationError

    try:
        settings, api = _runtime(kubeconfig)
    except ValidationError as err:
        fail(ExitCode.FAILED, f"invalid module settings: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}")
    except ConfigException as err:
        fail(ExitCode.FAILED, f"no usable kubeconfig (give --kubeconfig or set KUBECONFIG): {err}")
    # A person reads this command's answer on stdout; the libraries' progress lines (informers,
    # connections) are the daemons' business: only warnings and errors reach stderr.
    logging.getLogger().setLevel(logging.WARNING)
    return settings, api


def _api_unreachable(err: BaseException) -> bool:
    """The API server cannot be reached: a connection error, not an HTTP answer."""
    import urllib3.exceptions

    return isinstance(err, urllib3.exceptions.HTTPError | OSError)


def _temporal_unreachable(err: BaseException) -> bool:
    """Temporal cannot be reached: the client's connect failed, or the call timed out or got no server."""
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(err, RPCError):
        return err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
    return isinstance(err, RuntimeError) and "connect" in str(err).lower()


@app.command()
def replan(
    order: str = typer.Argument(..., help="NAMESPACE/NAME of the InferenceService."),
    kubeconfig: str | None = KUBECONFIG_OPTION,
    output: Output = OUTPUT_OPTION,
) -> None:
    """Ask an order's workflow to recompute its launch plan, and print the outcome.

    Exit 3 when the workflow refuses the replan, 4 when the API server or Temporal cannot be reached,
    5 when the order or its workflow does not exist.
    """
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError, RPCStatusCode

    from inference_api.payloads import order_workflow_id
    from inference_api.types import GROUP, ORDERS, VERSION
    from worker.temporal_client import TemporalCredentialsError, connect
    from workflows.order import ReplanOutcome

    if "/" not in order:
        raise typer.BadParameter("give the order as NAMESPACE/NAME", param_hint="ORDER")
    namespace, name = order.split("/", 1)
    settings, api = _tool_runtime(kubeconfig)
    try:
        obj = CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, name)
    except ApiException as err:
        code = ExitCode.NOT_FOUND if err.status == 404 else ExitCode.FAILED
        fail(code, f"cannot read InferenceService {order}: HTTP {err.status} {err.reason}")
    except Exception as err:
        if _api_unreachable(err):
            fail(ExitCode.UNREACHABLE, f"cannot reach the Kubernetes API server: {type(err).__name__}")
        raise
    workflow_id = order_workflow_id(namespace, name, obj["metadata"]["uid"])

    async def main() -> ReplanOutcome:
        client = await connect(settings)
        return await client.get_workflow_handle(workflow_id).execute_update("replan", result_type=ReplanOutcome)

    try:
        outcome = asyncio.run(main())
    except WorkflowUpdateFailedError as err:
        # The validator's own words (an ApplicationError's message, without the type of the error).
        why = str(getattr(err.cause, "message", None) or err.cause)
        if output == Output.JSON:
            emit(output, {"order": order, "refused": True, "message": why}, "")
        fail(ExitCode.REFUSED, f"replan refused: {why}")
    except TemporalCredentialsError as err:
        fail(ExitCode.FAILED, str(err))
    except (RPCError, RuntimeError) as err:
        if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
            fail(ExitCode.NOT_FOUND, f"no running workflow {workflow_id} for {order}: {err}")
        if _temporal_unreachable(err):
            fail(ExitCode.UNREACHABLE, f"cannot reach Temporal at {settings.temporal.address}: {err}")
        fail(ExitCode.FAILED, f"replan not delivered to workflow {workflow_id}: {err}")
    verdict = "planned" if outcome.planned else "not planned"
    emit(
        output,
        {"order": order, "refused": False, **outcome.model_dump(mode="json")},
        f"{order}: {verdict} ({outcome.reason}), replanCount={outcome.replanCount}\n{outcome.message}",
    )


@app.command()
def plan(
    class_name: str = typer.Option(..., "--class", help="The InferenceServiceClass the order would name."),
    model: str = typer.Option(
        ..., "--model", help="A Hugging Face repository (org/repo), or with --source ai-models a catalog name."
    ),
    namespace: str = typer.Option("default", "--namespace", "-n", help="The namespace the order would be in."),
    source: str = typer.Option("HuggingFace", "--source", help="HuggingFace or ai-models (spec.model.src)."),
    kind: str | None = typer.Option(
        None, "--kind", help="With --source ai-models: Model or ClusterModel (default ClusterModel)."
    ),
    kubeconfig: str | None = KUBECONFIG_OPTION,
    output: Output = OUTPUT_OPTION,
) -> None:
    """Dry run of an order before it exists: what it would get, per device class, or why it would wait.

    Reads the class and the cluster's inventory, resolves the model as the worker does and runs the
    planning library (the planner service's code) on one inventory snapshot; writes nothing. Exit 0
    with a plan, 3 with the refusal the order would get, 4 when the API server cannot be reached, 5
    when the class does not exist.
    """
    import re

    from kubernetes.client.exceptions import ApiException

    from inference_api.reasons import Reason
    from inference_api.types import HF_REPO_PATTERN, ModelKind, ModelSource
    from worker.dry_run import dry_run, render_text

    try:
        src = ModelSource(source)
    except ValueError:
        raise typer.BadParameter(
            f"{source!r} is no model source: HuggingFace or ai-models", param_hint="--source"
        ) from None
    if src == ModelSource.HUGGING_FACE:
        if kind is not None:
            raise typer.BadParameter("a HuggingFace reference has no kind", param_hint="--kind")
        if not re.fullmatch(HF_REPO_PATTERN, model):
            raise typer.BadParameter(
                f"{model!r}: a HuggingFace reference names a repository as org/repo, e.g. "
                "Qwen/Qwen2.5-32B-Instruct-AWQ",
                param_hint="--model",
            )
    elif kind is not None and kind not in {k.value for k in ModelKind}:
        raise typer.BadParameter(f"{kind!r}: Model or ClusterModel", param_hint="--kind")
    settings, api = _tool_runtime(kubeconfig)
    try:
        run = asyncio.run(dry_run(api, settings, class_name, model, namespace, src, kind))
    except ApiException as err:
        fail(ExitCode.FAILED, f"the API server refused a read of the dry run: HTTP {err.status} {err.reason}")
    except Exception as err:
        if _api_unreachable(err):
            fail(ExitCode.UNREACHABLE, f"cannot reach the Kubernetes API server: {type(err).__name__}")
        raise
    emit(output, run.model_dump(mode="json"), render_text(run) + _features_text(run.plan))
    if run.refusal is not None:
        raise typer.Exit(ExitCode.NOT_FOUND if run.refusal.reason == Reason.CLASS_NOT_FOUND else ExitCode.REFUSED)


def _features_text(plan: Any) -> str:
    """What the endpoint would serve besides plain chat (tool calls, reasoning), or nothing without a plan."""
    from planner.planning import features_line

    return f"\n  {features_line(plan)}" if plan is not None else ""


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


def kubectl_plugin() -> None:
    """The ``kubectl-ai_inference`` script: ``kubectl ai-inference …`` runs this command."""
    app(prog_name="kubectl ai-inference")


if __name__ == "__main__":
    app()
