"""A stand-in for the API server's reviews (the real ones: test_cluster.py)."""

from __future__ import annotations

from planner.service import Caller, Decision, ReviewError

ALLOWED = "token-allowed-9f8e7d6c5b4a"
FORBIDDEN = "token-forbidden-1a2b3c4d5e6f"


class FakeReviewer:
    audience = "ai-inference-planner"

    def __init__(self) -> None:
        self.authentications = 0
        self.authorizations = 0
        self.broken = False

    def authenticate(self, token: str) -> Caller | None:
        self.authentications += 1
        if self.broken:
            raise ReviewError("TokenReview failed: HTTP 500 Internal Server Error")
        users = {ALLOWED: Caller("system:serviceaccount:d8-ai-inference:worker"), FORBIDDEN: Caller("ns-user")}
        return users.get(token)

    def authorize(self, caller: Caller) -> Decision:
        self.authorizations += 1
        if caller.username == "ns-user":
            return Decision(False, "no RBAC policy matched")
        return Decision(True, "allowed by ClusterRoleBinding")
