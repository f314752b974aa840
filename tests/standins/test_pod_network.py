"""Pod addresses made real on the loopback interface (``devstack.standins.pod_network``): only a pod
address of the cluster's pod CIDR is added, a second replica of the same address shares it, and the
last release removes it. Where the process may not change addresses (not root), nothing is added
and the fleet keeps its loopback ports."""

from __future__ import annotations

import os
import socket
import subprocess

from devstack.cluster.launcher import POD_CIDR
from devstack.standins.pod_network import PodAddresses, pod_network_free

ADDRESS = "10.244.250.17"


def on_loopback(address: str) -> bool:
    shown = subprocess.run(["ip", "-o", "-4", "address", "show", "dev", "lo"], capture_output=True, text=True)
    return f" {address}/32 " in shown.stdout


def test_the_pod_cidr_is_not_the_machines_network() -> None:
    assert pod_network_free(POD_CIDR)
    assert not pod_network_free("0.0.0.0/0")  # the default route's network overlaps everything


def test_only_a_pod_address_is_added_shared_while_in_use_and_removed_last() -> None:
    addresses = PodAddresses(POD_CIDR)
    assert not addresses.claim(None)
    assert not addresses.claim("192.0.2.77")  # not a pod address: never touched
    assert not addresses.claim("not-an-ip")
    if os.geteuid() != 0:
        assert not addresses.claim(ADDRESS)
        assert not on_loopback(ADDRESS)
        return
    try:
        assert addresses.claim(ADDRESS)
        assert addresses.claim(ADDRESS)  # a second replica on the same address
        assert on_loopback(ADDRESS)
        with socket.socket() as listener:  # a pod's port on its own address
            listener.bind((ADDRESS, 8000))
            listener.listen()
            with socket.create_connection((ADDRESS, 8000), timeout=5):
                pass
        addresses.release(ADDRESS)
        assert on_loopback(ADDRESS)  # the other one still uses it
        addresses.release(ADDRESS)
        assert not on_loopback(ADDRESS)
    finally:
        addresses.release_all()
