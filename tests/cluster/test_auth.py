"""Identities of the local cluster: token users, RBAC, ServiceAccount tokens, TokenReview and
SubjectAccessReview (the planner authorizes its callers with the last two)."""

from __future__ import annotations

import pytest
from kubernetes.client import (
    ApiClient,
    AuthenticationV1Api,
    AuthenticationV1TokenRequest,
    AuthorizationV1Api,
    CoreV1Api,
    V1ConfigMap,
    V1ObjectMeta,
    V1ResourceAttributes,
    V1SelfSubjectRulesReview,
    V1SelfSubjectRulesReviewSpec,
    V1ServiceAccount,
    V1SubjectAccessReview,
    V1SubjectAccessReviewSpec,
    V1TokenRequestSpec,
    V1TokenReview,
    V1TokenReviewSpec,
    VersionApi,
)
from kubernetes.client.rest import ApiException

from devstack.cluster.launcher import LocalCluster

pytestmark = pytest.mark.cluster


def _review(api: ApiClient, token: str) -> V1TokenReview:
    return AuthenticationV1Api(api).create_token_review(V1TokenReview(spec=V1TokenReviewSpec(token=token)))


def _allowed(api: ApiClient, user: str, groups: list[str], verb: str, resource: str, subresource: str = "") -> bool:
    review = V1SubjectAccessReview(
        spec=V1SubjectAccessReviewSpec(
            user=user,
            groups=groups,
            resource_attributes=V1ResourceAttributes(
                group="ai.deckhouse.io", resource=resource, subresource=subresource, verb=verb
            ),
        )
    )
    status = AuthorizationV1Api(api).create_subject_access_review(review).status
    return bool(status and status.allowed)


def test_version_is_stamped(kube_admin: ApiClient) -> None:
    assert VersionApi(kube_admin).get_code().git_version == "v1.34.4"


def test_token_review_of_users_and_service_accounts(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    status = _review(kube_admin, local_cluster.token("ns-user")).status
    assert status
    assert status.authenticated
    assert status.user
    assert status.user.username == "ns-user"
    assert "ai-inference:users" in (status.user.groups or [])

    status = _review(kube_admin, "not-a-token").status
    assert status is not None
    assert not status.authenticated

    # A ServiceAccount token (TokenRequest) is signed with the cluster's SA key and validates.
    core = CoreV1Api(kube_admin)
    core.create_namespaced_service_account(namespace, V1ServiceAccount(metadata=V1ObjectMeta(name="caller")))
    issued = core.create_namespaced_service_account_token(
        "caller", namespace, AuthenticationV1TokenRequest(spec=V1TokenRequestSpec(audiences=[], expiration_seconds=600))
    )
    assert issued.status is not None
    assert issued.status.token
    status = _review(kube_admin, issued.status.token).status
    assert status
    assert status.authenticated
    assert status.user
    assert status.user.username == f"system:serviceaccount:{namespace}:caller"


def test_subject_access_review_and_user_rbac(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    assert _allowed(kube_admin, "module-admin", ["ai-inference:admins"], "create", "inferenceserviceclasses")
    assert not _allowed(kube_admin, "ns-user", ["ai-inference:users"], "create", "inferenceserviceclasses")
    # Nobody but the planner's callers get the virtual planner subresource; no dev role grants it.
    assert not _allowed(
        kube_admin, "module-admin", ["ai-inference:admins"], "create", "inferenceserviceclasses", "planner"
    )

    # ns-user edits in its namespace (the `edit` binding create_namespace made), nowhere else.
    with local_cluster.api_client("ns-user") as api:
        core = CoreV1Api(api)
        core.create_namespaced_config_map(namespace, V1ConfigMap(metadata=V1ObjectMeta(name="mine")))
        with pytest.raises(ApiException) as denied:
            core.create_namespaced_config_map("default", V1ConfigMap(metadata=V1ObjectMeta(name="not-mine")))
        assert denied.value.status == 403
        # Orders are aggregated into `edit` by the dev role.
        rules = AuthorizationV1Api(api).create_self_subject_rules_review(
            V1SelfSubjectRulesReview(spec=V1SelfSubjectRulesReviewSpec(namespace=namespace))
        )
        assert rules.status is not None
        assert any(
            "inferenceservices" in (r.resources or []) and "create" in r.verbs for r in rules.status.resource_rules
        )
