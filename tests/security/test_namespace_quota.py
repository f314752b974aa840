"""Orders per namespace are bounded by the administrator's ResourceQuota on the kind (issue 33, "No
fairness"; docs/admin-guide.md "Orders per namespace"), on the real kube-apiserver and its quota
controller: ``count/inferenceservices.ai.deckhouse.io: N`` lets the tenant make N orders and refuses
the N+1th at admission (nothing stored, so no workflow is ever started for it); a deleted order gives
its place back; the tenant (``edit``) cannot lift the quota."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi, V1ObjectMeta, V1ResourceQuota
from kubernetes.client import V1ResourceQuotaSpec as Spec
from kubernetes.client.rest import ApiException

from inference_api.types import GROUP, VERSION
from tests.cluster.helpers import order_body
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

ORDERS = "inferenceservices"
QUOTA_KEY = f"count/{ORDERS}.{GROUP}"
LIMIT = 2


def order(name: str, namespace: str) -> dict[str, Any]:
    return order_body(name, namespace, model="Qwen/Qwen2.5-0.5B-Instruct")


def test_a_quota_on_the_kind_refuses_the_order_past_it(
    local_cluster: Any, kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    namespace = make_namespace("orders-quota")
    core = CoreV1Api(kube_admin)
    quota = V1ResourceQuota(metadata=V1ObjectMeta(name="orders"), spec=Spec(hard={QUOTA_KEY: str(LIMIT)}))
    core.create_namespaced_resource_quota(namespace, quota)

    def counted() -> bool:
        # The quota admission judges against the quota's status: wait until the controller filled it.
        status = core.read_namespaced_resource_quota("orders", namespace).status
        return bool(status and status.hard and QUOTA_KEY in status.hard and status.used is not None)

    wait_until(counted, timeout=60, what="the quota's status counted")

    with local_cluster.api_client("ns-user") as api:
        tenant = CustomObjectsApi(api)
        for i in range(LIMIT):
            tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, order(f"o-{i}", namespace))
        with pytest.raises(ApiException) as refused:
            tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, order("one-too-many", namespace))
        assert refused.value.status == 403
        assert "exceeded quota: orders" in str(refused.value.body)
        assert QUOTA_KEY in str(refused.value.body)
        listed = tenant.list_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS)["items"]
        assert sorted(o["metadata"]["name"] for o in listed) == ["o-0", "o-1"]

        # The tenant cannot lift its bound (edit reads quotas, never writes them).
        with pytest.raises(ApiException) as lift:
            CoreV1Api(api).patch_namespaced_resource_quota("orders", namespace, {"spec": {"hard": {QUOTA_KEY: "1000"}}})
        assert lift.value.status == 403

        # A deleted order gives its place back (no finalizer yet: no workflow ever carried it).
        tenant.delete_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "o-0")

        def made_again() -> bool:
            try:
                tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, order("o-2", namespace))
            except ApiException as err:
                if err.status == 403:  # the quota's usage not yet recounted
                    return False
                raise
            return True

        wait_until(made_again, timeout=60, what="a place given back by the deleted order")
