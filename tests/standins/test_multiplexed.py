"""Many orders from one stand-in server (one port): each order its own model, token, auth, failures,
load gauges and /metrics, told apart by path prefix or Host; and the simulated fleet's size."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devstack.cluster.inventory import (
    FleetSize,
    fleet_inventory,
    inventory_objects,
    load_inventory,
    save_fleet,
    sized_inventory,
)
from devstack.standins.runtime import MultiplexedRuntime, order_path

CHAT = "Qwen/Qwen2.5-7B-Instruct"
EMBED = "BAAI/bge-m3"
TOKEN_A = "mux-token-a-0c1d-do-not-log"
TOKEN_B = "mux-token-b-77e2-do-not-log"


@pytest.fixture(scope="module")
def mux() -> Iterator[MultiplexedRuntime]:
    with MultiplexedRuntime() as server:
        server.add("team-a", "chat", CHAT, TOKEN_A)
        server.add("team-b", "embed", EMBED, TOKEN_B)
        server.add("team-b", "open", CHAT, None)
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def url(mux: MultiplexedRuntime, namespace: str, name: str) -> str:
    runtime = mux.get(namespace, name)
    assert runtime is not None
    return runtime.url


def test_each_order_lists_its_own_model_behind_its_own_token(mux: MultiplexedRuntime, client: httpx.Client) -> None:
    a, b = url(mux, "team-a", "chat"), url(mux, "team-b", "embed")
    assert a.startswith(mux.url)
    assert b.startswith(mux.url)
    assert a.endswith(order_path("team-a", "chat"))
    models = client.get(f"{a}/v1/models", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert [m["id"] for m in models.json()["data"]] == [CHAT]
    models = client.get(f"{b}/v1/models", headers={"Authorization": f"Bearer {TOKEN_B}"})
    assert [m["id"] for m in models.json()["data"]] == [EMBED]
    # One order's token opens nothing of another's.
    refused = client.get(f"{b}/v1/models", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert (refused.status_code, refused.json()) == (401, {"error": "Unauthorized"})
    assert client.get(f"{a}/v1/models").status_code == 401
    # Each order is served as its pods publish it, behind the endpoint front: /health and /metrics open,
    # vLLM's unguarded routes 401 without the token and 404 with it; an order without a token is open.
    assert client.get(f"{a}/health").status_code == 200
    assert client.get(f"{a}/metrics").status_code == 200
    for path in ("/tokenize", "/invocations", "/rerank"):
        answer = client.post(f"{a}{path}", json={"prompt": "two words"})
        assert (answer.status_code, answer.json()) == (401, {"error": "Unauthorized"}), path
        with_token = client.post(f"{a}{path}", json={}, headers={"Authorization": f"Bearer {TOKEN_A}"})
        assert with_token.status_code == 404, path
    assert client.get(f"{url(mux, 'team-b', 'open')}/v1/models").status_code == 200
    assert client.post(f"{url(mux, 'team-b', 'open')}/invocations", json={}).status_code == 404
    # The stand-in's own test hooks are not the pod's: they pass.
    assert client.get(f"{a}/admin/stats").status_code == 200


def test_the_order_is_also_told_apart_by_host(mux: MultiplexedRuntime, client: httpx.Client) -> None:
    response = client.get(
        f"{mux.url}/v1/models", headers={"Host": "embed.team-b.svc", "Authorization": f"Bearer {TOKEN_B}"}
    )
    assert [m["id"] for m in response.json()["data"]] == [EMBED]
    assert client.get(f"{mux.url}/v1/models", headers={"Host": "embed.team-b.svc"}).status_code == 401


def test_a_path_of_no_order_answers_404(mux: MultiplexedRuntime, client: httpx.Client) -> None:
    assert client.get(f"{mux.url}{order_path('team-a', 'gone')}/v1/models").status_code == 404
    assert client.get(f"{mux.url}/v1/models").status_code == 404


def test_failure_load_and_metrics_are_per_order(mux: MultiplexedRuntime, client: httpx.Client) -> None:
    a, b = url(mux, "team-a", "chat"), url(mux, "team-b", "embed")
    client.post(f"{a}/admin/fail", json={"status": 500})
    try:
        answer = client.get(f"{a}/v1/models", headers={"Authorization": f"Bearer {TOKEN_A}"})
        assert answer.status_code == 500
        assert client.get(f"{b}/v1/models", headers={"Authorization": f"Bearer {TOKEN_B}"}).status_code == 200
    finally:
        client.post(f"{a}/admin/recover")
    client.post(f"{b}/admin/load", json={"running": 3, "waiting": 7})
    page_a, page_b = client.get(f"{a}/metrics").text, client.get(f"{b}/metrics").text
    assert f'vllm:num_requests_waiting{{engine="0",model_name="{EMBED}"}} 7.0' in page_b
    assert f'vllm:num_requests_waiting{{engine="0",model_name="{CHAT}"}} 0.0' in page_a
    assert EMBED not in page_a
    stats = client.get(f"{a}/admin/stats").json()
    assert stats["model"] == CHAT
    assert stats["requests"]["models"] >= 2


def test_orders_come_and_go_through_the_admin_routes(mux: MultiplexedRuntime, client: httpx.Client) -> None:
    added = client.post(f"{mux.url}/admin/orders", json={"namespace": "ns", "name": "late", "model": CHAT})
    assert added.status_code == 201
    late = added.json()["url"]
    assert client.get(f"{late}/v1/models").status_code == 200
    assert "ns/late" in client.get(f"{mux.url}/admin/orders").json()["orders"]
    assert client.delete(f"{mux.url}/admin/orders/ns/late").status_code == 204
    assert client.get(f"{late}/v1/models").status_code == 404
    bad = client.post(f"{mux.url}/admin/orders", json={"name": "x"})
    assert bad.status_code == 400


def test_a_stopped_order_is_absent_and_the_others_serve(client: httpx.Client) -> None:
    with MultiplexedRuntime() as server:
        first = server.add("ns", "one", CHAT)
        second = server.add("ns", "two", CHAT)
        first.stop()
        assert not first.running
        assert second.running
        assert client.get(f"{first.url}/v1/models").status_code == 404
        assert client.get(f"{second.url}/v1/models").status_code == 200


def test_the_multiplexed_server_runs_as_its_own_process(tmp_path: Path, client: httpx.Client) -> None:
    port_file = tmp_path / "port"
    cmd = [sys.executable, "-m", "devstack.standins.runtime", "--multiplexed", "--port", "0"]
    child = subprocess.Popen([*cmd, "--port-file", str(port_file)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (port_file.exists() and port_file.read_text()):
            assert child.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port_file.read_text()}"
        while True:
            try:
                added = client.post(f"{base}/admin/orders", json={"namespace": "n", "name": "o", "model": CHAT})
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server does not answer"
                time.sleep(0.05)
        models = client.get(f"{added.json()['url']}/v1/models")
        assert [m["id"] for m in models.json()["data"]] == [CHAT]
    finally:
        child.terminate()
        child.wait(10)


# ------------------------------------------------------------------------------ the fleet's size


def test_the_default_fleet_is_the_inventory_file() -> None:
    assert sized_inventory() == load_inventory()
    assert fleet_inventory(None) == load_inventory()


def test_a_sized_fleet_has_that_many_nodes_of_each_shape(tmp_path: Path) -> None:
    size = FleetSize(h100_nodes=3, mig_nodes=0, t4_nodes=2, cpu_nodes=1)
    fleet = sized_inventory(size)
    assert [n.name for n in fleet.nodes] == ["gpu-h100-0", "gpu-h100-1", "gpu-h100-2", "gpu-t4-0", "gpu-t4-1", "cpu-0"]
    assert len(fleet.devices) == 3 * 8 + 2 * 4
    # Every device, slice and PhysicalGPU is named after its own node: nothing collides.
    objects = list(inventory_objects(fleet))
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names))
    gpus = {(d.node, d.physical_gpu) for d in fleet.devices}
    assert all(gpu.startswith(node + "-gpu-") for node, gpu in gpus)
    # Kept with the cluster, read back.
    save_fleet(tmp_path, size)
    assert fleet_inventory(tmp_path) == fleet
    with pytest.raises(ValueError, match="negative"):
        FleetSize(t4_nodes=-1)


def test_a_fleet_for_many_small_orders_gives_every_node_its_cpu_and_memory(tmp_path: Path) -> None:
    size = FleetSize(h100_nodes=2, node_cpu="1000", node_memory="4Ti")
    nodes = [o for o in inventory_objects(sized_inventory(size)) if o["kind"] == "Node"]
    assert {(n["status"]["allocatable"]["cpu"], n["status"]["allocatable"]["memory"]) for n in nodes} == {
        ("1000", "4Ti")
    }
    save_fleet(tmp_path, size)
    assert fleet_inventory(tmp_path) == sized_inventory(size)
