"""The local stack's Ingress controller: Traefik (v3) built from its Go module, watching the local API
server's Ingresses, Services, EndpointSlices and TLS Secrets, and serving their hosts over HTTPS.

Why Traefik: a Deckhouse cluster runs ingress-nginx, whose controller needs an OpenResty build of
nginx with its Lua modules and libraries, which nothing this project can reach serves; NGINX Inc.'s
controller, HAProxy's and Contour (Envoy) are not served either. Traefik is a production Ingress
controller that implements the Ingress API the module writes the way ingress-nginx does: host
rules, ``ingressClassName``, TLS from the Secret ``spec.tls`` names (matched by SNI), backends by
the Service's EndpointSlices (ready endpoints only), and responses streamed as the backend writes
them. What it does not read is ingress-nginx's own annotations (``nginx.ingress.kubernetes.io/
proxy-buffering: off``, the timeouts, the body size; ``activities/builders/exposure.py``): Traefik
needs none of them to stream a response unbuffered, so the test of streaming through it holds for
ingress-nginx only with those annotations, which the builder tests check.

Built once into the cache (``devstack.go_build``: ``<cache>/traefik-<version>/bin/traefik``; a cold
build is about :data:`COLD_BUILD_MINUTES` minutes on two cores). Started with one HTTPS entry point
on loopback (every router on it is TLS; each Ingress's certificate is served for its hosts, the
controller's own self-signed one otherwise), the Kubernetes Ingress provider reading the cluster
through ``KUBECONFIG``, and only the Ingresses of :data:`INGRESS_CLASS` (an IngressClass naming
Traefik's controller, made by :func:`ensure_ingress_class`).

A request reaches an order's replica through it only where the replica listens on its pod's address
(``devstack.standins.pod_network``: the stand-in fleet's real engines, on a machine that lets it
add the address): kwok's pod addresses are otherwise unreal.

``python -m devstack.ingress_controller`` builds it (if missing) and prints the binary's path.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes.client import ApiClient, NetworkingV1Api
from kubernetes.client.exceptions import ApiException

from devstack.go_build import GoBuildError, GoProgram, Progress, ensure_built
from devstack.process_group import log_tail, start_group, stop_group, until_answers
from devstack.temporal_server import free_port

MODULE = "github.com/traefik/traefik/v3"
# The newest release whose module builds from what the Go module proxy serves here: v3.7.x replaces a
# nested module (pkg/config/dynamic/ext) that a module download leaves out.
VERSION = "v3.6.12"
PACKAGE = "./cmd/traefik"
COLD_BUILD_MINUTES = 6
INGRESS_CLASS = "ai-inference-local"
CONTROLLER = "traefik.io/ingress-controller"


class IngressControllerError(RuntimeError):
    """Traefik could not be built or started; the message says what failed and where its log is."""


def traefik_program(version: str = VERSION) -> GoProgram:
    return GoProgram("traefik", MODULE, version, PACKAGE, COLD_BUILD_MINUTES)


def ensure_traefik(progress: Progress | None = None, version: str = VERSION) -> GoProgram:
    """Build Traefik ``version`` unless the cache has it; cheap when it does."""
    try:
        return ensure_built(traefik_program(version), progress)
    except GoBuildError as err:
        raise IngressControllerError(str(err)) from err


def ensure_ingress_class(api: ApiClient, name: str = INGRESS_CLASS) -> None:
    """The IngressClass whose Ingresses the local controller serves (the module's
    ``exposure.ingressClassName`` names it)."""
    body = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": name},
            "spec": {"controller": CONTROLLER}}  # fmt: skip
    try:
        NetworkingV1Api(api).create_ingress_class(body)
    except ApiException as err:
        if err.status != 409:
            raise


@dataclass
class IngressController:
    """Traefik on loopback: HTTPS at :attr:`https_port`, its ping at :attr:`ping_url`."""

    directory: Path
    kubeconfig: Path
    binary: GoProgram
    ingress_class: str = INGRESS_CLASS
    https_port: int = field(default_factory=free_port)
    ping_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def ping_url(self) -> str:
        return f"http://127.0.0.1:{self.ping_port}/ping"

    @property
    def log_file(self) -> Path:
        return self.directory / "traefik.log"

    def argv(self) -> list[str]:
        return [
            str(self.binary.path),
            f"--entryPoints.websecure.address=127.0.0.1:{self.https_port}",
            "--entryPoints.websecure.http.tls=true",
            f"--entryPoints.ping.address=127.0.0.1:{self.ping_port}",
            "--ping=true",
            "--ping.entryPoint=ping",
            "--providers.kubernetesingress=true",
            f"--providers.kubernetesingress.ingressClass={self.ingress_class}",
            "--log.level=INFO",
            "--global.checkNewVersion=false",
            "--global.sendAnonymousUsage=false",
        ]

    def start(self) -> IngressController:
        env = {"KUBECONFIG": str(self.kubeconfig), "PATH": "/usr/bin:/bin"}
        self.process = start_group(self.argv(), self.log_file, self.directory, env)
        return self

    def stop(self, timeout: float = 10) -> None:
        stop_group(self.process, signal.SIGTERM, timeout)

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_file, chars)

    def ready(self, timeout: float = 60) -> None:
        """Until its ping answers (its entry points and providers are up)."""

        def pinged() -> bool:
            with urllib.request.urlopen(self.ping_url, timeout=2) as response:
                return bool(response.status == 200)

        until_answers(
            self.process, pinged, "Traefik", f"Traefik's ping on {self.ping_url}", self.log_file,
            IngressControllerError, timeout,
        )  # fmt: skip


@contextlib.contextmanager
def ingress_controller(
    directory: Path, kubeconfig: Path, api: ApiClient, progress: Progress | None = None
) -> Iterator[IngressController]:
    """Traefik (built if missing) and its IngressClass for the block; stopped on the way out."""
    ensure_ingress_class(api)
    controller = IngressController(directory, kubeconfig, ensure_traefik(progress)).start()
    try:
        controller.ready()
        yield controller
    finally:
        controller.stop()


def main() -> None:
    binary = ensure_traefik(lambda line: print(line, file=sys.stderr, flush=True))
    print(binary.path)


if __name__ == "__main__":
    main()
