"""``ai-inference crds --apply``: the decision per CRD (up to date, server-side apply, spec replaced)
and the 403 message, without a server; then the installed script against the local control plane —
as the admin it brings stale CRDs to the generated ones, as a namespace user it is refused (exit 3,
naming the verb and the CRD). The chart's hook runs the same command: tests/chart/test_crd_upgrade.py."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, ApiextensionsV1Api
from typer.testing import CliRunner

from devstack.cluster.launcher import LocalCluster
from worker.cli import ExitCode, app
from worker.crd_upgrade import CrdClient, RefusedError, as_stored, is_current, module_crds, refusal, upgrade

SCRIPTS = Path(sys.executable).parent
CHART_CRDS = Path(__file__).resolve().parents[2] / "deploy" / "charts" / "ai-inference" / "crds"
FORBIDDEN = json.dumps(
    {
        "kind": "Status",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": 'customresourcedefinitions.apiextensions.k8s.io "inferenceservices.ai.deckhouse.io" is forbidden: '
        'User "system:serviceaccount:d8-ai-inference:x" cannot update resource "customresourcedefinitions" '
        'in API group "apiextensions.k8s.io" at the cluster scope',
    }
)


class FakeError(Exception):
    def __init__(self, status: int, body: str = "") -> None:
        super().__init__(status)
        self.status, self.body = status, body


def _stored(crd: dict[str, Any]) -> dict[str, Any]:
    """``crd`` as the API server hands it back."""
    return {**copy.deepcopy(crd), "spec": as_stored(crd), "metadata": {**crd["metadata"], "resourceVersion": "7"}}


class FakeServer:
    """CRDs by name; apply merges like server-side apply over another manager's fields (a spec field
    the applied CRD does not set stays); replace takes the body's spec."""

    def __init__(self, stored: dict[str, dict[str, Any]], refuse: str | None = None) -> None:
        self.stored, self.refuse = stored, refuse
        self.calls: list[str] = []

    def client(self) -> CrdClient:
        return CrdClient(get=self.get, apply=self.apply, replace=self.replace)

    def _call(self, verb: str) -> None:
        self.calls.append(verb)
        if verb == self.refuse:
            raise FakeError(403, FORBIDDEN)

    def get(self, name: str) -> dict[str, Any] | None:
        self._call("get")
        return copy.deepcopy(self.stored.get(name))

    def apply(self, crd: dict[str, Any]) -> dict[str, Any]:
        self._call("patch")
        name = crd["metadata"]["name"]
        old = self.stored.get(name)
        spec = copy.deepcopy(crd["spec"])
        if old is not None:
            _merge_into(spec, old["spec"])
        merged = _stored({**crd, "spec": spec})
        self.stored[name] = merged
        return copy.deepcopy(merged)

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        self._call("update")
        assert "managedFields" not in body["metadata"]
        assert body["metadata"]["resourceVersion"] == "7"
        self.stored[body["metadata"]["name"]] = _stored(body)
        return copy.deepcopy(self.stored[body["metadata"]["name"]])


def _merge_into(new: dict[str, Any], old: dict[str, Any]) -> None:
    """Server-side apply over a spec another manager wrote: what the applied CRD does not set (a
    conversion webhook) stays; what it sets (versions: an atomic list) is replaced."""
    for key, value in old.items():
        new.setdefault(key, copy.deepcopy(value))


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_generated_crds_are_the_charts_files() -> None:
    """The generator the hook runs, from the package alone, is the one that wrote the chart's crds/."""
    for crd in module_crds():
        assert yaml.safe_load((CHART_CRDS / f"{crd['metadata']['name']}.yaml").read_text()) == crd


def test_up_to_date_crds_are_only_read() -> None:
    server = FakeServer({c["metadata"]["name"]: _stored(c) for c in module_crds()})
    lines = upgrade(server.client(), module_crds())
    assert server.calls == ["get", "get"]
    assert all(line.endswith(": up to date") for line in lines)


def test_a_missing_field_is_added_by_server_side_apply() -> None:
    crds = module_crds()
    stale = {}
    for crd in crds:
        old = _stored(crd)
        del _schema(old)["properties"]["status"]
        stale[crd["metadata"]["name"]] = old
    server = FakeServer(stale)
    assert not any(is_current(s, c) for s, c in zip(stale.values(), crds, strict=True))
    lines = upgrade(server.client(), crds)
    assert server.calls == ["get", "patch", "get", "patch"]
    assert all(line.endswith(": applied (server-side)") for line in lines)
    assert all(is_current(server.stored[c["metadata"]["name"]], c) for c in crds)


def _old_conversion(crd: dict[str, Any]) -> dict[str, Any]:
    """``crd`` as an older release had it: with a conversion webhook the generated CRD does not set."""
    old = copy.deepcopy(crd)
    old["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": "https://old-release.invalid/convert"}},
    }
    return old


def test_a_field_the_generated_crd_does_not_set_is_removed_by_replacing_the_spec() -> None:
    (crd, *_) = module_crds()
    old = _stored(_old_conversion(crd))
    server = FakeServer({crd["metadata"]["name"]: old})
    (line,) = upgrade(server.client(), [crd])
    assert server.calls == ["get", "patch", "update"]
    assert "spec replaced" in line
    assert is_current(server.stored[crd["metadata"]["name"]], crd)


def test_missing_labels_are_not_current() -> None:
    (crd, *_) = module_crds()
    stored = _stored(crd)
    stored["metadata"]["labels"] = {}
    assert not is_current(stored, crd)
    assert not is_current(None, crd)


@pytest.mark.parametrize("verb", ["get", "patch", "update"])
def test_a_403_names_the_verb_the_crd_and_who(verb: str) -> None:
    (crd, *_) = module_crds()
    server = FakeServer({crd["metadata"]["name"]: _stored(_old_conversion(crd))}, refuse=verb)
    with pytest.raises(RefusedError) as refused:
        upgrade(server.client(), [crd])
    message = str(refused.value)
    # The server's Status names the refused verb; it wins over the one the request was sent as.
    assert "system:serviceaccount:d8-ai-inference:x may not update customresourcedefinitions" in message
    assert f"'{crd['metadata']['name']}'" in message
    assert "needs get, patch and update" in message


def test_a_403_without_a_status_body_names_the_verb_sent() -> None:
    message = refusal("patch", "inferenceservices.ai.deckhouse.io", None)
    assert message.startswith("refused (403 Forbidden): the caller may not patch customresourcedefinitions")


def test_other_errors_pass_through() -> None:
    server = FakeServer({}, refuse=None)

    def broken(name: str) -> dict[str, Any] | None:
        raise FakeError(500)

    with pytest.raises(FakeError):
        upgrade(CrdClient(get=broken, apply=server.apply, replace=server.replace), module_crds())


def test_apply_and_check_exclude_each_other() -> None:
    result = CliRunner().invoke(app, ["crds", "--apply", "--check"])
    assert result.exit_code == ExitCode.USAGE


# -- against the local control plane -------------------------------------------------------------


def _run(cluster: LocalCluster, user: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI_INFERENCE_", "KUBERNETES_"))}
    return subprocess.run(
        [str(SCRIPTS / "ai-inference"), "crds", "--apply", "--kubeconfig", str(cluster.kubeconfig(user))],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,  # not the repository: the CRDs come from the installed package
    )


def test_apply_brings_stale_crds_to_the_generated_ones_and_refuses_without_rights(
    local_cluster: LocalCluster, kube_admin: ApiClient, tmp_path: Path
) -> None:
    api = ApiextensionsV1Api(kube_admin)
    crds = module_crds()
    for index, crd in enumerate(crds):
        name = crd["metadata"]["name"]
        if index == 0:
            old = _old_conversion(crd)
        else:
            old = copy.deepcopy(crd)
            _schema(old)["properties"]["status"].pop("description")
        old["metadata"]["resourceVersion"] = api.read_custom_resource_definition(name).metadata.resource_version
        api.replace_custom_resource_definition(name, old, field_manager="helm")

    refused = _run(local_cluster, "ns-user", tmp_path)
    assert refused.returncode == ExitCode.REFUSED, refused.stderr
    assert "may not get customresourcedefinitions.apiextensions.k8s.io" in refused.stderr
    assert "'inferenceservices.ai.deckhouse.io'" in refused.stderr or "'inferenceserviceclasses" in refused.stderr

    applied = _run(local_cluster, "admin", tmp_path)
    assert applied.returncode == ExitCode.OK, applied.stderr
    assert "spec replaced" in applied.stdout
    for crd in crds:
        stored = api.api_client.sanitize_for_serialization(api.read_custom_resource_definition(crd["metadata"]["name"]))
        assert is_current(stored, crd)
        assert stored["spec"] == {**crd["spec"], "conversion": {"strategy": "None"}}
        managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
        assert "ai-inference" in managers

    again = _run(local_cluster, "admin", tmp_path)
    assert again.returncode == ExitCode.OK, again.stderr
    assert again.stdout.splitlines() == [f"{c['metadata']['name']}: up to date" for c in crds]
