"""TLS material for the connection tests (the planner's).

``Material(tmp)``: a CA with a server certificate for localhost/127.0.0.1 and a client certificate,
and a second, unrelated CA with its own client certificate (the "wrong" one), made with the local
stack's openssl helper. Temporal's mTLS is the real terminator's (``devstack.temporal_tls``, used by
every test through tests/fixtures/temporal.py), no stand-in.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from devstack.cluster.pki import IssuedCertificate, create_ca, issue_certificate


@dataclass(frozen=True)
class Material:
    server: IssuedCertificate
    client: IssuedCertificate
    rogue_client: IssuedCertificate

    @classmethod
    def make(cls, directory: Path) -> Material:
        ca = create_ca(directory, "test-ca")
        rogue_ca = create_ca(directory, "rogue-ca")
        return cls(
            server=issue_certificate(ca, directory, "server", sans=("DNS:localhost", "IP:127.0.0.1")),
            client=issue_certificate(ca, directory, "worker", usage="clientAuth"),
            rogue_client=issue_certificate(rogue_ca, directory, "rogue-worker", usage="clientAuth"),
        )

    def key_files(self) -> list[Path]:
        return [self.server.key, self.client.key, self.rogue_client.key]

    def server_context(self, require_client_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.server.ca))
        context.load_cert_chain(str(self.server.cert), str(self.server.key))
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
        context.set_alpn_protocols(["h2", "http/1.1"])
        return context
