"""The module's roles proved against the real API server.

The chart is installed with helm and its roles are bound the way a cluster administrator would:
a RoleBinding of ``d8:user-authz:ai-inference:user`` and ``:editor`` to group ``ai-inference:users``
in one namespace (made WITHOUT the built-in ``edit`` binding), and a ClusterRoleBinding of
``d8:user-authz:ai-inference:cluster-editor`` (the module administrator) to group
``ai-inference:admins``. Then every allow and every denial of the matrix is asked of the server:

* as the real users ``ns-user`` and ``module-admin`` (SelfSubjectAccessReview with each one's own
  client) — what they can do with everything the local cluster gives them;
* as probe subjects in groups bound to the chart's roles ONLY (SubjectAccessReview) — so an allow
  is the chart's doing and not the dev RBAC's;
* and with at least one real request per denial kind, which the server answers 403.

The ServiceAccounts of the processes are checked the same way: the worker may create
``inferenceserviceclasses/planner`` (a real request gets past authorization: 404, the subresource
is virtual), a human may not (403).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import config as kube_config
from kubernetes.client import (
    ApiClient,
    AuthenticationV1Api,
    AuthenticationV1TokenRequest,
    AuthorizationV1Api,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
    RbacAuthorizationV1Api,
    SchedulingV1Api,
    V1ResourceAttributes,
    V1SelfSubjectAccessReview,
    V1SelfSubjectAccessReviewSpec,
    V1SubjectAccessReview,
    V1SubjectAccessReviewSpec,
    V1TokenRequestSpec,
    V1TokenReview,
    V1TokenReviewSpec,
)
from kubernetes.client.rest import ApiException

from activities.health import token_from_secret
from devstack.cluster.launcher import LocalCluster
from inference_api.settings import PLANNER_AUDIENCE
from tests.chart.helm import NAMESPACE as MODULE_NAMESPACE
from tests.chart.helm import Helm
from tests.examples import example
from tests.polling import wait_until
from worker.observer import informer as inf
from worker.observer.informer import Resource
from worker.observer.inventory import inventory_resources
from worker.observer.observer import secret_reader

pytestmark = pytest.mark.cluster

AI = "ai.deckhouse.io"
RBAC = "rbac.authorization.k8s.io"
USERS_GROUP = "ai-inference:users"
ADMINS_GROUP = "ai-inference:admins"
# Groups no dev role names: what they can do, the chart's roles granted.
PROBE_USERS_GROUP = "ai-inference-test:chart-users"
PROBE_ADMINS_GROUP = "ai-inference-test:chart-admins"
ADMIN_BINDING = "ai-inference-test:module-admins"


@dataclass(frozen=True)
class Access:
    verb: str
    resource: str
    group: str = AI
    subresource: str = ""
    # own: the bound namespace; other: a namespace nobody bound; cluster: cluster scope / all namespaces
    scope: str = "own"

    def __str__(self) -> str:
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb}:{res}@{self.scope}"


ORDER_READ = ("get", "list", "watch")
ORDER_WRITE = ("create", "update", "patch", "delete", "deletecollection")
IMPERSONATE = [Access("impersonate", r, group="", scope="cluster") for r in ("users", "groups", "serviceaccounts")]
BIND_ESCALATE = [
    Access("bind", "clusterroles", group=RBAC, scope="cluster"),
    Access("escalate", "clusterroles", group=RBAC, scope="cluster"),
    Access("bind", "roles", group=RBAC),
    Access("escalate", "roles", group=RBAC),
    Access("create", "rolebindings", group=RBAC),
    Access("create", "clusterrolebindings", group=RBAC, scope="cluster"),
]
PLANNER = [Access("create", "inferenceserviceclasses", subresource="planner", scope="cluster")]
STATUS_WRITES = [Access(verb, "inferenceservices", subresource="status") for verb in ("update", "patch")] + [
    Access(verb, "inferenceserviceclasses", subresource="status", scope="cluster") for verb in ("update", "patch")
]

# Enumerating Secrets: no module identity may (issue 33).
ENUMERATE = ("list", "watch")

NS_USER_ALLOWED = [Access(v, "inferenceservices") for v in ORDER_READ + ORDER_WRITE]
NS_USER_DENIED = [
    # A namespace user cannot read a class, let alone write one.
    *[Access(v, "inferenceserviceclasses", scope="cluster") for v in ("get", "list", "watch", "create", "delete")],
    # Orders elsewhere.
    *[Access(v, "inferenceservices", scope="other") for v in ("get", "list", "create")],
    Access("list", "inferenceservices", scope="cluster"),
    *STATUS_WRITES,
    Access("get", "inferenceservices", subresource="status"),
    *PLANNER,
    *[Access(v, "secrets", group="") for v in ("get", "list", "create")],
    *BIND_ESCALATE,
    *IMPERSONATE,
    Access("get", "priorityclasses", group="scheduling.k8s.io", scope="cluster"),
]
MODULE_ADMIN_ALLOWED = [
    *[Access(v, "inferenceserviceclasses", scope="cluster") for v in ORDER_READ + ORDER_WRITE],
    *[Access(v, "inferenceservices", scope="cluster") for v in ORDER_READ],
    Access("get", "inferenceservices"),
    *[Access(v, "priorityclasses", group="scheduling.k8s.io", scope="cluster") for v in ORDER_READ],
]
MODULE_ADMIN_DENIED = [
    *STATUS_WRITES,
    *PLANNER,
    *[Access(v, "secrets", group="", scope=s) for v in ("get", "list") for s in ("own", "cluster")],
    *BIND_ESCALATE,
    *IMPERSONATE,
    Access("create", "priorityclasses", group="scheduling.k8s.io", scope="cluster"),
]
# Status is never a human's, not even to read, by the chart's roles (the probe subjects have no
# dev role; the dev module-admin role still reads status: see deploy/dev/rbac.yaml).
CHART_ONLY_DENIED = [
    Access("get", "inferenceservices", subresource="status"),
    Access("get", "inferenceserviceclasses", subresource="status", scope="cluster"),
]


@dataclass
class Bound:
    cluster: LocalCluster
    namespace: str  # the user and editor roles are bound here
    other: str  # nobody's roles are bound here


def _namespace_of(access: Access, bound: Bound) -> str | None:
    return {"own": bound.namespace, "other": bound.other, "cluster": None}[access.scope]


def _attributes(access: Access, bound: Bound) -> V1ResourceAttributes:
    return V1ResourceAttributes(
        group=access.group,
        resource=access.resource,
        subresource=access.subresource or None,
        verb=access.verb,
        namespace=_namespace_of(access, bound),
    )


def self_can(api: ApiClient, access: Access, bound: Bound) -> bool:
    review = V1SelfSubjectAccessReview(
        spec=V1SelfSubjectAccessReviewSpec(resource_attributes=_attributes(access, bound))
    )
    status = AuthorizationV1Api(api).create_self_subject_access_review(review).status
    return bool(status and status.allowed)


def subject_can(api: ApiClient, user: str, groups: list[str], access: Access, bound: Bound) -> bool:
    review = V1SubjectAccessReview(
        spec=V1SubjectAccessReviewSpec(user=user, groups=groups, resource_attributes=_attributes(access, bound))
    )
    status = AuthorizationV1Api(api).create_subject_access_review(review).status
    return bool(status and status.allowed)


def _binding(kind: str, name: str, role: str, groups: list[str], namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"ai-inference.deckhouse.io/test": "rbac"}}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": g} for g in groups],
    }


@pytest.fixture(scope="module")
def bound(local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm) -> Iterator[Bound]:
    suffix = uuid.uuid4().hex[:6]
    own = local_cluster.create_namespace(f"rbac-orders-{suffix}", users=())
    other = local_cluster.create_namespace(f"rbac-other-{suffix}", users=())
    rbac, core = RbacAuthorizationV1Api(kube_admin), CoreV1Api(kube_admin)
    b = Bound(local_cluster, own, other)
    with helm.installed(local_cluster):
        for level in ("user", "editor"):
            rbac.create_namespaced_role_binding(
                own,
                _binding(
                    "RoleBinding",
                    f"ai-inference-users-{level}",
                    f"d8:user-authz:ai-inference:{level}",
                    [USERS_GROUP, PROBE_USERS_GROUP],
                    own,
                ),
            )
        rbac.create_cluster_role_binding(
            _binding(
                "ClusterRoleBinding",
                ADMIN_BINDING,
                "d8:user-authz:ai-inference:cluster-editor",
                [ADMINS_GROUP, PROBE_ADMINS_GROUP],
            )
        )
        try:
            # The RBAC authorizer learns of new bindings through an informer: a moment, not a promise.
            wait_until(
                lambda: subject_can(kube_admin, "probe-user", [PROBE_USERS_GROUP], NS_USER_ALLOWED[-1], b),
                timeout=15,
                interval=0.2,
                ignore=(),
                what="the user/editor RoleBindings to allow",
            )
            wait_until(
                lambda: subject_can(kube_admin, "probe-admin", [PROBE_ADMINS_GROUP], MODULE_ADMIN_ALLOWED[-1], b),
                timeout=15,
                interval=0.2,
                ignore=(),
                what="the cluster-editor ClusterRoleBinding to allow",
            )
            yield b
        finally:
            rbac.delete_cluster_role_binding(ADMIN_BINDING)
            for name in (own, other):
                core.delete_namespace(name)


@pytest.fixture(scope="module")
def ns_user(local_cluster: LocalCluster) -> Iterator[ApiClient]:
    with local_cluster.api_client("ns-user") as api:
        yield api


@pytest.fixture(scope="module")
def module_admin(local_cluster: LocalCluster) -> Iterator[ApiClient]:
    with local_cluster.api_client("module-admin") as api:
        yield api


# -- the matrix, by review ----------------------------------------------------------------------


@pytest.mark.parametrize("access", NS_USER_ALLOWED, ids=str)
def test_ns_user_may(bound: Bound, ns_user: ApiClient, kube_admin: ApiClient, access: Access) -> None:
    assert self_can(ns_user, access, bound)
    assert subject_can(kube_admin, "probe-user", [PROBE_USERS_GROUP], access, bound)


@pytest.mark.parametrize("access", NS_USER_DENIED, ids=str)
def test_ns_user_may_not(bound: Bound, ns_user: ApiClient, kube_admin: ApiClient, access: Access) -> None:
    assert not self_can(ns_user, access, bound)
    assert not subject_can(kube_admin, "probe-user", [PROBE_USERS_GROUP], access, bound)


@pytest.mark.parametrize("access", MODULE_ADMIN_ALLOWED, ids=str)
def test_module_admin_may(bound: Bound, module_admin: ApiClient, kube_admin: ApiClient, access: Access) -> None:
    assert self_can(module_admin, access, bound)
    assert subject_can(kube_admin, "probe-admin", [PROBE_ADMINS_GROUP], access, bound)


@pytest.mark.parametrize("access", MODULE_ADMIN_DENIED, ids=str)
def test_module_admin_may_not(bound: Bound, module_admin: ApiClient, kube_admin: ApiClient, access: Access) -> None:
    assert not self_can(module_admin, access, bound)
    assert not subject_can(kube_admin, "probe-admin", [PROBE_ADMINS_GROUP], access, bound)


@pytest.mark.parametrize("access", CHART_ONLY_DENIED, ids=str)
def test_the_chart_grants_no_human_any_status(bound: Bound, kube_admin: ApiClient, access: Access) -> None:
    for user, group in (("probe-user", PROBE_USERS_GROUP), ("probe-admin", PROBE_ADMINS_GROUP)):
        assert not subject_can(kube_admin, user, [group], access, bound)


def test_the_empty_deltas_grant_nothing(bound: Bound, kube_admin: ApiClient) -> None:
    rbac = RbacAuthorizationV1Api(kube_admin)
    for level in ("privileged-user", "admin", "cluster-admin"):
        assert not rbac.read_cluster_role(f"d8:user-authz:ai-inference:{level}").rules


# -- the matrix, by real requests ---------------------------------------------------------------


def _status(call: Any) -> int:
    try:
        call()
    except ApiException as e:
        return int(e.status)
    return 200


def _post_planner(api: ApiClient, class_name: str = "default-llm") -> int:
    """POST the virtual subresource inferenceserviceclasses/<name>/planner; the HTTP status."""
    method, url, headers, body, _ = api.param_serialize(
        "POST",
        "/apis/ai.deckhouse.io/v1alpha1/inferenceserviceclasses/{name}/planner",
        path_params={"name": class_name},
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body={},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=body)
    response.read()
    return int(response.status)


def _order(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{AI}/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}},
        },
    }


def _impersonating(cluster: LocalCluster, user: str) -> ApiClient:
    api = cluster.api_client(user)
    api.set_default_header("Impersonate-User", "ai-inference:cluster-admin")
    return api


def test_ns_user_orders_inference_in_its_namespace(bound: Bound, ns_user: ApiClient) -> None:
    objects = CustomObjectsApi(ns_user)
    name = f"order-{uuid.uuid4().hex[:6]}"
    objects.create_namespaced_custom_object(
        AI, "v1alpha1", bound.namespace, "inferenceservices", _order(name, bound.namespace)
    )
    got = objects.get_namespaced_custom_object(AI, "v1alpha1", bound.namespace, "inferenceservices", name)
    assert got["spec"]["inferenceServiceClassName"] == "default-llm"
    listed = objects.list_namespaced_custom_object(AI, "v1alpha1", bound.namespace, "inferenceservices")
    assert name in {o["metadata"]["name"] for o in listed["items"]}
    objects.patch_namespaced_custom_object(
        AI, "v1alpha1", bound.namespace, "inferenceservices", name, {"metadata": {"labels": {"team": "support"}}}
    )
    objects.delete_namespaced_custom_object(AI, "v1alpha1", bound.namespace, "inferenceservices", name)


def test_ns_user_is_refused_by_the_server(bound: Bound, ns_user: ApiClient, kube_admin: ApiClient) -> None:
    objects, core, rbac = CustomObjectsApi(ns_user), CoreV1Api(ns_user), RbacAuthorizationV1Api(ns_user)
    name = f"order-{uuid.uuid4().hex[:6]}"
    objects.create_namespaced_custom_object(
        AI, "v1alpha1", bound.namespace, "inferenceservices", _order(name, bound.namespace)
    )
    CoreV1Api(kube_admin).create_namespaced_secret(
        bound.namespace, {"metadata": {"name": "hf-token"}, "stringData": {"token": "x"}}
    )
    refused = {
        # a class, by name and by list
        "get class": lambda: objects.get_cluster_custom_object(
            AI, "v1alpha1", "inferenceserviceclasses", "default-llm"
        ),
        "list classes": lambda: objects.list_cluster_custom_object(AI, "v1alpha1", "inferenceserviceclasses"),
        # orders elsewhere
        "order in another namespace": lambda: objects.create_namespaced_custom_object(
            AI, "v1alpha1", bound.other, "inferenceservices", _order(name, bound.other)
        ),
        # */status
        "order status": lambda: objects.patch_namespaced_custom_object_status(
            AI, "v1alpha1", bound.namespace, "inferenceservices", name, {"status": {"phase": "Ready"}}
        ),
        # Secrets, even in its own namespace
        "read secret": lambda: core.read_namespaced_secret("hf-token", bound.namespace),
        "list secrets": lambda: core.list_namespaced_secret(bound.namespace),
        # bind / escalate
        "bind": lambda: rbac.create_namespaced_role_binding(
            bound.namespace, _binding("RoleBinding", "grab-admin", "admin", [USERS_GROUP], bound.namespace)
        ),
        "escalate": lambda: rbac.create_namespaced_role(
            bound.namespace,
            {
                "metadata": {"name": "everything"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
            },
        ),
    }
    for what, call in refused.items():
        assert _status(call) == 403, what
    # inferenceserviceclasses/planner
    assert _post_planner(ns_user) == 403
    # impersonate
    with _impersonating(bound.cluster, "ns-user") as api:
        assert _status(lambda: CoreV1Api(api).list_namespace()) == 403
    objects.delete_namespaced_custom_object(AI, "v1alpha1", bound.namespace, "inferenceservices", name)


def test_module_admin_manages_classes_and_reads_orders(bound: Bound, module_admin: ApiClient) -> None:
    objects = CustomObjectsApi(module_admin)
    body = example("class-embeddings-only.yaml")
    body["metadata"]["name"] = f"embeddings-only-{uuid.uuid4().hex[:6]}"
    objects.create_cluster_custom_object(AI, "v1alpha1", "inferenceserviceclasses", body)
    objects.patch_cluster_custom_object(
        AI,
        "v1alpha1",
        "inferenceserviceclasses",
        body["metadata"]["name"],
        {"spec": {"admissionPolicy": {"allowedNamespaces": ["*"]}}},
    )
    try:
        # */status of a class is the watcher's, not the administrator's.
        assert (
            _status(
                lambda: objects.patch_cluster_custom_object_status(
                    AI, "v1alpha1", "inferenceserviceclasses", body["metadata"]["name"], {"status": {"phase": "Ready"}}
                )
            )
            == 403
        )
    finally:
        objects.delete_cluster_custom_object(AI, "v1alpha1", "inferenceserviceclasses", body["metadata"]["name"])
    objects.list_cluster_custom_object(AI, "v1alpha1", "inferenceservices")  # orders across the cluster
    assert "default-llm" in {
        o["metadata"]["name"]
        for o in objects.list_cluster_custom_object(AI, "v1alpha1", "inferenceserviceclasses")["items"]
    }
    SchedulingV1Api(module_admin).list_priority_class()


def test_module_admin_is_refused_by_the_server(bound: Bound, module_admin: ApiClient) -> None:
    core, rbac = CoreV1Api(module_admin), RbacAuthorizationV1Api(module_admin)
    refused = {
        "list secrets everywhere": lambda: core.list_secret_for_all_namespaces(),
        "read a module secret": lambda: core.list_namespaced_secret(MODULE_NAMESPACE),
        "bind cluster-admin": lambda: rbac.create_cluster_role_binding(
            _binding("ClusterRoleBinding", "grab-cluster-admin", "cluster-admin", [ADMINS_GROUP])
        ),
        "escalate": lambda: rbac.create_cluster_role(
            {
                "metadata": {"name": "ai-inference-test:everything"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
            }
        ),
    }
    for what, call in refused.items():
        assert _status(call) == 403, what
    assert _post_planner(module_admin) == 403
    with _impersonating(bound.cluster, "module-admin") as api:
        assert _status(lambda: CoreV1Api(api).list_namespace()) == 403


# -- the processes' ServiceAccounts ---------------------------------------------------------------


def _service_account(component: str) -> tuple[str, list[str]]:
    return (
        f"system:serviceaccount:{MODULE_NAMESPACE}:ai-inference-{component}",
        ["system:serviceaccounts", f"system:serviceaccounts:{MODULE_NAMESPACE}", "system:authenticated"],
    )


def _sa_token(kube_admin: ApiClient, component: str, audiences: tuple[str, ...] = ()) -> str:
    issued = CoreV1Api(kube_admin).create_namespaced_service_account_token(
        f"ai-inference-{component}",
        MODULE_NAMESPACE,
        AuthenticationV1TokenRequest(spec=V1TokenRequestSpec(audiences=list(audiences), expiration_seconds=600)),
    )
    assert issued.status is not None
    assert issued.status.token
    return str(issued.status.token)


def _token_client(cluster: LocalCluster, token: str) -> ApiClient:
    """A client of the cluster that authenticates with ``token`` (server and CA from a kubeconfig)."""
    configuration = Configuration()
    kube_config.load_kube_config(config_file=str(cluster.kubeconfig("admin")), client_configuration=configuration)
    # The kubeconfig loader re-installs its own token before every request unless its hook goes.
    configuration.refresh_api_key_hook = None
    configuration.api_key = {"BearerToken": f"Bearer {token}"}
    return ApiClient(configuration)


def _whoami(api: ApiClient) -> str:
    review = AuthenticationV1Api(api).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1"})
    return str(review.status.user_info.username)


SA_MATRIX: list[tuple[str, Access, bool]] = [
    ("worker", PLANNER[0], True),
    ("worker", Access("patch", "inferenceservices", subresource="status", scope="cluster"), True),
    ("worker", Access("patch", "inferenceservices", scope="other"), True),  # the finalizer
    ("worker", Access("update", "inferenceservices", subresource="finalizers", scope="other"), True),
    ("worker", Access("get", "inferenceserviceclasses", scope="cluster"), True),
    ("worker", Access("patch", "statefulsets", group="apps", scope="other"), True),
    ("worker", Access("create", "secrets", group="", scope="other"), True),
    # Secrets by name only: the worker can read the one an order names, never enumerate a namespace's.
    ("worker", Access("get", "secrets", group="", scope="other"), True),
    ("worker", Access("list", "secrets", group="", scope="other"), False),
    ("worker", Access("list", "secrets", group="", scope="cluster"), False),
    *[("worker", Access("watch", "secrets", group="", scope=s), False) for s in ("other", "cluster")],
    ("worker", Access("patch", "ingresses", group="networking.k8s.io", scope="other"), True),
    *[
        ("worker", Access(verb, "networkpolicies", group="networking.k8s.io", scope="other"), True)
        for verb in ("get", "list", "create", "patch", "delete")
    ],
    ("worker", Access("patch", "horizontalpodautoscalers", group="autoscaling", scope="other"), True),
    ("worker", Access("patch", "resourceclaimtemplates", group="resource.k8s.io", scope="other"), True),
    ("worker", Access("create", "events", group="", scope="other"), True),
    ("worker", Access("list", "pods", group="", scope="other"), True),
    ("worker", Access("get", "clustermodels", group="ai-models.deckhouse.io", scope="cluster"), True),
    # Least privilege: server-side apply is create + patch (no update), the watcher watches (no
    # watch of what an order owns but the first probe's, of the order's StatefulSet), the planner
    # Service plans (no inventory), one catalog object by name (no list).
    *[
        ("worker", Access(verb, resource, group=group, scope="other"), False)
        for verb in ("update", "watch")
        for group, resource in (("apps", "statefulsets"), ("", "secrets"), ("networking.k8s.io", "networkpolicies"))
        if (verb, resource) != ("watch", "statefulsets")
    ],
    ("worker", Access("watch", "statefulsets", group="apps", scope="other"), True),
    ("worker", Access("update", "inferenceservices", scope="other"), False),
    ("worker", Access("update", "inferenceservices", subresource="status", scope="other"), False),
    # The worker's order cache (worker/order_cache.py): list + watch of orders and classes.
    ("worker", Access("watch", "inferenceservices", scope="cluster"), True),
    ("worker", Access("list", "inferenceserviceclasses", scope="cluster"), True),
    ("worker", Access("list", "physicalgpus", group="gpu.deckhouse.io", scope="cluster"), False),
    ("worker", Access("list", "resourceslices", group="resource.k8s.io", scope="cluster"), False),
    ("worker", Access("list", "priorityclasses", group="scheduling.k8s.io", scope="cluster"), False),
    ("worker", Access("list", "clustermodels", group="ai-models.deckhouse.io", scope="cluster"), False),
    ("worker", Access("get", "pods", group="", scope="other"), False),
    # A repeated Event of an order is counted (activities/order_events.py), not made again.
    ("worker", Access("patch", "events", group="", scope="other"), True),
    ("worker", Access("delete", "events", group="", scope="other"), False),
    ("worker", Access("patch", "inferenceserviceclasses", scope="cluster"), False),
    ("worker", Access("create", "inferenceservices", scope="other"), False),
    ("worker", Access("delete", "pods", group="", scope="other"), False),
    ("worker", Access("create", "configmaps", group="", scope="other"), False),
    ("worker", Access("create", "serviceaccounts", group="", scope="other"), False),
    ("worker", Access("impersonate", "users", group="", scope="cluster"), False),
    ("worker", Access("bind", "clusterroles", group=RBAC, scope="cluster"), False),
    ("watcher", Access("watch", "inferenceservices", scope="cluster"), True),
    ("watcher", Access("watch", "inferenceserviceclasses", scope="cluster"), True),
    ("watcher", Access("patch", "inferenceserviceclasses", subresource="status", scope="cluster"), True),
    ("watcher", Access("patch", "inferenceservices", subresource="status", scope="cluster"), False),
    ("watcher", PLANNER[0], False),
    # The observer reads the Secrets an order owns by name ({order}-auth for its probes, {order}-tls),
    # never lists or watches Secrets (issue 33: no module identity may enumerate them), writes none.
    ("watcher", Access("get", "secrets", group="", scope="other"), True),
    *[("watcher", Access(v, "secrets", group="", scope=s), False) for v in ENUMERATE for s in ("other", "cluster")],
    ("watcher", Access("patch", "secrets", group="", scope="other"), False),
    # Informers only: no get where list + watch read.
    ("watcher", Access("get", "pods", group="", scope="other"), False),
    ("watcher", Access("get", "inferenceservices", scope="other"), False),
    ("watcher", Access("update", "inferenceserviceclasses", subresource="status", scope="cluster"), False),
    ("watcher", Access("delete", "statefulsets", group="apps", scope="other"), False),
    ("watcher", Access("watch", "horizontalpodautoscalers", group="autoscaling", scope="other"), True),
    ("planner", Access("create", "tokenreviews", group="authentication.k8s.io", scope="cluster"), True),
    ("planner", Access("create", "subjectaccessreviews", group="authorization.k8s.io", scope="cluster"), True),
    ("planner", Access("list", "physicalgpus", group="gpu.deckhouse.io", scope="cluster"), True),
    ("planner", Access("watch", "resourceslices", group="resource.k8s.io", scope="cluster"), True),
    ("planner", Access("list", "deviceclasses", group="resource.k8s.io", scope="cluster"), True),
    ("planner", Access("list", "resourceclaims", group="resource.k8s.io", scope="cluster"), True),
    ("planner", Access("list", "pods", group="", scope="cluster"), True),
    ("planner", Access("get", "clustermodels", group="ai-models.deckhouse.io", scope="cluster"), False),
    ("planner", Access("delete", "pods", group="", scope="other"), False),
    ("planner", Access("get", "secrets", group="", scope="other"), False),
    *[("planner", Access(v, "secrets", group="", scope=s), False) for v in ENUMERATE for s in ("other", "cluster")],
    ("planner", Access("get", "pods", group="", scope="other"), False),
    ("planner", PLANNER[0], False),
    ("planner", Access("patch", "inferenceservices", subresource="status", scope="cluster"), False),
]


@pytest.mark.parametrize(("component", "access", "allowed"), SA_MATRIX, ids=lambda v: str(v))
def test_service_account_matrix(
    bound: Bound, kube_admin: ApiClient, component: str, access: Access, allowed: bool
) -> None:
    user, groups = _service_account(component)
    assert subject_can(kube_admin, user, groups, access, bound) is allowed


def test_only_the_worker_gets_past_authorization_of_the_planner_subresource(
    bound: Bound, kube_admin: ApiClient, ns_user: ApiClient, module_admin: ApiClient
) -> None:
    # Authorized, the request reaches the CRD handler, which has no such subresource: 404.
    with _token_client(bound.cluster, _sa_token(kube_admin, "worker")) as worker:
        assert _whoami(worker) == _service_account("worker")[0]
        assert _post_planner(worker) == 404
    for api in (ns_user, module_admin):
        assert _post_planner(api) == 403
    with _token_client(bound.cluster, _sa_token(kube_admin, "watcher")) as watcher:
        assert _whoami(watcher) == _service_account("watcher")[0]
        assert _post_planner(watcher) == 403


def test_the_planner_authorizes_its_callers_with_its_own_token(bound: Bound, kube_admin: ApiClient) -> None:
    # What the worker's projected token is: bound to the planner's audience.
    worker_token = _sa_token(kube_admin, "worker", (PLANNER_AUDIENCE,))
    with _token_client(bound.cluster, _sa_token(kube_admin, "planner")) as planner:
        assert _whoami(planner) == _service_account("planner")[0]
        review = AuthenticationV1Api(planner).create_token_review(
            V1TokenReview(spec=V1TokenReviewSpec(token=worker_token, audiences=[PLANNER_AUDIENCE]))
        )
        assert review.status is not None
        assert review.status.authenticated
        assert review.status.user
        assert review.status.audiences == [PLANNER_AUDIENCE]
        # The worker's token for the API server is no token for the planner.
        for_api_server = _sa_token(kube_admin, "worker")
        refused = AuthenticationV1Api(planner).create_token_review(
            V1TokenReview(spec=V1TokenReviewSpec(token=for_api_server, audiences=[PLANNER_AUDIENCE]))
        )
        assert refused.status is not None
        assert not refused.status.authenticated
        caller = review.status.user
        assert caller.username == _service_account("worker")[0]
        sar = AuthorizationV1Api(planner).create_subject_access_review(
            V1SubjectAccessReview(
                spec=V1SubjectAccessReviewSpec(
                    user=caller.username,
                    groups=caller.groups,
                    resource_attributes=V1ResourceAttributes(
                        group=AI, resource="inferenceserviceclasses", subresource="planner", verb="create"
                    ),
                )
            )
        )
        assert sar.status is not None
        assert sar.status.allowed
        # And the same question about a human is answered no.
        sar = AuthorizationV1Api(planner).create_subject_access_review(
            V1SubjectAccessReview(
                spec=V1SubjectAccessReviewSpec(
                    user="module-admin",
                    groups=[ADMINS_GROUP],
                    resource_attributes=V1ResourceAttributes(
                        group=AI, resource="inferenceserviceclasses", subresource="planner", verb="create"
                    ),
                )
            )
        )
        assert sar.status is not None
        assert not sar.status.allowed
        # The planner itself reads no Secrets.
        assert _status(lambda: CoreV1Api(planner).list_namespaced_secret(MODULE_NAMESPACE)) == 403


def _list_and_watch(resource: Resource) -> None:
    """One page of the informer's list and a one-second watch, as the informer makes them."""
    listing = resource.list_fn(limit=1, _preload_content=False, _request_timeout=30, **inf._selector(resource))
    listing.release_conn()
    watch = resource.list_fn(
        watch=True, timeout_seconds=1, _preload_content=False, _request_timeout=30, **inf._selector(resource, True)
    )
    watch.read()
    watch.release_conn()


def test_the_processes_run_their_informers_and_secret_reads_with_their_own_roles(
    bound: Bound, kube_admin: ApiClient
) -> None:
    """Enough, as well as no more: every informer of the observer and of the planner lists and
    watches as its ServiceAccount; the observer and the worker read an order's Secret by name but
    cannot list or watch Secrets anywhere (not even their metadata, not even the module's labelled
    ones), and the planner reads none."""
    # Made by the worker: the marks guard refuses the module's label to anyone else, the admin included.
    with _token_client(bound.cluster, _sa_token(kube_admin, "worker")) as maker:
        CoreV1Api(maker).create_namespaced_secret(
            bound.other,
            {
                "metadata": {"name": "chat-auth", "labels": {"app.kubernetes.io/managed-by": "ai-inference"}},
                "data": {"token": "dG9rZW4="},
            },
        )
    with _token_client(bound.cluster, _sa_token(kube_admin, "watcher")) as watcher:
        for resource in inf.resources(watcher, catalog=True):
            _list_and_watch(resource)
        assert token_from_secret(secret_reader(watcher)(bound.other, "chat-auth")) == "token"
        _refused_secret_enumeration(watcher, bound.other)
    with _token_client(bound.cluster, _sa_token(kube_admin, "planner")) as planner:
        for resource in inventory_resources(planner):
            _list_and_watch(resource)
        with pytest.raises(ApiException) as denied:
            CoreV1Api(planner).read_namespaced_secret("chat-auth", bound.other)
        assert denied.value.status == 403
    with _token_client(bound.cluster, _sa_token(kube_admin, "worker")) as worker:
        assert CoreV1Api(worker).read_namespaced_secret("chat-auth", bound.other).data == {"token": "dG9rZW4="}
        _refused_secret_enumeration(worker, bound.other)
    with _token_client(bound.cluster, _sa_token(kube_admin, "planner")) as planner:
        _refused_secret_enumeration(planner, bound.other)


def _refused_secret_enumeration(api: ApiClient, namespace: str) -> None:
    """Every way to enumerate Secrets, made as the identity ``api`` authenticates, is a 403: a list
    and a watch, in a namespace and across the cluster, whole or metadata-only, with the module's
    label selector or none (RBAC has no label or metadata-only grant, so none of them may be granted)."""
    core = CoreV1Api(api)
    partial = {"Accept": inf.PARTIAL_METADATA_LIST}
    attempts = {
        "list in a namespace": lambda: core.list_namespaced_secret(namespace, _preload_content=False),
        "list everywhere": lambda: core.list_secret_for_all_namespaces(_preload_content=False),
        "list the module's, metadata only": lambda: core.list_secret_for_all_namespaces(
            label_selector=inf.MODULE_SELECTOR, _headers=partial, _preload_content=False
        ),
        "watch in a namespace": lambda: core.list_namespaced_secret(
            namespace, watch=True, timeout_seconds=1, _preload_content=False
        ),
        "watch everywhere": lambda: core.list_secret_for_all_namespaces(
            watch=True, timeout_seconds=1, _preload_content=False
        ),
        "watch the module's, metadata only": lambda: core.list_secret_for_all_namespaces(
            watch=True,
            timeout_seconds=1,
            label_selector=inf.MODULE_SELECTOR,
            _headers={"Accept": inf.PARTIAL_METADATA},
            _preload_content=False,
        ),
    }
    answered = {what: _status(attempt) for what, attempt in attempts.items()}
    assert answered == dict.fromkeys(attempts, 403)
