"""A client of the cluster admin acting as someone else (``Impersonate-User``): how a test plays a
controller or a ServiceAccount the module's admission guards let through (the StatefulSet controller's
pods, the worker's writes) without running it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from devstack.cluster.launcher import LocalCluster

STATEFULSET_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"


def service_account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def impersonating(cluster: LocalCluster, user: str) -> ApiClient:
    """A fresh client of the admin impersonating ``user`` (close it when done)."""
    configuration = Configuration()
    kube_config.load_kube_config(config_file=str(cluster.kubeconfig("admin")), client_configuration=configuration)
    return ApiClient(configuration, header_name="Impersonate-User", header_value=user)


def api_status(call: Callable[[], Any]) -> tuple[int, str]:
    """The API server's answer to ``call``: 200 and nothing, or the refusal's status and body."""
    try:
        call()
    except ApiException as err:
        return int(err.status), str(err.body or "")
    return 200, ""
