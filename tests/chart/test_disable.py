"""Disabling the module (Deckhouse deletes its release; with plain Helm, ``helm uninstall``) as the
admin guide describes it, on the local control plane: every object of the release goes — the
processes, the planner, the embedded Temporal server — while the CRDs and the orders stay, and an
order deleted after that stays Terminating on the finalizer nobody removes any more, until it is
removed by hand. That is why the guide asks for the cleanup first (orders, then classes, while the
module runs: the controller removes each order's finalizer; the e2e suite runs that controller)."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient, ApiextensionsV1Api, AppsV1Api, CoreV1Api, CustomObjectsApi, V1Namespace
from kubernetes.client.rest import ApiException

from activities.order import FINALIZER
from devstack.cluster.launcher import LocalCluster
from tests.chart.helm import NAMESPACE, Helm
from tests.examples import example
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"


def _gone(read: object) -> bool:
    try:
        read()  # type: ignore[operator]
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def test_disabling_leaves_orders_with_nothing_reconciling_them(
    local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    apps, core, custom = AppsV1Api(kube_admin), CoreV1Api(kube_admin), CustomObjectsApi(kube_admin)
    namespace = "disable-order-ns"
    order = example("order-minimal.yaml")
    order["metadata"] = {"name": "left-behind", "namespace": namespace, "finalizers": [FINALIZER]}
    helm.install(local_cluster)
    try:
        core.create_namespace(V1Namespace(metadata={"name": namespace}))
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", order)
        apps.read_namespaced_stateful_set("ai-inference-temporal", NAMESPACE)
    finally:
        helm.uninstall(local_cluster)
    try:
        # The module is gone: its processes, its planner, its embedded Temporal server.
        for name in ("ai-inference-worker", "ai-inference-watcher", "ai-inference-planner"):
            assert _gone(lambda n=name: apps.read_namespaced_deployment(n, NAMESPACE))
        assert _gone(lambda: apps.read_namespaced_stateful_set("ai-inference-temporal", NAMESPACE))
        assert _gone(lambda: core.read_namespaced_service("ai-inference-temporal", NAMESPACE))
        # The CRDs and the order stay.
        for plural in ("inferenceservices", "inferenceserviceclasses"):
            ApiextensionsV1Api(kube_admin).read_custom_resource_definition(f"{plural}.{GROUP}")
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", "left-behind")
        stuck = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", "left-behind")
        assert stuck["metadata"]["deletionTimestamp"]
        assert stuck["metadata"]["finalizers"] == [FINALIZER]
        # Terminating until the finalizer is removed by hand.
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "inferenceservices",
            "left-behind",
            {"metadata": {"finalizers": None}},
        )
        wait_until(
            lambda: _gone(
                lambda: custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "inferenceservices", "left-behind"
                )
            ),
            timeout=30,
            what="the order to go once its finalizer is removed",
        )
    finally:
        core.delete_namespace(namespace)
