"""The endpoint front's connections: an idle one is closed only by the side that opened it.

A server that closes an idle keep-alive connection races the client's next request on it: the
request is lost without an answer (a reset or an EOF at the client). That is how a loaded endpoint
lost requests (2 of 2,125 through the front with 96 completions in flight, none of 2,284 straight
at the engine: ``tests/engine/test_engine_autoscaling.py`` counts them): the front kept uvicorn's
5 s, the same as httpx's pool expiry, and under load the two met. So the front keeps a client's idle
connection longer than the clients and proxies in front of it keep theirs (ingress-nginx: 60 s), and
lets its own idle connections to the engine go well before vLLM closes them (5 s; the CPU build's
value is checked in ``test_cpu_build_compat.py``). No engine here: the stand-in runtime is the upstream.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator

import pytest

from activities.builders import endpoint_front_app as front_app
from devstack.standins.runtime import StandInRuntime
from tests.builders.test_endpoint_guard import Front, _port, running_front

TOKEN = "front-connections-token"
MODEL = "Qwen/Qwen2.5-7B-Instruct"
# ingress-nginx's upstream-keepalive-timeout: how long the Ingress keeps an idle connection to a pod.
INGRESS_UPSTREAM_KEEPALIVE_SECONDS = 60
# Past uvicorn's default keep-alive (5 s), which the front had.
IDLE_SECONDS = 6.0


@pytest.fixture(scope="module")
def front() -> Iterator[Front]:
    with StandInRuntime(MODEL, token=TOKEN) as runtime, running_front(_port(runtime.url), TOKEN) as started:
        yield started


def chat(connection: http.client.HTTPConnection) -> int:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connection.request("POST", "/v1/chat/completions", body, headers)
    answer = connection.getresponse()
    answer.read()
    return answer.status


def test_a_connection_idle_past_five_seconds_still_carries_the_next_request(front: Front) -> None:
    host, port = front.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        assert chat(connection) == 200
        sock = connection.sock
        time.sleep(IDLE_SECONDS)
        # The same connection (http.client would reconnect silently only after a clean close it saw).
        assert chat(connection) == 200
        assert connection.sock is sock
    finally:
        connection.close()


def test_the_front_outlasts_the_ingress_and_leaves_the_engine_first() -> None:
    assert front_app.CLIENT_KEEP_ALIVE_SECONDS > INGRESS_UPSTREAM_KEEPALIVE_SECONDS
    assert front_app.UPSTREAM_IDLE_SECONDS < front_app.ENGINE_KEEP_ALIVE_SECONDS / 2
