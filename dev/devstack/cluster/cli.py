"""``ai-inference cluster build|up|down|env|status|inventory``."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
import yaml

from devstack.cluster import build as build_mod
from devstack.cluster import inventory as inv

if TYPE_CHECKING:
    from devstack.cluster.launcher import LocalCluster

cluster_app = typer.Typer(no_args_is_help=True)

STATE_OPTION = typer.Option(
    None,
    "--state-dir",
    help="Cluster state directory (default $AI_INFERENCE_STATE or ~/.local/state/ai-inference/cluster).",
)


def _echo(line: str) -> None:
    typer.echo(line, err=True)


def _cluster(state_dir: Path | None) -> LocalCluster:
    # Imported late: the kubernetes client costs startup time every other command would pay.
    from devstack.cluster.launcher import LocalCluster

    return LocalCluster(state_dir)


@cluster_app.command("build")
def build_cmd(
    tools: list[str] = typer.Argument(None, help=f"Tools to build (default all): {', '.join(build_mod.TOOLS)}."),
    check: bool = typer.Option(False, help="Only report what is built and what is missing."),
) -> None:
    """Build the pinned control-plane binaries that are missing (cached per version)."""
    selected = tuple(tools) if tools else tuple(build_mod.TOOLS)
    if check:
        missing = 0
        for name, version, path, present in build_mod.describe(selected):
            typer.echo(f"{'ok     ' if present else 'MISSING'} {name:<24} {version:<9} {path}")
            missing += not present
        raise typer.Exit(1 if missing else 0)
    todo = build_mod.missing_binaries(selected)
    started = time.monotonic()
    try:
        build_mod.ensure_binaries(selected, progress=_echo)
    except build_mod.BuildError as e:
        _echo(f"error: {e}")
        raise typer.Exit(1) from None
    elapsed = time.monotonic() - started
    for name, version, path, _ in build_mod.describe(selected):
        typer.echo(f"{name:<24} {version:<9} {path}")
    kind = f"cold: built {len(todo)} binaries" if todo else "warm: nothing to build"
    _echo(f"{kind} in {elapsed:.2f}s")


@cluster_app.command("up")
def up_cmd(
    state_dir: Path | None = STATE_OPTION,
    inventory: bool = typer.Option(True, help="Apply the simulated GPU inventory."),
    timeout: float = typer.Option(180, help="Seconds to wait for readiness."),
) -> None:
    """Start the local control plane (etcd, apiserver, controller-manager, scheduler, kwok)."""
    from devstack.cluster.build import BuildError
    from devstack.cluster.launcher import ClusterError

    cluster = _cluster(state_dir)
    started = time.monotonic()
    try:
        did = cluster.up(inventory=inventory, timeout=timeout, progress=_echo)
    except (ClusterError, BuildError, TimeoutError) as e:
        _echo(f"error: {e}")
        raise typer.Exit(1) from None
    if did:
        _echo(f"up in {time.monotonic() - started:.1f}s; logs in {cluster.logs_dir}")
    _echo(f'use it:  eval "$(ai-inference cluster env{_state_arg(state_dir)})"')


def _state_arg(state_dir: Path | None) -> str:
    return f" --state-dir {shlex.quote(str(state_dir))}" if state_dir else ""


@cluster_app.command("down")
def down_cmd(
    state_dir: Path | None = STATE_OPTION,
    purge: bool = typer.Option(False, help="Also delete the state directory, logs included."),
) -> None:
    """Stop every process of the local cluster and free its ports."""
    _cluster(state_dir).down(purge=purge, progress=_echo)


@cluster_app.command("env")
def env_cmd(
    state_dir: Path | None = STATE_OPTION,
    user: str = typer.Option("admin", help="Whose kubeconfig KUBECONFIG points at: admin, module-admin, ns-user."),
) -> None:
    """Print `export` lines: KUBECONFIG, and each user's kubeconfig path and token."""
    cluster = _cluster(state_dir)
    if not cluster.is_up():
        _echo(f"no running cluster in {cluster.state_dir}; run `ai-inference cluster up`")
        raise typer.Exit(1)
    for key, value in cluster.env(user).items():
        typer.echo(f"export {key}={shlex.quote(value)}")


@cluster_app.command("status")
def status_cmd(state_dir: Path | None = STATE_OPTION) -> None:
    """Say whether the cluster is up, and the state of each process."""
    cluster = _cluster(state_dir)
    st = cluster.status()
    state = cluster.state()
    if state is None:
        typer.echo(f"down (no cluster in {st.state_dir})")
        raise typer.Exit(1)
    typer.echo(f"{'up' if st.up else 'DEGRADED'}  {st.server}  ready in {st.ready_seconds}s  state {st.state_dir}")
    for rec in state.processes:
        alive = "running" if st.processes.get(rec.name) else "EXITED "
        ports = ",".join(f"{k}={v}" for k, v in rec.ports.items())
        typer.echo(f"  {rec.name:<24} {alive} pid {rec.pid:<7} {ports:<28} {rec.log}")
    if not st.up:
        raise typer.Exit(1)


@cluster_app.command("inventory")
def inventory_cmd(
    state_dir: Path | None = STATE_OPTION,
    print_only: bool = typer.Option(False, "--print", help="Print the objects as YAML instead of applying them."),
) -> None:
    """Apply the simulated GPU inventory (nodes, DeviceClasses, ResourceSlices, PhysicalGPUs)."""
    if print_only:
        docs = [*inv.inventory_objects(), *inv.physical_gpu_statuses()]
        typer.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
        return
    from devstack.cluster.launcher import apply_inventory

    cluster = _cluster(state_dir)
    if not cluster.is_up():
        _echo(f"no running cluster in {cluster.state_dir}; run `ai-inference cluster up`")
        raise typer.Exit(1)
    with cluster.api_client("admin") as api:
        from devstack.cluster import kube

        count = apply_inventory(kube.dynamic_client(api, cluster.state_dir / "discovery-admin.json"))
    _echo(f"applied {count} inventory objects from {inv.INVENTORY_FILE}")
