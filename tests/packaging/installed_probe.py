"""Run by the python of a fresh venv that has only the production wheel installed (not a test module).

Plans one order with the installed planner library, then serves the installed planner service and
asks it for the same plan over HTTP. Prints one JSON document: where the code came from and both
outcomes. argv: the inventory snapshot (JSON file), the LaunchPlanRequest (JSON file).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import httpx
import uvicorn

import planner
from inference_api.plan import LaunchPlanRequest
from planner import InventorySnapshot, PlanningRequest, plan_launch
from planner.recipes import load_recipe_book, shipped_recipes
from planner.service import LAUNCH_PLAN_PATH, Caller, Decision, create_app

TOKEN = "probe-token"


class OneCallerReviewer:
    """Stands in for TokenReview/SubjectAccessReview: one known token, allowed."""

    audience = "ai-inference-planner"

    def authenticate(self, token: str) -> Caller | None:
        return Caller("system:serviceaccount:probe:worker") if token == TOKEN else None

    def authorize(self, caller: Caller) -> Decision:
        return Decision(True, "probe")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def serve_and_ask(snapshot: InventorySnapshot, request: LaunchPlanRequest) -> dict[str, object]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(lambda: snapshot, OneCallerReviewer()), host="127.0.0.1", port=port, log_config=None)
    )
    task = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(100):
                if server.started:
                    break
                await asyncio.sleep(0.05)
            answer = await client.post(
                LAUNCH_PLAN_PATH,
                content=request.model_dump_json(),
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )
            answer.raise_for_status()
            served: dict[str, object] = answer.json()
            return served
    finally:
        server.should_exit = True
        await task


def main() -> None:
    snapshot = InventorySnapshot.model_validate_json(Path(sys.argv[1]).read_text())
    request = LaunchPlanRequest.model_validate_json(Path(sys.argv[2]).read_text())
    book = load_recipe_book()
    outcome = plan_launch(PlanningRequest(**request.model_dump(), inventory=snapshot))
    served = asyncio.run(serve_and_ask(snapshot, request))
    print(
        json.dumps(
            {
                "planner_file": planner.__file__,
                "recipes_dir": str(shipped_recipes()),
                "runtime_image": book.compiled.runtime.image,
                "planned": outcome.model_dump(mode="json"),
                "served": served,
            }
        )
    )


if __name__ == "__main__":
    main()
