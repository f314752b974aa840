"""What a make-before-break move relies on, on the real StatefulSet controller (activities/builders/move.py).

A move surges: the set grows from n to 2n replicas with ``rollingUpdate.partition`` n, so the new
template reaches only the new replicas and the old ones keep running as they are. Then it retires:
``spec.ordinals.start`` rises by n and ``replicas`` goes back to n, so the controller deletes the n
lowest ordinals (the old replicas) and leaves the new ones running, untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api

from tests.polling import wait_until

pytestmark = pytest.mark.cluster

NAME = "moved"


def _template(placement: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": NAME}, "annotations": {"placement": placement}},
        # Replicas that never schedule: the controller's bookkeeping is what is tested.
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "no-such-node"},
            "containers": [{"name": "runtime", "image": "registry.invalid/runtime:1"}],
        },
    }


def _pods(core: CoreV1Api, namespace: str) -> dict[str, tuple[str, str]]:
    """Live pods: name -> (uid, placement)."""
    listed = core.list_namespaced_pod(namespace, label_selector=f"app={NAME}").items
    return {
        p.metadata.name: (p.metadata.uid, (p.metadata.annotations or {}).get("placement", ""))
        for p in listed
        if p.metadata.deletion_timestamp is None
    }


def _spec(replicas: int, partition: int, start: int, placement: str) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "ordinals": {"start": start},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
        "template": _template(placement),
    }


@pytest.mark.parametrize("count", [1, 2])
def test_a_surge_then_a_raised_first_ordinal_replaces_the_replicas_without_touching_the_new_ones(
    kube_admin: ApiClient, make_namespace: Callable[..., str], count: int
) -> None:
    namespace = make_namespace("sts-move")
    apps, core = AppsV1Api(kube_admin), CoreV1Api(kube_admin)
    body = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME},
        "spec": {
            "serviceName": NAME,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": NAME}},
            **_spec(count, 0, 0, "old"),
        },
    }
    apps.create_namespaced_stateful_set(namespace, body)
    old = {f"{NAME}-{i}" for i in range(count)}
    wait_until(lambda: set(_pods(core, namespace)) == old, timeout=30, what="the old replicas")
    before = _pods(core, namespace)

    # Surge: n new replicas from the new template; the partition keeps the old ones as they are.
    apps.patch_namespaced_stateful_set(NAME, namespace, {"spec": _spec(2 * count, count, 0, "new")})
    new = {f"{NAME}-{i}" for i in range(count, 2 * count)}
    wait_until(lambda: set(_pods(core, namespace)) == old | new, timeout=30, what="the surge replicas")
    surged = _pods(core, namespace)
    assert {n: surged[n] for n in old} == before, "an old replica was replaced during the surge"
    assert {surged[n][1] for n in new} == {"new"}

    # Retire: the first ordinal rises past the old replicas.
    apps.patch_namespaced_stateful_set(NAME, namespace, {"spec": _spec(count, 0, count, "new")})
    wait_until(lambda: set(_pods(core, namespace)) == new, timeout=30, what="the old replicas retired")
    after = _pods(core, namespace)
    assert after == {n: surged[n] for n in new}, "a new replica was made again when the old ones retired"

    # A second move from there: the partition counts from the first ordinal, not from zero.
    apps.patch_namespaced_stateful_set(NAME, namespace, {"spec": _spec(2 * count, count, count, "again")})
    newer = {f"{NAME}-{i}" for i in range(2 * count, 3 * count)}
    wait_until(lambda: set(_pods(core, namespace)) == new | newer, timeout=30, what="the second surge")
    second = _pods(core, namespace)
    assert {n: second[n] for n in new} == after, "a replica of the first move was replaced by the second surge"
    assert {second[n][1] for n in newer} == {"again"}
    apps.patch_namespaced_stateful_set(NAME, namespace, {"spec": _spec(count, 0, 2 * count, "again")})
    wait_until(lambda: set(_pods(core, namespace)) == newer, timeout=30, what="the first move's replicas retired")
    assert _pods(core, namespace) == {n: second[n] for n in newer}
