"""The first probe's wait for a ready replica, against the real API server: between its looks it
watches the order's StatefulSet, so a replica that gets ready is seen when it does (a fixed pause
added up to serveRetrySeconds to every Ready)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api

from activities.order import OrderActivities
from inference_api.payloads import OrderRef
from inference_api.settings import ModuleSettings

pytestmark = pytest.mark.cluster

WAIT = 20.0


def no_planner(_: Any) -> Any:
    raise AssertionError("nothing here plans")


def make_statefulset(apps: AppsV1Api, namespace: str, name: str) -> None:
    labels = {"app": name}
    apps.create_namespaced_stateful_set(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                # No replica runs: only the test writes the status the controller would.
                "replicas": 0,
                "serviceName": name,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": "registry.example/none:0"}]},
                },
            },
        },
    )


@dataclass
class Served:
    """A namespace with the order's StatefulSet "chat" (no replica), and the order's activities."""

    apps: AppsV1Api
    activities: OrderActivities
    ref: OrderRef


@pytest.fixture
def served(kube_admin: ApiClient, make_namespace: Callable[..., str]) -> Served:
    namespace = make_namespace("serving")
    apps = AppsV1Api(kube_admin)
    make_statefulset(apps, namespace, "chat")
    activities = OrderActivities(kube_admin, ModuleSettings(), planner=no_planner)
    return Served(apps, activities, OrderRef(namespace=namespace, name="chat", uid="uid-chat"))


def ready_in_thread(activities: OrderActivities, ref: OrderRef, wait: float) -> tuple[list[int], threading.Thread]:
    found: list[int] = []
    thread = threading.Thread(target=lambda: found.append(activities._ready_replicas(ref, wait)), daemon=True)
    thread.start()
    return found, thread


def test_a_replica_that_gets_ready_is_seen_then_not_at_the_end_of_the_wait(served: Served) -> None:
    apps, activities, ref = served.apps, served.activities, served.ref
    assert activities._ready_replicas(ref) == 0

    started = time.monotonic()
    found, thread = ready_in_thread(activities, ref, WAIT)
    time.sleep(1)
    apps.patch_namespaced_stateful_set_status("chat", ref.namespace, {"status": {"replicas": 1, "readyReplicas": 1}})
    thread.join(WAIT + 15)
    took = time.monotonic() - started

    assert found == [1]
    assert took < WAIT / 2, f"the ready replica was seen after {took:.1f} s, not when it came"


def test_with_no_replica_ready_the_wait_ends_with_none(served: Served) -> None:
    activities, ref = served.activities, served.ref

    started = time.monotonic()
    found, thread = ready_in_thread(activities, ref, 2)
    thread.join(30)

    assert found == [0]
    assert time.monotonic() - started >= 1  # it waited (the server ends the watch on its timeout)


def test_a_statefulset_deleted_while_waited_for_ends_the_wait(served: Served) -> None:
    apps, activities, ref = served.apps, served.activities, served.ref

    started = time.monotonic()
    found, thread = ready_in_thread(activities, ref, WAIT)
    time.sleep(1)
    apps.delete_namespaced_stateful_set("chat", ref.namespace)
    thread.join(WAIT + 15)

    assert found == [0]
    assert time.monotonic() - started < WAIT / 2
