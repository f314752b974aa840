"""Pod addresses made real on this machine, so that what routes by pod IP reaches a replica.

kwok gives every pod an address of the cluster's pod CIDR (``devstack.cluster.launcher.POD_CIDR``),
and the EndpointSlice controller publishes those addresses: what routes by them (an Ingress
controller, a scrape by pod address) reaches nothing, for no pod listens there. Where this process
may change the machine's addresses (root, or CAP_NET_ADMIN) and it is asked to
(``StandInFleet.real_pod_addresses``: ``dev up`` and the Ingress controller's test), the fleet adds a real engine's pod
address to the loopback interface (``ip address add <ip>/32 dev lo``) and starts the pod's endpoint
front on ``<ip>:8000`` (the container's port, what the Service targets), as a pod's network
namespace would have it; the address goes when the pod's engine stops. Elsewhere nothing changes:
the front listens on a free loopback port and only what uses the Service's stand-in URL reaches it.

The pod CIDR is not the machine's network (``10.244.0.0/16``; ``pod_network_free`` checks it), so
an address added here shadows nothing.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)

DEVICE = "lo"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)


def pod_network_free(cidr: str) -> bool:
    """Whether no address or route of the machine's own lies in ``cidr`` (outside loopback)."""
    network = ipaddress.ip_network(cidr)
    shown = _ip("-o", "-4", "route", "show")
    for line in shown.stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("default", "") or " dev lo " in f" {line} ":
            continue
        try:
            if ipaddress.ip_network(first, strict=False).overlaps(network):
                return False
        except ValueError:
            continue
    return True


@dataclass
class PodAddresses:
    """The pod addresses this process added to the loopback interface, and whether it can."""

    cidr: str
    _held: dict[str, int] = field(default_factory=dict)  # address -> how many replicas use it
    _usable: bool | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, address: str | None) -> bool:
        """Add ``address`` (a pod's IP in ``cidr``) to the loopback interface; False when it cannot be."""
        if not address or not self._in_cidr(address):
            return False
        with self._lock:
            if self._usable is None:
                self._usable = shutil.which("ip") is not None and pod_network_free(self.cidr)
            if not self._usable:
                return False
            if address in self._held:
                self._held[address] += 1
                return True
            added = _ip("address", "add", f"{address}/32", "dev", DEVICE)
            if added.returncode != 0 and "File exists" not in added.stderr:
                # No CAP_NET_ADMIN (not root): the front keeps a loopback port, for good.
                log.info("pod addresses stay unreal here", reason=added.stderr.strip())
                self._usable = False
                return False
            self._held[address] = 1
            return True

    def release(self, address: str | None) -> None:
        if not address:
            return
        with self._lock:
            count = self._held.get(address, 0)
            if count > 1:
                self._held[address] = count - 1
                return
            if self._held.pop(address, None) is not None:
                _ip("address", "del", f"{address}/32", "dev", DEVICE)

    def release_all(self) -> None:
        with self._lock:
            held = list(self._held)
            self._held.clear()
        for address in held:
            _ip("address", "del", f"{address}/32", "dev", DEVICE)

    def _in_cidr(self, address: str) -> bool:
        try:
            return ipaddress.ip_address(address) in ipaddress.ip_network(self.cidr)
        except ValueError:
            return False
