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


H100_OPTION = typer.Option(None, "--h100-nodes", min=0, help="Simulated H100 nodes (8 H100 each: 4 MPS, 4 exclusive).")
MIG_OPTION = typer.Option(None, "--mig-nodes", min=0, help="Simulated MIG nodes (one H100 cut into two 3g.40gb).")
T4_OPTION = typer.Option(None, "--t4-nodes", min=0, help="Simulated T4 nodes (4 MPS-shared T4 each).")
CPU_OPTION = typer.Option(None, "--cpu-nodes", min=0, help="Simulated nodes without a GPU.")
NODE_CPU_OPTION = typer.Option(None, "--node-cpu", help="Every simulated node's CPU (e.g. 1000; default: the file's).")
NODE_MEMORY_OPTION = typer.Option(None, "--node-memory", help="Every simulated node's memory (e.g. 8Ti).")


def _fleet(
    state_dir: Path | None,
    h100: int | None,
    mig: int | None,
    t4: int | None,
    cpu: int | None,
    node_cpu: str | None = None,
    node_memory: str | None = None,
) -> inv.FleetSize | None:
    """The fleet size asked for (each value not given: as the cluster has it), None when none is given."""
    if all(v is None for v in (h100, mig, t4, cpu, node_cpu, node_memory)):
        return None
    kept = inv.fleet_size(_cluster(state_dir).state_dir)
    return inv.FleetSize(
        h100_nodes=kept.h100_nodes if h100 is None else h100,
        mig_nodes=kept.mig_nodes if mig is None else mig,
        t4_nodes=kept.t4_nodes if t4 is None else t4,
        cpu_nodes=kept.cpu_nodes if cpu is None else cpu,
        node_cpu=node_cpu or kept.node_cpu,
        node_memory=node_memory or kept.node_memory,
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
    h100_nodes: int | None = H100_OPTION,
    mig_nodes: int | None = MIG_OPTION,
    t4_nodes: int | None = T4_OPTION,
    cpu_nodes: int | None = CPU_OPTION,
    node_cpu: str | None = NODE_CPU_OPTION,
    node_memory: str | None = NODE_MEMORY_OPTION,
) -> None:
    """Start the local control plane (etcd, apiserver, controller-manager, scheduler, kwok).

    The simulated fleet is the inventory file's (one node of each shape) unless sized with
    ``--h100-nodes/--mig-nodes/--t4-nodes/--cpu-nodes``; the size is kept with the cluster."""
    from devstack.cluster.build import BuildError
    from devstack.cluster.launcher import ClusterError

    cluster = _cluster(state_dir)
    size = _fleet(state_dir, h100_nodes, mig_nodes, t4_nodes, cpu_nodes, node_cpu, node_memory)
    if size is not None:
        inv.save_fleet(cluster.state_dir, size)
        _echo(f"simulated fleet: {size.describe()}")
    started = time.monotonic()
    try:
        did = cluster.up(inventory=inventory, timeout=timeout, progress=_echo)
    except (ClusterError, BuildError, TimeoutError) as e:
        _echo(f"error: {e}")
        raise typer.Exit(1) from None
    if did:
        _echo(f"up in {time.monotonic() - started:.1f}s; logs in {cluster.logs_dir}")
    elif size is not None and inventory:
        _apply_fleet(cluster)
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
    h100_nodes: int | None = H100_OPTION,
    mig_nodes: int | None = MIG_OPTION,
    t4_nodes: int | None = T4_OPTION,
    cpu_nodes: int | None = CPU_OPTION,
    node_cpu: str | None = NODE_CPU_OPTION,
    node_memory: str | None = NODE_MEMORY_OPTION,
) -> None:
    """Apply the simulated GPU inventory (nodes, DeviceClasses, ResourceSlices, PhysicalGPUs); a size
    given grows the fleet (nodes are added, never removed)."""
    size = _fleet(state_dir, h100_nodes, mig_nodes, t4_nodes, cpu_nodes, node_cpu, node_memory)
    if print_only:
        fleet = inv.sized_inventory(size or inv.fleet_size(_cluster(state_dir).state_dir))
        docs = [*inv.inventory_objects(fleet), *inv.physical_gpu_statuses(fleet)]
        typer.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
        return
    cluster = _cluster(state_dir)
    if not cluster.is_up():
        _echo(f"no running cluster in {cluster.state_dir}; run `ai-inference cluster up`")
        raise typer.Exit(1)
    if size is not None:
        inv.save_fleet(cluster.state_dir, size)
    _apply_fleet(cluster)


def _apply_fleet(cluster: LocalCluster) -> None:
    from devstack.cluster import kube
    from devstack.cluster.launcher import apply_inventory

    fleet = inv.fleet_inventory(cluster.state_dir)
    with cluster.api_client("admin") as api:
        count = apply_inventory(kube.dynamic_client(api, cluster.state_dir / "discovery-admin.json"), fleet)
    _echo(f"applied {count} inventory objects ({len(fleet.nodes)} nodes) from {inv.INVENTORY_FILE}")
