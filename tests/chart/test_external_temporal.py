"""The admin guide's "existing Temporal", proven: the chart's values for an external Temporal with TLS
on, rendered by Helm, run against a real one — the production Temporal of ``devstack.temporal_server``
(the Temporal server built from its Go module, on PostgreSQL, its frontend requiring a client
certificate of its CA).

The worker Deployment the chart renders is taken as it is: its ``AI_INFERENCE_TEMPORAL__*``
settings (address, namespace, TLS files, server name) and the Secret it mounts
(``temporal.tls.secretName``: ``ca.crt``, ``tls.crt``, ``tls.key`` at /etc/ai-inference/temporal-tls)
— the files laid out here as the kubelet would mount them. ``ai-inference worker`` started with
those settings connects and registers the module's search attributes in the namespace by itself;
without the client certificate (the values for Temporal Cloud: TLS, no Secret) the server refuses it.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

from devstack.cluster.launcher import LocalCluster
from devstack.temporal_server import ProductionTemporal
from tests.chart.helm import Helm, container_env, find
from tests.polling import until
from worker.cli import ExitCode
from workflows.search_attributes import ALL_KEYS

MOUNT = "/etc/ai-inference/temporal-tls"
REPO_ROOT = Path(__file__).resolve().parents[2]


def guide_values() -> dict[str, Any]:
    """The admin guide's values for a Temporal cluster of your own with mutual TLS (its yaml block
    that names the client certificate's Secret)."""
    guide = (REPO_ROOT / "docs" / "admin-guide.md").read_text()
    (block,) = [b for b in re.findall(r"^```yaml\n(.*?)^```\n", guide, re.M | re.S) if "temporal-client-tls" in b]
    values: dict[str, Any] = yaml.safe_load(block)
    return values


def external_values(server: ProductionTemporal, namespace: str) -> dict[str, Any]:
    """The admin guide's values, pointed at ``server``: its address, a namespace, the name its
    certificate carries. Everything else (TLS on, the Secret, the embedded server off) as the guide has it."""
    values = guide_values()
    temporal = values["aiInference"]["temporal"]
    assert temporal["embedded"] == {"enabled": False}
    assert temporal["tls"]["enabled"] is True
    temporal["address"] = server.address
    temporal["namespace"] = namespace
    temporal["tls"]["serverName"] = "localhost"
    return values


def mounted(deployment: dict[str, Any], server: ProductionTemporal, root: Path) -> dict[str, str]:
    """The worker's Temporal settings as the chart renders them, with the Secret the Deployment mounts
    laid out under ``root`` instead of /etc (its items, by the paths the volume names)."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {k: v for k, v in container_env(deployment).items() if k.startswith("AI_INFERENCE_TEMPORAL__")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    if "temporal-tls" in volumes:
        mount = next(m for m in container["volumeMounts"] if m["name"] == "temporal-tls")
        assert mount["mountPath"] == MOUNT
        issued = server.credentials.client("worker")
        contents = {"ca.crt": issued.ca, "tls.crt": issued.cert, "tls.key": issued.key}
        directory = root / "temporal-tls"
        directory.mkdir(mode=0o700, parents=True)
        for item in volumes["temporal-tls"]["secret"]["items"]:
            target = directory / item["path"]
            target.write_bytes(contents[item["key"]].read_bytes())
            target.chmod(0o600)
        env = {k: v.replace(MOUNT, str(directory)) for k, v in env.items()}
    return env


def start_worker(local_cluster: LocalCluster, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AI_INFERENCE_")}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "worker.cli", "worker", "--kubeconfig", str(local_cluster.kubeconfig("admin"))],
            cwd=REPO_ROOT,
            env={**clean, **env, "AI_INFERENCE_TEMPORAL__TASKQUEUE": f"chart-{uuid.uuid4().hex[:6]}"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def test_the_chart_values_for_an_existing_temporal_with_tls_connect_the_worker(
    helm: Helm, production_temporal: ProductionTemporal, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    namespace = f"chart-{uuid.uuid4().hex[:6]}"
    client = await production_temporal.connect("cli")
    await production_temporal.register_namespace(client, namespace)
    docs = helm.render(external_values(production_temporal, namespace))
    deployment = find(docs, "Deployment", "ai-inference-worker")
    env = mounted(deployment, production_temporal, tmp_path)
    assert env["AI_INFERENCE_TEMPORAL__ADDRESS"] == production_temporal.address
    assert env["AI_INFERENCE_TEMPORAL__NAMESPACE"] == namespace
    assert env["AI_INFERENCE_TEMPORAL__TLS__CLIENTCERTFILE"] == str(tmp_path / "temporal-tls" / "tls.crt")

    async def module_attributes() -> set[str]:
        listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
        return set(listed.custom_attributes) & {key.name for key in ALL_KEYS}

    assert await module_attributes() == set()
    log = tmp_path / "worker.log"
    worker = start_worker(local_cluster, env, log)
    try:

        async def registered() -> bool:
            assert worker.poll() is None, f"the worker exited {worker.returncode}:\n{log.read_text()[-3000:]}"
            return await module_attributes() == {key.name for key in ALL_KEYS}

        await until(registered, timeout=90, interval=0.5, what=f"the worker registered the attributes in {namespace}")
    finally:
        worker.kill()
        worker.wait(timeout=30)

    # The same values with the Secret's CA only (certKey and keyKey empty: no client certificate):
    # the server is verified, but it requires a client certificate, and the worker cannot get in.
    values = external_values(production_temporal, namespace)
    values["aiInference"]["temporal"]["tls"] |= {"certKey": "", "keyKey": ""}
    docs = helm.render(values)
    env = mounted(find(docs, "Deployment", "ai-inference-worker"), production_temporal, tmp_path / "ca-only")
    assert "AI_INFERENCE_TEMPORAL__TLS__SERVERCAFILE" in env
    assert "AI_INFERENCE_TEMPORAL__TLS__CLIENTCERTFILE" not in env
    refused = start_worker(local_cluster, env, tmp_path / "refused.log")
    code = await asyncio.to_thread(refused.wait, 120)
    said = (tmp_path / "refused.log").read_text()
    assert code == ExitCode.UNREACHABLE, said[-3000:]
    # Refused at the transport (the TLS handshake), not by Temporal: the server's "certificate
    # required" alert, or the connection it closes or resets before the client reads that alert (all
    # seen). The same values with the client certificate connected above: the certificate is the one
    # difference.
    assert "cannot reach Temporal" in said, said[-3000:]
    assert "transport" in said.lower(), said[-3000:]
