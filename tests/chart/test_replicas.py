"""The chart's replicas: workers side by side on one task queue, observers with a leader.

By default the worker runs two replicas and the observer (the watcher Deployment) two, with the
leader election on: each observer pod gets its name (``POD_NAME``) and the election's timings as
settings the process accepts, a namespaced Role lets the watcher's ServiceAccount read, create and
renew Leases in the module's namespace only, and each Deployment has a PodDisruptionBudget that
lets one replica go at a time. Timings that would allow two leaders at once are refused at render,
naming the value. Turned off, the observer runs alone and no Role is rendered.
"""

from __future__ import annotations

from typing import Any

import pytest

from inference_api.settings import LeaderElectionSettings
from tests.chart.helm import NAMESPACE, Doc, Helm, container_env, find, of_kind, template_args

LEASE_ROLE = "d8:ai-inference:watcher-leader-election"
ENV_PREFIX = "AI_INFERENCE_OBSERVER__LEADERELECTION__"


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return helm.render()


def _election(deployment: Doc) -> LeaderElectionSettings:
    """The leader-election settings the watcher process reads from its environment."""
    env = container_env(deployment)
    fields = {"ENABLED": "enabled", "LEASEDURATIONSECONDS": "leaseDurationSeconds"}
    fields |= {"RENEWDEADLINESECONDS": "renewDeadlineSeconds", "RETRYPERIODSECONDS": "retryPeriodSeconds"}
    return LeaderElectionSettings.model_validate({fields[k]: env[ENV_PREFIX + k] for k in fields})


def test_two_workers_and_two_observers_with_the_election_on(docs: list[Doc]) -> None:
    worker = find(docs, "Deployment", "ai-inference-worker")
    watcher = find(docs, "Deployment", "ai-inference-watcher")
    assert worker["spec"]["replicas"] == 2
    assert watcher["spec"]["replicas"] == 2
    election = _election(watcher)
    assert election.enabled
    assert (election.leaseDurationSeconds, election.renewDeadlineSeconds, election.retryPeriodSeconds) == (15, 10, 2)
    # The replica's name in the Lease: its pod's.
    (container,) = watcher["spec"]["template"]["spec"]["containers"]
    pod_name = next(e for e in container["env"] if e["name"] == "POD_NAME")
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The worker takes no part in the election.
    assert not [k for k in container_env(worker) if k.startswith(ENV_PREFIX)]


def test_one_replica_of_each_may_be_disrupted_at_a_time(docs: list[Doc]) -> None:
    for component in ("worker", "watcher"):
        pdb = find(docs, "PodDisruptionBudget", f"ai-inference-{component}")
        deployment = find(docs, "Deployment", f"ai-inference-{component}")
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_watcher_may_hold_leases_in_the_module_namespace_only(docs: list[Doc]) -> None:
    role = find(docs, "Role", LEASE_ROLE)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    ]
    binding = find(docs, "RoleBinding", LEASE_ROLE)
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": LEASE_ROLE}
    watcher = find(docs, "Deployment", "ai-inference-watcher")
    account = watcher["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    # No cluster-wide grant on Leases (the control plane's and the nodes' are there).
    for cluster_role in of_kind(docs, "ClusterRole"):
        for rule in cluster_role.get("rules") or []:
            assert "coordination.k8s.io" not in rule.get("apiGroups", []), cluster_role["metadata"]["name"]


def test_election_off_renders_one_observer_and_no_role(helm: Helm) -> None:
    docs = helm.render({"watcher.leaderElection.enabled": False, "watcher.replicas": 1})
    assert not [d for d in of_kind(docs, "Role") if d["metadata"]["name"] == LEASE_ROLE]
    watcher = find(docs, "Deployment", "ai-inference-watcher")
    assert watcher["spec"]["replicas"] == 1
    assert not _election(watcher).enabled


def test_timings_are_rendered_as_given(helm: Helm) -> None:
    values = {
        "watcher.leaderElection.leaseDurationSeconds": 30,
        "watcher.leaderElection.renewDeadlineSeconds": 20,
        "watcher.leaderElection.retryPeriodSeconds": 4,
        "watcher.replicas": 3,
        "worker.replicas": 4,
    }
    docs = helm.render(values)
    election = _election(find(docs, "Deployment", "ai-inference-watcher"))
    assert (election.leaseDurationSeconds, election.renewDeadlineSeconds, election.retryPeriodSeconds) == (30, 20, 4)
    assert find(docs, "Deployment", "ai-inference-watcher")["spec"]["replicas"] == 3
    assert find(docs, "Deployment", "ai-inference-worker")["spec"]["replicas"] == 4


@pytest.mark.parametrize(
    ("values", "error"),
    [
        (
            {"watcher.leaderElection.leaseDurationSeconds": 10, "watcher.leaderElection.renewDeadlineSeconds": 10},
            "renewDeadlineSeconds (10) must be below leaseDurationSeconds (10)",
        ),
        (
            {"watcher.leaderElection.retryPeriodSeconds": 9},
            "retryPeriodSeconds (9) must be well below renewDeadlineSeconds (10)",
        ),
        ({"watcher.leaderElection.leaseDurationSeconds": 0}, "leaseDurationSeconds"),
        ({"watcher.leaderElection.holder": "me"}, "additional properties 'holder' not allowed"),
    ],
)
def test_timings_that_would_allow_two_leaders_are_refused(helm: Helm, values: dict[str, Any], error: str) -> None:
    result = helm(*template_args(values), check=False)
    assert result.returncode != 0
    assert error in result.stderr, result.stderr
