"""``ai-inference dev``: the whole module locally (see dev/devstack/stack.py)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from enum import StrEnum
from typing import Any

import typer

from devstack.cluster.cli import CPU_OPTION, H100_OPTION, MIG_OPTION, NODE_CPU_OPTION, NODE_MEMORY_OPTION, T4_OPTION
from devstack.cluster.inventory import fleet_size
from devstack.stack import DevStack, dev_state_dir

dev_app = typer.Typer(no_args_is_help=True)


class TemporalKind(StrEnum):
    dev = "dev"
    postgres = "postgres"


def _say(line: str) -> None:
    typer.echo(line, err=True)


@dev_app.command()
def up(
    wait: bool = typer.Option(True, help="Wait until the minimal order is Ready and print its endpoint."),
    timeout: float = typer.Option(600, help="Seconds to wait for Ready."),
    h100_nodes: int | None = H100_OPTION,
    mig_nodes: int | None = MIG_OPTION,
    t4_nodes: int | None = T4_OPTION,
    cpu_nodes: int | None = CPU_OPTION,
    node_cpu: str | None = NODE_CPU_OPTION,
    node_memory: str | None = NODE_MEMORY_OPTION,
    replicas: int = typer.Option(
        1,
        min=1,
        help="Workers and observers of each (2: as the chart runs them; the observers elect a leader on a Lease).",
    ),
    temporal: TemporalKind = typer.Option(
        TemporalKind.dev,
        help="dev: the embedded Temporal dev server (SQLite, Web UI). postgres: the Temporal server built from its "
        "Go module on a PostgreSQL of its own, as in production (docs/production-temporal.md).",
    ),
) -> None:
    """Start everything, apply the minimal order, wait until it is Ready.

    The simulated fleet is one node of each shape unless sized (``--h100-nodes 10 --t4-nodes 5``)."""
    stack = DevStack(dev_state_dir())
    given: dict[str, Any] = {
        "h100_nodes": h100_nodes,
        "mig_nodes": mig_nodes,
        "t4_nodes": t4_nodes,
        "cpu_nodes": cpu_nodes,
        "node_cpu": node_cpu,
        "node_memory": node_memory,
    }
    size = None
    if any(v is not None for v in given.values()):
        # As the cluster keeps it where not given.
        kept = fleet_size(stack.cluster().state_dir)
        size = replace(kept, **{k: v for k, v in given.items() if v is not None})
    try:
        stack.up(_say, wait_ready=wait, timeout=timeout, fleet=size, replicas=replicas, temporal=temporal.value)
    except RuntimeError as err:
        _say(f"error: {err}")
        raise typer.Exit(1) from None


@dev_app.command()
def down(purge: bool = typer.Option(False, help="Also delete the state (cluster data, Temporal history).")) -> None:
    """Stop everything `dev up` started; leaves no process and no port behind."""
    DevStack(dev_state_dir()).down(_say, purge=purge)


@dev_app.command()
def env() -> None:
    """Print `export KUBECONFIG=…`, `export TEMPORAL_ADDRESS=…` and the Temporal client certificate
    (TEMPORAL_TLS_* for the temporal CLI, AI_INFERENCE_TEMPORAL__TLS__* for ai-inference) of the stack."""
    for key, value in DevStack(dev_state_dir()).env().items():
        typer.echo(f"export {key}={shlex.quote(value)}")


@dev_app.command()
def status() -> None:
    """Which processes of the stack run, and where their logs are."""
    stack = DevStack(dev_state_dir())
    running = stack.running()
    named = ("temporal", "temporal-tls", "postgres", "catalog", "planner", "worker", "watcher", "fleet")
    # With --replicas: worker-1, watcher-1, ...
    for name in (*named, *sorted(n for n in running if n.startswith(("worker-", "watcher-")))):
        state = f"pid {running[name]}" if name in running else "stopped"
        typer.echo(f"{name:<12} {state:<12} {stack.logs / (name + '.log')}")
    typer.echo(f"ports: {stack.ports()}")


@dev_app.command()
def fleet(
    kubeconfig: str = typer.Option(..., help="Kubeconfig of the local cluster."),
    engine_root: str | None = typer.Option(None, help="Where the real engines keep their logs and HOME folders."),
) -> None:
    """Run the stand-in runtimes, real engines and volume binder of the local cluster (started by `dev up`)."""
    import signal
    import threading

    from activities.kube import load_api_client
    from devstack.standins.fleet import StandInFleet
    from worker.logs import configure_logging

    configure_logging()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # The stack's Ingress controller reaches real engines by their pods' addresses (where root).
    standins = StandInFleet(load_api_client(kubeconfig, "dev-fleet"), real_pod_addresses=True)
    if engine_root:
        from pathlib import Path

        standins.engine_root = Path(engine_root)
    standins.start()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        standins.stop()
