"""The watcher's own ClusterRole (the chart's, installed on the local control plane) lets its informers
of what classes name list and watch, metadata-only: DeviceClasses and StorageClasses answer, and
cert-manager's ClusterIssuers — not installed on the shared cluster — answer 404 (the authorizer
passed: a kind that is not served is judged after RBAC), where an identity without the rule gets 403."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from tests.rbac.test_roles import Bound, _list_and_watch, _sa_token, _token_client, bound  # noqa: F401
from worker.observer import informer as inf

pytestmark = pytest.mark.cluster


def test_the_watcher_informs_on_what_classes_name_with_its_own_role(bound: Bound, kube_admin: ApiClient) -> None:  # noqa: F811
    with _token_client(bound.cluster, _sa_token(kube_admin, "watcher")) as watcher:
        resources = {r.kind: r for r in inf.reference_resources(watcher)}
        assert set(resources) == {inf.DEVICE_CLASS, inf.STORAGE_CLASS, inf.CLUSTER_ISSUER}
        _list_and_watch(resources[inf.DEVICE_CLASS])
        _list_and_watch(resources[inf.STORAGE_CLASS])
        with pytest.raises(ApiException) as absent:
            _list_and_watch(resources[inf.CLUSTER_ISSUER])
        assert absent.value.status == 404
    with _token_client(bound.cluster, _sa_token(kube_admin, "planner")) as planner:
        with pytest.raises(ApiException) as denied:
            _list_and_watch(inf.reference_resources(planner)[2])
        assert denied.value.status == 403
