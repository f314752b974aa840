"""Only the module writes its marks: the chart's marks guard (a ValidatingAdmissionPolicy) on the real API server.

A namespace user may write any label on the objects of their own namespace. Before the guard, a tenant
could label a ResourceClaimTemplate as an order's with ``ai.deckhouse.io/planned-placements`` (the
planner reserved every GPU it listed) and label pods as an order's (scraped by the module's PodMonitor,
counted as the order's replicas). With the chart installed:

* the tenant's labelled template and pods are refused, with a message naming the marks;
* the tenant's own labels (no mark of the module) still pass, and so does an unmarked change of a
  labelled object (the mark left as it was);
* the worker's own apply of a labelled template still passes;
* the StatefulSet controller still makes the order's pods, with the marks, and the resourceclaim
  controller their claims from the order's template (both copy the marks legitimately).

Writes meant to be refused are dry runs: admission judges them, nothing is stored if it does not.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi, RbacAuthorizationV1Api

from activities.builders.claim import ANNOTATION_PLANNED_PLACEMENTS
from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from devstack.cluster.launcher import LocalCluster
from tests.chart.helm import NAMESPACE as MODULE_NAMESPACE
from tests.chart.helm import Helm
from tests.polling import wait_until
from tests.security.impersonation import api_status, impersonating, service_account

pytestmark = pytest.mark.cluster

DRY = "All"
DEVICE_CLASS = "nvidia-h100-mps-mig"
REFUSED = "only the ServiceAccounts of the module (ai-inference) may set, change or remove its labels and annotations"
MARKS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "victim"}


@pytest.fixture(scope="module")
def chart(local_cluster: LocalCluster, helm: Helm) -> Iterator[None]:
    with helm.installed(local_cluster):
        yield


@pytest.fixture
def worker(chart: None, local_cluster: LocalCluster) -> Iterator[ApiClient]:
    with impersonating(local_cluster, service_account(MODULE_NAMESPACE, "ai-inference-worker")) as api:
        yield api


@pytest.fixture
def tenant(chart: None, local_cluster: LocalCluster) -> Iterator[ApiClient]:
    with local_cluster.api_client("ns-user") as api:
        yield api


def _template(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {
            "metadata": {"labels": labels},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}},
        },
    }


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        # No node will take it: it stays Pending, nothing runs.
        "spec": {"nodeSelector": {"marks-guard": "nowhere"}, "containers": [{"name": "c", "image": "x"}]},
    }


def _tenant_may_write_claim_templates(kube_admin: ApiClient, namespace: str) -> None:
    """The built-in ``edit`` role may lack DRA's kinds: the tenant is given them outright, so that only
    the guard can say no."""
    rbac = RbacAuthorizationV1Api(kube_admin)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "dra-writer"},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaimtemplates", "resourceclaims"],
                    "verbs": ["*"],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "dra-writer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dra-writer"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ns-user"}],
        },
    )


def test_a_tenant_cannot_write_the_modules_marks(
    tenant: ApiClient, worker: ApiClient, kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    namespace = make_namespace("marks-guard")
    _tenant_may_write_claim_templates(kube_admin, namespace)
    custom, core = CustomObjectsApi(tenant), CoreV1Api(tenant)
    placements = json.dumps([{"node": "gpu-node-0", "devices": [f"gpu-{i}" for i in range(8)]}])

    def create_template(api: ApiClient, body: dict[str, Any]) -> tuple[int, str]:
        return api_status(
            lambda: CustomObjectsApi(api).create_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", body, dry_run=DRY
            )
        )

    forged = _template("victim-claim", MARKS, {ANNOTATION_PLANNED_PLACEMENTS: placements})
    # The API server learns of the policy through an informer: a moment after the install.
    status, body = wait_until(
        lambda: r if (r := create_template(tenant, forged))[0] == 403 else None,
        timeout=30,
        what="the marks guard to refuse a tenant's labelled claim template",
    )
    assert REFUSED in body, body
    assert LABEL_ORDER in body
    assert "resourceclaimtemplates" in body
    assert "ns-user is not the module" in body

    # Each mark alone is refused: the order label, managed-by, the planned placements annotation.
    for what, labels, notes in (
        ("order label", {LABEL_ORDER: "victim"}, None),
        ("managed-by", {LABEL_MANAGED_BY: MANAGED_BY}, None),
        ("placements", {}, {ANNOTATION_PLANNED_PLACEMENTS: placements}),
    ):
        status, body = create_template(tenant, _template("victim-claim", labels, notes))
        assert status == 403, (what, status, body)
        assert REFUSED in body, (what, body)

    # Pods with an order's labels (scraped, counted as its replicas): refused.
    for labels in (MARKS, {LABEL_ORDER: "victim"}, {LABEL_MANAGED_BY: MANAGED_BY}):
        pod = _pod("victim-0", labels)
        status, body = api_status(functools.partial(core.create_namespaced_pod, namespace, pod, dry_run=DRY))
        assert status == 403, (labels, status, body)
        assert REFUSED in body
        assert "pods" in body

    # The tenant's own labels pass (the guard judges the module's marks only).
    own = {"app.kubernetes.io/name": "mine", "app.kubernetes.io/managed-by": "helm", "team": "a"}
    assert create_template(tenant, _template("mine", own))[0] == 200
    assert api_status(lambda: core.create_namespaced_pod(namespace, _pod("mine", own), dry_run=DRY))[0] == 200

    # The worker's own apply passes, and what it made keeps its marks against the tenant.
    assert create_template(worker, forged)[0] == 200
    CustomObjectsApi(worker).create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", _template("victim-claim", MARKS)
    )
    for what, patch in {
        "remove the order label": {"metadata": {"labels": {LABEL_ORDER: None}}},
        "change the order label": {"metadata": {"labels": {LABEL_ORDER: "other"}}},
        "add placements": {"metadata": {"annotations": {ANNOTATION_PLANNED_PLACEMENTS: placements}}},
        "change the app name of the module's object": {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}},
    }.items():
        status, body = api_status(
            functools.partial(
                custom.patch_namespaced_custom_object,
                "resource.k8s.io",
                "v1",
                namespace,
                "resourceclaimtemplates",
                "victim-claim",
                patch,
                dry_run=DRY,
            )
        )
        assert status == 403, (what, status, body)
        assert REFUSED in body, (what, body)
    # A change that leaves the marks as they were is the tenant's business.
    unmarked = {"metadata": {"labels": {"team": "a"}}}
    status, body = api_status(
        lambda: custom.patch_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", "victim-claim", unmarked, dry_run=DRY
        )
    )
    assert status == 200, body


def test_the_controllers_still_copy_the_marks(
    worker: ApiClient, kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    """The worker makes an order's template and StatefulSet; the StatefulSet controller makes its pod with
    the marks, the resourceclaim controller the pod's claim from the template, with the template's marks."""
    namespace = make_namespace("marks-controllers", users=())
    name = f"order-{uuid.uuid4().hex[:6]}"
    marks = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: name}
    # Wait until the guard is in force (a tenant-like write refused), so that what follows is judged.
    wait_until(
        lambda: (
            api_status(lambda: CoreV1Api(kube_admin).create_namespaced_pod(namespace, _pod("x", marks), dry_run=DRY))[0]
            == 403
            or None
        ),
        timeout=30,
        what="the marks guard in force",
    )
    CustomObjectsApi(worker).create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", _template(f"{name}-claim", marks)
    )
    AppsV1Api(worker).create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": name, "labels": marks},
            "spec": {
                "replicas": 1,
                "serviceName": name,
                "selector": {"matchLabels": {LABEL_ORDER: name}},
                "template": {
                    "metadata": {"labels": marks},
                    "spec": {
                        "nodeSelector": {"marks-guard": "nowhere"},
                        "containers": [{"name": "c", "image": "x"}],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"{name}-claim"}],
                    },
                },
            },
        },
    )
    core = CoreV1Api(kube_admin)
    pod = wait_until(
        lambda: next(iter(core.list_namespaced_pod(namespace, label_selector=f"{LABEL_ORDER}={name}").items), None),
        timeout=60,
        what="the StatefulSet controller to make the order's pod",
    )
    assert pod.metadata.name == f"{name}-0"
    assert pod.metadata.labels[LABEL_MANAGED_BY] == MANAGED_BY
    claims = CustomObjectsApi(kube_admin)
    claim = wait_until(
        lambda: next(
            iter(
                claims.list_namespaced_custom_object(
                    "resource.k8s.io", "v1", namespace, "resourceclaims", label_selector=f"{LABEL_ORDER}={name}"
                )["items"]
            ),
            None,
        ),
        timeout=60,
        what="the resourceclaim controller to make the pod's claim from the order's template",
    )
    assert claim["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY
