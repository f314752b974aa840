"""The planner service down while orders are made, edited and deleted.

The worker plans through ``ai-inference planner`` (a process of its own) over HTTPS: the service's
serving certificate is verified against its CA (``planner.caFile``), and the worker sends a
ServiceAccount token bound to the planner's audience (``planner.tokenFile``), which the service
reviews (TokenReview for that audience, SubjectAccessReview of ``create`` on
``inferenceserviceclasses/planner``). The service is SIGKILLed for 30 s and started again on the same
port with the same certificate. Both ways the worker retries a plan back off to at most 30 s (an order
with no plan: PlannerUnavailable, again in 5, 10, 20, 30 s; a serving order's replan: the activity's
K8S_RETRY), so 30 s down covers a full backoff; a minute would only add time. Meanwhile the orders
made during the outage wait and say why (Planned=False PlannerUnavailable, with what failed); the
ones that serve keep serving (an edit made meanwhile is planned once the service is back).
Ends with the shared convergence check (tests/faults/churn.py); no token in a status or a log.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from kubernetes.client import (
    ApiClient,
    AuthenticationV1TokenRequest,
    CoreV1Api,
    RbacAuthorizationV1Api,
    V1TokenRequestSpec,
)
from kubernetes.client.exceptions import ApiException

from activities.planner_client import server_verification
from devstack.cluster.pki import IssuedCertificate, create_ca, issue_certificate
from inference_api.reasons import Reason
from inference_api.settings import PLANNER_AUDIENCE
from tests.e2e.stand import Processes, free_port
from tests.faults.churn import FaultStand, churn
from tests.faults.outage import OUTAGE_SECONDS
from tests.polling import wait_until
from tests.security.leaks import assert_clean, needles

# 30 s in CI; minutes with AI_INFERENCE_FAULT_OUTAGE_SECONDS (the issue's "unreachable for minutes").
DOWN_SECONDS = max(30.0, OUTAGE_SECONDS)


@dataclass
class PlannerService:
    """``ai-inference planner`` over HTTPS on a fixed port, as a subprocess of the test's ``Processes``."""

    processes: Processes
    port: int
    tls: IssuedCertificate
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = self.processes.start(
            "planner",
            "--port",
            str(self.port),
            "--tls-cert-file",
            str(self.tls.cert),
            "--tls-key-file",
            str(self.tls.key),
        )
        verify = server_verification(str(self.tls.ca))

        def ready() -> bool:
            assert self.process is not None
            assert self.process.poll() is None, "the planner service exited"
            try:
                return httpx.get(self.url + "/readyz", verify=verify, timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        # A generous start: on a loaded 2-core machine the process takes its time to import and sync.
        wait_until(
            ready,
            timeout=120,
            what="the planner service ready (inventory synced)",
            interval=0.5,
            ignore=(httpx.HTTPError,),
        )

    def stop(self) -> None:
        if self.process is not None:
            self.processes.kill(self.process)


def _planner_token(api: ApiClient, namespace: str, role: str) -> str:
    """A planner-audience token of a ServiceAccount allowed the planner subresource (as the chart
    allows the worker's)."""
    core = CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "worker"}})
    rbac = RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": ["ai.deckhouse.io"],
                    "resources": ["inferenceserviceclasses/planner"],
                    "verbs": ["create"],
                }
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": namespace}],
        }
    )
    spec = V1TokenRequestSpec(audiences=[PLANNER_AUDIENCE], expiration_seconds=3600)
    issued = core.create_namespaced_service_account_token("worker", namespace, AuthenticationV1TokenRequest(spec=spec))
    return str(issued.status.token)


@dataclass
class Planner:
    service: PlannerService
    token: str


@pytest.fixture
def planner(fault_stand: FaultStand, faults_admin: ApiClient, tmp_path: Path) -> Iterator[Planner]:
    """The planner service started, and the stand's worker started again to plan through it."""
    fs = fault_stand
    directory = tmp_path / "planner-tls"
    directory.mkdir()
    ca = create_ca(directory, "planner-ca")
    tls = issue_certificate(ca, directory, "planner", sans=("DNS:localhost", "IP:127.0.0.1"))
    role = f"faults-planner-caller-{uuid.uuid4().hex[:6]}"
    token = _planner_token(faults_admin, fs.stand.namespace, role)
    token_file = tmp_path / "planner-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    service = PlannerService(fs.processes, free_port(), tls)
    try:
        service.start()
        fs.kill_worker()
        fs.processes.env.update(
            {
                "AI_INFERENCE_PLANNER__BASEURL": service.url,
                "AI_INFERENCE_PLANNER__CAFILE": str(tls.ca),
                "AI_INFERENCE_PLANNER__TOKENFILE": str(token_file),
                "AI_INFERENCE_PLANNER__TIMEOUTSECONDS": "5",
            }
        )
        fs.start_worker()
        yield Planner(service, token)
    finally:
        # The fixture's teardown deletes the orders with this worker: the service must serve again.
        with contextlib.suppress(Exception):
            if service.process is None or service.process.poll() is not None:
                service.start()
        rbac = RbacAuthorizationV1Api(faults_admin)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(role)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(role)


def _waiting(fs: FaultStand) -> dict[str, tuple[str | None, str | None, str]]:
    """What the orders that are not settled (no status yet, not Ready, or an edit not reconciled) say:
    their status.phase and status.reason, and the whole of it as text."""
    said = {}
    for name in sorted(fs.live):
        obj = fs.stand.order(name)
        if obj is None:
            continue
        status = obj.get("status") or {}
        settled = status.get("phase") == "Ready" and status.get("observedGeneration") == obj["metadata"]["generation"]
        if not settled:
            said[name] = (
                status.get("phase"),
                status.get("reason"),
                f"generation={obj['metadata']['generation']} observedGeneration={status.get('observedGeneration')} "
                f"{fs.stand.describe(name)}",
            )
    return said


async def test_the_planner_service_down(fault_stand: FaultStand, planner: Planner) -> None:
    fs = fault_stand
    service = planner.service
    said_while_down: list[str] = []

    async def planner_down() -> None:
        await asyncio.sleep(2)
        service.stop()
        stopped = time.monotonic()
        # Long enough that the orders made and edited since wait on a plan, and the plan activity has
        # failed a few times (1, 2, 4, 8 s backoff).
        await asyncio.sleep(DOWN_SECONDS - 8)
        waiting = await asyncio.to_thread(_waiting, fs)
        print(f"\nthe planner service down for {time.monotonic() - stopped:.0f} s; the orders waiting say:")
        for name, (_, _, text) in waiting.items():
            print(f"  {name}: {text}")
        said_while_down.extend(text for _, _, text in waiting.values())
        await asyncio.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - stopped)))
        restarting = time.monotonic()
        await asyncio.to_thread(service.start)
        print(
            f"the planner service down {restarting - stopped:.0f} s, "
            f"ready again {time.monotonic() - restarting:.1f} s after its start"
        )
        # The orders made meanwhile wait and say why (not silently, not Failed for good).
        reasons = {reason for _, reason, _ in waiting.values()}
        assert Reason.PLANNER_UNAVAILABLE in reasons, f"no order said it waits for the planner: {waiting}"
        # The phase, not the text: a condition may quote another object's reason (an HPA's
        # FailedGetPodsMetric) while the order itself waits.
        failed = {name: text for name, (phase, _, text) in waiting.items() if phase == "Failed"}
        assert not failed, f"orders Failed while the planner was down: {failed}"

    seconds = await churn(fs, planner_down)
    assert seconds < 240
    # Every plan went through the service; no token nor serving key in what the user or a log sees.
    logs = fs.processes.log_text()
    assert "planner: planned" in logs
    secrets = needles(tokens=[planner.token], key_files=[service.tls.key])
    assert_clean("\n".join(said_while_down), secrets, "the order statuses while the planner was down")
    assert_clean(logs, secrets, "the worker's, observer's and planner's logs")
