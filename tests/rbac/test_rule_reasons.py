"""Every rule of every ClusterRole the module ships, and why it is there.

``REASONS`` lists each (API group, resource, verb) of each role — the chart's process roles, its
human roles (user-authz and rbacv2) and the local cluster's dev roles (deploy/dev/rbac.yaml) — with
the code or the guide that needs it. The rendered chart and the dev file must grant exactly that:
a verb added to a template fails here until it is given a reason, and a reason whose verb is gone
fails until it is removed. What the process roles deliberately lack is asserted beside them (no
list or watch of Secrets by any process, no Secret read at all by the planner, no get where the
observer's or the planner's list+watch informer reads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.chart.helm import REPO_ROOT, Helm, of_kind

DEV_RBAC = REPO_ROOT / "deploy" / "dev" / "rbac.yaml"

Rule = tuple[str, str, str]  # (API group, resource[/subresource][@resourceName,...], verb)
AI = "ai.deckhouse.io"
MODELS = "ai-models.deckhouse.io"
OWNED = ("services", "ingresses", "networkpolicies", "horizontalpodautoscalers", "resourceclaimtemplates")
OWNED_GROUP = {
    "services": "",
    "ingresses": "networking.k8s.io",
    "networkpolicies": "networking.k8s.io",
    "horizontalpodautoscalers": "autoscaling",
    "resourceclaimtemplates": "resource.k8s.io",
}


def _rules(group: str, resources: tuple[str, ...], verbs: tuple[str, ...], reason: str) -> dict[Rule, str]:
    return {(group, resource, verb): reason for resource in resources for verb in verbs}


def _informer(group: str, *resources: str, what: str) -> dict[Rule, str]:
    return _rules(group, resources, ("list", "watch"), f"an informer (list + watch) of {what}")


ORDER_CACHE = "worker/order_cache.py: the orders and classes the activities read, from an informer cache"

WORKER: dict[Rule, str] = {
    **_rules(AI, ("inferenceservices", "inferenceserviceclasses"), ("list", "watch"), ORDER_CACHE),
    (AI, "inferenceservices", "get"): "activities/order.py: read the order by name where the order cache is behind",
    (AI, "inferenceservices", "patch"): "activities/order.py: add and remove the module's finalizer (JSON patch)",
    (AI, "inferenceservices/status", "patch"): "activities/status.py: the order's phase, conditions, endpoint",
    (AI, "inferenceservices/finalizers", "update"): (
        "ownerReferences with blockOwnerDeletion: OwnerReferencesPermissionEnforcement asks for it"
    ),
    (AI, "inferenceserviceclasses", "get"): (
        "activities/order.py: read the order's class by name where the order cache is behind"
    ),
    (AI, "inferenceserviceclasses/planner", "create"): "the planner's SubjectAccessReview: only the worker plans",
    **_rules(
        "apps",
        ("statefulsets",),
        ("get", "list", "create", "patch", "delete"),
        "the order's StatefulSet: server-side apply (create + patch), read back, pruned by label, replaced",
    ),
    ("apps", "statefulsets", "watch"): "activities/health.py: the first probe waits on its one StatefulSet",
    **{
        (OWNED_GROUP[r], r, verb): f"the order's {r}: server-side apply (create + patch), read back, pruned by label"
        for r in OWNED
        for verb in ("get", "list", "create", "patch", "delete")
    },
    ("", "secrets", "get"): (
        "by name only: {order}-auth (its uid, the first probe's token), {order}-tls and {order}-auth when "
        "pruned, the Hugging Face token Secret the order names, the certificate Secret the class names"
    ),
    ("", "secrets", "create"): "{order}-auth, created once (never overwritten)",
    ("", "secrets", "patch"): "{order}-tls: server-side apply of a copied custom certificate",
    ("", "secrets", "delete"): "{order}-auth / {order}-tls pruned by name when the class no longer asks for them",
    ("", "events", "create"): "the order's Events",
    ("", "events", "patch"): "activities/order_events.py: a repeated Event of an order counted (aggregated)",
    ("", "pods", "list"): "activities/order.py: which runtime each replica of the order runs (its namespace)",
    ("", "persistentvolumeclaims", "get"): "activities/order.py: the model volume of a replica a move retired, by name",
    ("", "persistentvolumeclaims", "delete"): (
        "activities/order.py: the model volume of a replica a move retired (it never comes back), when it "
        "carries the order's label"
    ),
}

WATCHER: dict[Rule, str] = {
    **_informer(AI, "inferenceservices", "inferenceserviceclasses", what="orders and classes (worker/observer)"),
    (AI, "inferenceserviceclasses/status", "patch"): "the class's Validated and Ready (merge patch)",
    **_informer("", "pods", "services", what="what orders own (module labels)"),
    ("", "pods", "delete"): (
        "worker/observer/observer.py: an order's own pod on a lost node, force-deleted (preconditions.uid)"
    ),
    ("", "events", "create"): "worker/observer/observer.py: the PodForceDeleted Event on the order",
    ("", "pods/log", "get"): (
        "worker/observer/observer.py _fetcher_log: the last lines of a downloading replica's model-fetcher log "
        "(its progress, told on the order as ModelDownloading)"
    ),
    **_informer("", "nodes", what="the nodes of the orders' pods: a node lost or NotReady is named and replanned"),
    **_informer(
        "",
        "events",
        what="the StatefulSets' FailedCreate Events only (field selector): a quota refusing the pods is named",
    ),
    ("", "secrets", "get"): (
        "worker/observer/observer.py check_secret: an order's own {order}-auth (its probes' token) and "
        "{order}-tls by name, every secret check (a deletion or an edit told to the workflow)"
    ),
    **_informer("apps", "statefulsets", what="the orders' StatefulSets"),
    **_informer("networking.k8s.io", "ingresses", what="the orders' Ingresses"),
    **_informer("networking.k8s.io", "networkpolicies", what="the orders' NetworkPolicies (made again when deleted)"),
    **_informer("autoscaling", "horizontalpodautoscalers", what="the orders' HPAs (scaling, preemption)"),
    **_informer("resource.k8s.io", "resourceclaimtemplates", what="the orders' claim templates"),
    **_informer(
        "resource.k8s.io",
        "resourceslices",
        "resourceclaims",
        what="the GPU inventory the replica placer places an autoscaled order's replicas on",
    ),
    **_informer("gpu.deckhouse.io", "physicalgpus", what="the GPU inventory (the replica placer)"),
    ("resource.k8s.io", "resourceclaims/status", "update"): (
        "worker/observer/replica_placer.py: a gated replica's claim allocated on the device it chose"
    ),
    ("", "pods", "patch"): "worker/observer/replica_placer.py: the replica-placement scheduling gate removed",
    ("", "pods/status", "patch"): "worker/observer/replica_placer.py: ReplicaPlaced=False/NoPlace on a replica",
    **_informer("scheduling.k8s.io", "priorityclasses", what="an autoscaled order's priority; a class's Ready"),
    **_informer("resource.k8s.io", "deviceclasses", what="the DeviceClasses a class names (its Ready), metadata only"),
    **_informer("storage.k8s.io", "storageclasses", what="the StorageClass a class names (its Ready), metadata only"),
    **_informer("cert-manager.io", "clusterissuers", what="the ClusterIssuer a class names (its Ready), metadata only"),
    **_informer(MODELS, "models", "clustermodels", what="catalog models an order waits for"),
}

PLANNER: dict[Rule, str] = {
    ("authentication.k8s.io", "tokenreviews", "create"): "planner/service.py: authenticate a caller's token",
    ("authorization.k8s.io", "subjectaccessreviews", "create"): "planner/service.py: authorize a caller",
    **_informer("gpu.deckhouse.io", "physicalgpus", what="the GPU inventory (worker/observer/inventory.py)"),
    **_informer(
        "resource.k8s.io", "resourceslices", "deviceclasses", "resourceclaims", what="the DRA inventory and bookings"
    ),
    **_informer("resource.k8s.io", "resourceclaimtemplates", what="pinned orders' planned placements (reserved)"),
    **_informer("", "pods", what="which order holds an allocated claim; what the pods bound to a node request"),
    **_informer("", "nodes", what="the nodes as the scheduler judges them (CPU, memory, pods, taints, cordons)"),
    **_informer(
        "apps",
        "statefulsets",
        what="the orders' StatefulSets: a pod's order label believed along the controller chain only",
    ),
}

HUMAN_READ = ("get", "list", "watch")
ALL = ("get", "list", "watch", "create", "update", "patch", "delete")
HUMAN_WRITE = ("create", "update", "patch", "delete", "deletecollection")
GUIDE = "docs/admin-guide.md, 'Grant access'"

REASONS: dict[str, dict[Rule, str]] = {
    "d8:ai-inference:worker": WORKER,
    "d8:ai-inference:watcher": WATCHER,
    "d8:ai-inference:planner": PLANNER,
    "d8:ai-inference:catalog-reader": _rules(
        MODELS, ("models", "clustermodels"), ("get",), "activities/catalog.py: one model by name (CR fallback)"
    ),
    "d8:ai-inference:crd-upgrade": _rules(
        "apiextensions.k8s.io",
        ("customresourcedefinitions@inferenceservices.ai.deckhouse.io,inferenceserviceclasses.ai.deckhouse.io",),
        ("get", "patch", "update"),
        "the pre-upgrade hook applies the module's two CRDs, by name",
    ),
    "d8:ai-inference:disable": {
        **_rules(
            AI, ("inferenceservices",), ("list", "patch"), "worker/disable.py: every order, its finalizer removed"
        ),
        (AI, "inferenceservices/status", "patch"): "worker/disable.py: each order says ModuleDisabled",
        **{
            (OWNED_GROUP.get(resource, "apps"), resource, verb): (
                "worker/disable.py: each order's workload read by the name the module gives it, deleted when the "
                "order owns it"
            )
            for resource in (
                "statefulsets",
                "services",
                "ingresses",
                "networkpolicies",
                "horizontalpodautoscalers",
                "resourceclaimtemplates",
            )
            for verb in ("get", "delete")
        },
        ("", "pods", "list"): "worker/disable.py: waits until the order's replicas are gone",
    },
    "d8:user-authz:ai-inference:user": _rules(AI, ("inferenceservices",), HUMAN_READ, f"read orders ({GUIDE})"),
    "d8:user-authz:ai-inference:privileged-user": {},
    "d8:user-authz:ai-inference:editor": _rules(AI, ("inferenceservices",), HUMAN_WRITE, f"order inference ({GUIDE})"),
    "d8:user-authz:ai-inference:admin": {},
    "d8:user-authz:ai-inference:cluster-editor": {
        **_rules(AI, ("inferenceserviceclasses",), HUMAN_READ + HUMAN_WRITE, f"the module administrator ({GUIDE})"),
        **_rules(AI, ("inferenceservices",), HUMAN_READ, f"which class each order uses ({GUIDE})"),
        **_rules("scheduling.k8s.io", ("priorityclasses",), HUMAN_READ, "the priority classes a class admits"),
    },
    "d8:user-authz:ai-inference:cluster-admin": {},
    "d8:manage:permission:module:ai-inference:edit": {
        **_rules(AI, ("inferenceserviceclasses",), HUMAN_WRITE, f"rbacv2 manage: the classes ({GUIDE})"),
        **_rules(
            "deckhouse.io", ("moduleconfigs@ai-inference",), ("create", "update", "patch", "delete"), "the ModuleConfig"
        ),
    },
    "d8:manage:permission:module:ai-inference:view": {
        **_rules(AI, ("inferenceserviceclasses", "inferenceservices"), HUMAN_READ, f"rbacv2 manage, read ({GUIDE})"),
        **_rules("scheduling.k8s.io", ("priorityclasses",), HUMAN_READ, "the priority classes a class admits"),
        **_rules("deckhouse.io", ("moduleconfigs@ai-inference",), HUMAN_READ, "the ModuleConfig"),
    },
    "d8:use:capability:module:ai-inference:edit": _rules(
        AI, ("inferenceservices",), HUMAN_WRITE, f"rbacv2 use: order inference in a namespace ({GUIDE})"
    ),
    "d8:use:capability:module:ai-inference:view": _rules(
        AI, ("inferenceservices",), HUMAN_READ, f"rbacv2 use: read orders in a namespace ({GUIDE})"
    ),
}

# Roles of the module's own namespace (nothing cluster-wide).
NAMESPACED_REASONS: dict[str, dict[Rule, str]] = {
    "ai-inference-disable": _rules(
        "apps",
        ("deployments@ai-inference-worker,ai-inference-watcher",),
        ("get", "patch"),
        "the pre-delete hook scales the release's two reconcilers to 0 first (worker/disable.py), by name",
    ),
    "d8:ai-inference:watcher-leader-election": {
        ("coordination.k8s.io", "leases", "get"): "worker/observer/leader.py: a standby reads its shard's Lease",
        ("coordination.k8s.io", "leases", "create"): "worker/observer/leader.py: the first replica makes the Lease",
        ("coordination.k8s.io", "leases", "update"): (
            "worker/observer/leader.py: renew, take over or release the Lease (a replace guarded by resourceVersion)"
        ),
    },
}

DEV = "the local cluster's people (deploy/dev/rbac.yaml), until the chart's roles are installed"
DEV_REASONS: dict[str, dict[Rule, str]] = {
    "ai-inference-dev:module-admin": {
        **_rules(AI, ("inferenceserviceclasses",), ALL, DEV),
        **_rules(
            AI, ("inferenceservices", "inferenceserviceclasses/status", "inferenceservices/status"), HUMAN_READ, DEV
        ),
        **_rules(MODELS, ("clustermodels", "models"), ALL, DEV),
        **_rules("gpu.deckhouse.io", ("physicalgpus",), HUMAN_READ, f"{DEV}: the GPU inventory"),
        **_rules(
            "resource.k8s.io",
            ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"),
            HUMAN_READ,
            f"{DEV}: the DRA inventory",
        ),
        **_rules("", ("nodes", "namespaces"), HUMAN_READ, f"{DEV}: the fleet"),
        **_rules("scheduling.k8s.io", ("priorityclasses",), HUMAN_READ, DEV),
    },
    "ai-inference-dev:user-cluster": _rules(MODELS, ("clustermodels",), HUMAN_READ, f"{DEV}: the catalog"),
    "ai-inference-dev:orders-edit": {
        **_rules(AI, ("inferenceservices",), ALL, DEV),
        **_rules(AI, ("inferenceservices/status",), HUMAN_READ, DEV),
        **_rules(MODELS, ("models",), ALL, DEV),
    },
}


def granted(role: dict[str, Any]) -> set[Rule]:
    out = set()
    for rule in role.get("rules") or []:
        names = rule.get("resourceNames") or []
        for group in rule.get("apiGroups") or [""]:
            for resource in rule["resources"]:
                key = f"{resource}@{','.join(names)}" if names else resource
                for verb in rule["verbs"]:
                    out.add((group, key, verb))
    return out


def _differences(name: str, role: dict[str, Any], reasons: dict[Rule, str]) -> list[str]:
    have = granted(role)
    return [f"{name}: {r} has no reason here" for r in sorted(have - set(reasons))] + [
        f"{name}: {r} is given a reason but not granted" for r in sorted(set(reasons) - have)
    ]


def test_every_rule_of_every_chart_role_has_its_reason(helm: Helm) -> None:
    roles = {r["metadata"]["name"]: r for r in of_kind(helm.render(), "ClusterRole")}
    assert set(roles) == set(REASONS)
    problems = [p for name, role in roles.items() for p in _differences(name, role, REASONS[name])]
    assert not problems, "\n".join(problems)
    assert all(reason.strip() for table in REASONS.values() for reason in table.values())


def test_every_rule_of_every_chart_namespaced_role_has_its_reason(helm: Helm) -> None:
    roles = {r["metadata"]["name"]: r for r in of_kind(helm.render(), "Role")}
    assert set(roles) == set(NAMESPACED_REASONS)
    problems = [p for name, role in roles.items() for p in _differences(name, role, NAMESPACED_REASONS[name])]
    assert not problems, "\n".join(problems)
    # Only Leases and the two reconcilers by name, never a delete (a Lease outlives its holders: the
    # count of transitions is the fence; the hook scales the Deployments, Helm deletes them).
    for table in NAMESPACED_REASONS.values():
        assert {(g, r) for g, r, _ in table} <= {
            ("coordination.k8s.io", "leases"),
            ("apps", "deployments@ai-inference-worker,ai-inference-watcher"),
        }
        assert not [v for _, _, v in table if v in ("delete", "deletecollection", "*")]


def test_every_rule_of_the_dev_roles_has_its_reason() -> None:
    docs = [d for d in yaml.safe_load_all(Path(DEV_RBAC).read_text()) if d]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    assert set(roles) == set(DEV_REASONS)
    problems = [p for name, role in roles.items() for p in _differences(name, role, DEV_REASONS[name])]
    assert not problems, "\n".join(problems)


def test_what_the_process_roles_must_never_have() -> None:
    # No process enumerates Secrets (issue 33): the worker and the observer name every Secret they
    # read; a stolen token of either reads no Secret whose name it does not already know.
    for table in (WORKER, WATCHER):
        assert not {("", "secrets", v) for v in ("list", "watch", "update", "deletecollection")} & set(table)
    # The planner reads no Secret at all.
    assert not any(resource == "secrets" for _, resource, _ in PLANNER)
    # The observer and the planner read through informers: no get, but the one Secret read by name and
    # a downloading replica's fetcher log (no informer serves logs).
    assert sorted(r for r in WATCHER if r[2] == "get") == [("", "pods/log", "get"), ("", "secrets", "get")]
    assert not [r for r in PLANNER if r[2] == "get"]
    # No process may change RBAC, impersonate, or touch a Secret it did not name.
    for table in (WORKER, WATCHER, PLANNER):
        for group, _, verb in table:
            assert group != "rbac.authorization.k8s.io"
            assert verb not in ("bind", "escalate", "impersonate", "*")
