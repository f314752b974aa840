"""The module's StatefulSet update strategy on the real StatefulSet controller: a replica that went while
its set's template changed (what the observer does to a replica whose claim came from a replaced
template) comes back from the new template.

Why the strategy names its partition (``activities/builders/statefulset._update_strategy``): with
``{type: RollingUpdate}`` and no ``rollingUpdate``, the controller makes a missing replica from the
revision its status last counted (``status.currentReplicas``), and its rolling update may delete that
replica in the same pass before counting it, taking ``currentReplicas`` to -1; the status write is
refused, the status never moves on, and the old replica is made and deleted again and again. Seen on
the local stack in the 200-order burst (a moved order Pending for good, ``status.currentReplicas:
Invalid value: -1`` in the controller-manager's log; the set recovered within seconds once its
partition was named). This test does not reproduce that race (the controller here is idle and sees
the two changes one at a time); it holds the behaviour the repair relies on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from activities.builders.statefulset import build_statefulset
from tests import factories as f
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

NAME = "replaced"
HOLD = "ai.deckhouse.io/test-hold"


def _template(version: str, held: bool) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {"app": NAME},
            "annotations": {"placement": version},
            "finalizers": [HOLD] if held else [],
        },
        # A replica that never schedules: like one whose claim no device can take.
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "no-such-node"},
            "containers": [{"name": "runtime", "image": "registry.invalid/runtime:1"}],
        },
    }


def _pod(core: CoreV1Api, namespace: str) -> Any:
    try:
        return core.read_namespaced_pod(f"{NAME}-0", namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _release(core: CoreV1Api, namespace: str) -> None:
    pod = _pod(core, namespace)
    if pod is not None and HOLD in (pod.metadata.finalizers or []):
        with contextlib.suppress(ApiException):
            core.patch_namespaced_pod(f"{NAME}-0", namespace, {"metadata": {"finalizers": None}})


def test_a_replica_gone_while_the_template_changed_comes_back_from_the_new_template(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    namespace = make_namespace("sts-update")
    apps, core = AppsV1Api(kube_admin), CoreV1Api(kube_admin)
    strategy = build_statefulset(f.inputs())["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    body = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "serviceName": NAME,
            "podManagementPolicy": "Parallel",
            "updateStrategy": strategy,
            "selector": {"matchLabels": {"app": NAME}},
            # The first replica is held by a finalizer when deleted, so that it goes only once the set's
            # new template is in place: the controller then meets both changes in one pass.
            "template": _template("old", held=True),
        },
    }
    apps.create_namespaced_stateful_set(namespace, body)
    try:
        wait_until(lambda: _pod(core, namespace) is not None, timeout=30, what="the first replica")
        wait_until(
            lambda: (apps.read_namespaced_stateful_set(NAME, namespace).status.current_replicas or 0) == 1,
            timeout=30,
            what="the set's status counting its replica",
        )
        core.delete_namespaced_pod(f"{NAME}-0", namespace)  # the observer: a stale claim
        apps.patch_namespaced_stateful_set(NAME, namespace, {"spec": {"template": _template("new", held=False)}})
        wait_until(
            lambda: apps.read_namespaced_stateful_set(NAME, namespace).status.observed_generation == 2,
            timeout=30,
            what="the set seeing its new template while the old replica terminates",
        )
        _release(core, namespace)

        def from_the_new_template() -> bool:
            _release(core, namespace)  # an old replica made again is let go at once (its own hold)
            pod = _pod(core, namespace)
            return (
                pod is not None
                and pod.metadata.deletion_timestamp is None
                and (pod.metadata.annotations or {}).get("placement") == "new"
            )

        wait_until(from_the_new_template, timeout=30, what="the replica made from the new template")
        status = apps.read_namespaced_stateful_set(NAME, namespace).status
        assert status.current_revision == status.update_revision or status.update_revision
    finally:
        _release(core, namespace)
