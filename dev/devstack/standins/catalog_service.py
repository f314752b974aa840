"""Stand-in for the ai-models internal lookup API (F2-08), for local runs and tests.

A separate process on loopback that answers ``GET /api/internal/v1/models/lookup`` from a
fixtures file, and that can be made slow, failing, or absent (not started / stopped) so the
controller's fallback to the Model / ClusterModel objects can be exercised over real HTTP.

Run it::

    python -m devstack.standins.catalog_service --port 18080 --fixtures models.yaml

Wire format (documented in docs/catalog.md):

* ``GET {path}?kind=ClusterModel|Model&name=N[&namespace=NS]``
  - 200 ``{"kind", "name", "namespace", "ready", "scope", "source", "facts": {...}}``
    (CatalogLookupResult plus ``source``: activities.catalog.CatalogLookupAnswer)
  - 404 ``{"reason": "ModelNotFound", "message": ...}``
  - 400 ``{"reason": "BadRequest", "message": ...}``
  - 503 ``{"reason": "Unavailable", "message": ...}`` in mode ``fail``
* ``POST /admin/mode {"mode": "ok"|"fail"|"slow", "delaySeconds": 5, "failStatus": 503}``
* ``POST /admin/models {"kind", "name", "namespace"?, "ready"?, "source"?, "facts"?}``: add or update
  (fields given replace the stored ones, so ``{"kind", "name", "ready": true}`` marks ready)
* ``DELETE /admin/models?kind=&name=&namespace=``
* ``GET /admin/stats``: ``{"lookups": N, "mode": ...}``; ``GET /healthz``

Fixtures file::

    models:
      - kind: ClusterModel
        name: qwen2-5-7b-instruct
        ready: true
        source: hf://Qwen/Qwen2.5-7B-Instruct
        facts: {parameterCount: 7B, format: safetensors, endpointTypes: [Chat]}
      - kind: Model
        name: e5-large
        namespace: team-a
        ready: false
        facts: {endpointTypes: [Embeddings]}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from activities.catalog import CatalogLookupAnswer
from devstack.standins import process
from inference_api.catalog_types import ModelFacts
from inference_api.types import ModelKind, ModelScope

DEFAULT_PATH = "/api/internal/v1/models/lookup"
Mode = Literal["ok", "fail", "slow"]


class StandInModel(BaseModel):
    """One catalog entry of the fixtures file."""

    model_config = ConfigDict(extra="forbid")
    kind: ModelKind
    name: str = Field(min_length=1)
    namespace: str | None = None
    ready: bool = True
    source: str | None = Field(default=None, description="spec.source of the object, e.g. hf://org/repo.")
    facts: ModelFacts = Field(default_factory=ModelFacts)

    def key(self) -> tuple[str, str, str | None]:
        # A ClusterModel has no namespace, whatever a fixture says.
        return (self.kind.value, self.name, self.namespace if self.kind is ModelKind.MODEL else None)


class Fixtures(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: list[StandInModel] = Field(default_factory=list)


class ModeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Mode
    delaySeconds: float = Field(default=5.0, ge=0)
    failStatus: int = Field(default=503, ge=500, le=599)


def load_fixtures(path: Path | None) -> list[StandInModel]:
    if path is None:
        return []
    data = yaml.safe_load(path.read_text()) or {}
    return Fixtures.model_validate(data).models


@dataclass
class CatalogState:
    """Everything the service knows; mutated by the admin endpoints."""

    models: dict[tuple[str, str, str | None], StandInModel] = field(default_factory=dict)
    mode: Mode = "ok"
    delay_seconds: float = 5.0
    fail_status: int = 503
    lookups: int = 0

    def put(self, model: StandInModel) -> None:
        self.models[model.key()] = model


def _error(status: int, reason: str, message: str) -> JSONResponse:
    return JSONResponse({"reason": reason, "message": message}, status_code=status)


def create_app(models: list[StandInModel] | None = None, path: str = DEFAULT_PATH) -> Starlette:
    state = CatalogState()
    for model in models or []:
        state.put(model)

    async def lookup(request: Request) -> JSONResponse:
        state.lookups += 1
        if state.mode == "fail":
            return _error(state.fail_status, "Unavailable", "stand-in catalog is in mode fail")
        if state.mode == "slow":
            await asyncio.sleep(state.delay_seconds)
        kind_text = request.query_params.get("kind", "")
        name = request.query_params.get("name", "")
        namespace = request.query_params.get("namespace") or None
        try:
            kind = ModelKind(kind_text)
        except ValueError:
            return _error(400, "BadRequest", f"kind must be Model or ClusterModel, got {kind_text!r}")
        if not name:
            return _error(400, "BadRequest", "name is required")
        if kind is ModelKind.MODEL and namespace is None:
            return _error(400, "BadRequest", "namespace is required for kind Model")
        key = (kind.value, name, namespace if kind is ModelKind.MODEL else None)
        model = state.models.get(key)
        if model is None:
            where = f" in namespace {namespace}" if key[2] else ""
            return _error(404, "ModelNotFound", f"{kind.value} {name}{where} not found")
        result = CatalogLookupAnswer(
            kind=kind.value,
            name=name,
            namespace=key[2],
            ready=model.ready,
            scope=ModelScope.CLUSTER if kind is ModelKind.CLUSTER_MODEL else ModelScope.NAMESPACE,
            facts=model.facts,
            source=model.source,
        )
        return JSONResponse(result.model_dump(mode="json"))

    async def set_mode(request: Request) -> JSONResponse:
        try:
            body = ModeRequest.model_validate_json(await request.body())
        except ValidationError as err:
            return _error(400, "BadRequest", str(err))
        state.mode, state.delay_seconds, state.fail_status = body.mode, body.delaySeconds, body.failStatus
        return JSONResponse(body.model_dump())

    async def put_model(request: Request) -> JSONResponse:
        try:
            body = await request.json()
            partial = StandInModel.model_validate(body)
        except (ValueError, ValidationError) as err:
            return _error(400, "BadRequest", str(err))
        existing = state.models.get(partial.key())
        merged = partial
        if existing is not None:
            # Fields not named in the request keep their stored values (so "mark ready" is one field).
            merged = existing.model_copy(update={k: getattr(partial, k) for k in partial.model_fields_set})
        state.put(merged)
        return JSONResponse(merged.model_dump(mode="json"))

    async def delete_model(request: Request) -> JSONResponse:
        params = request.query_params
        try:
            kind = ModelKind(params.get("kind", ""))
        except ValueError:
            return _error(400, "BadRequest", "kind must be Model or ClusterModel")
        key = (kind.value, params.get("name", ""), params.get("namespace") if kind is ModelKind.MODEL else None)
        removed = state.models.pop(key, None)
        return JSONResponse({"deleted": removed is not None})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse({"lookups": state.lookups, "mode": state.mode, "models": len(state.models)})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route(path, lookup, methods=["GET"]),
            Route("/admin/mode", set_mode, methods=["POST"]),
            Route("/admin/models", put_model, methods=["POST"]),
            Route("/admin/models", delete_model, methods=["DELETE"]),
            Route("/admin/stats", stats, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Stand-in ai-models catalog lookup service.")
    parser.add_argument("--host", default="127.0.0.1", help="Loopback by default: it is a test double.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fixtures", type=Path, default=None, help="YAML file with a models: list.")
    parser.add_argument("--path", default=DEFAULT_PATH, help="Path of the lookup endpoint.")
    args = parser.parse_args(argv)
    app = create_app(load_fixtures(args.fixtures), args.path)
    # A short graceful shutdown: a request parked in mode slow must not hold a stop for long.
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=1)


# ------------------------------------------------------------------- test helper


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CatalogServiceProcess:
    """Starts the stand-in as a subprocess on a free loopback port; stop() makes it absent.

    ``restart()`` brings it back on the same port, so a client configured once sees the
    service go away and come back.
    """

    def __init__(
        self,
        fixtures: Path | list[StandInModel] | None = None,
        *,
        path: str = DEFAULT_PATH,
        port: int | None = None,
        startup_timeout_seconds: float = 20,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="catalog-standin-")
        if isinstance(fixtures, list):
            fixtures_file = Path(self._tmp.name) / "fixtures.yaml"
            doc = {"models": [m.model_dump(mode="json", exclude_none=True) for m in fixtures]}
            fixtures_file.write_text(yaml.safe_dump(doc))
            self.fixtures: Path | None = fixtures_file
        else:
            self.fixtures = fixtures
        self.path = path
        self.port = port
        self._startup_timeout = startup_timeout_seconds
        self._process: subprocess.Popen[bytes] | None = None
        self._log = Path(self._tmp.name) / "service.log"

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the stand-in catalog was never started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> CatalogServiceProcess:
        if self.running:
            return self
        # A free port can be taken between probing and binding: try a few before giving up.
        attempts = 1 if self.port is not None else 3
        for attempt in range(attempts):
            if self.port is None or attempt > 0:
                self.port = free_port()
            if self._spawn_and_wait():
                return self
        raise RuntimeError(f"stand-in catalog did not start:\n{self._log.read_text(errors='replace')[-4000:]}")

    def _spawn_and_wait(self) -> bool:
        cmd = [sys.executable, "-m", "devstack.standins.catalog_service", "--port", str(self.port)]
        cmd += ["--path", self.path]
        if self.fixtures is not None:
            cmd += ["--fixtures", str(self.fixtures)]
        self._process = process.spawn(cmd, self._log)
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                return False
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return True
            time.sleep(0.05)
        self.stop()
        return False

    def stop(self) -> None:
        child, self._process = self._process, None
        process.stop(child)

    def restart(self) -> CatalogServiceProcess:
        """Start again on the same port (the state set through /admin is lost, fixtures reload)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> CatalogServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Admin calls, synchronous: tests drive the service between lookups.

    def _admin(self, method: str, url: str, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{self.base_url}{url}", timeout=5, **kwargs)
        response.raise_for_status()
        return response.json()

    def set_mode(self, mode: Mode, *, delay_seconds: float = 5.0, fail_status: int = 503) -> None:
        body = {"mode": mode, "delaySeconds": delay_seconds, "failStatus": fail_status}
        self._admin("POST", "/admin/mode", json=body)

    def put_model(self, kind: ModelKind | str, name: str, **fields: Any) -> dict[str, Any]:
        """Add or update a model; e.g. put_model("ClusterModel", "x", ready=True) marks it ready."""
        body = {"kind": str(kind), "name": name, **fields}
        if isinstance(body.get("facts"), ModelFacts):
            body["facts"] = body["facts"].model_dump(mode="json", exclude_none=True)
        result: dict[str, Any] = self._admin("POST", "/admin/models", json=body)
        return result

    def delete_model(self, kind: ModelKind | str, name: str, namespace: str | None = None) -> bool:
        params = {"kind": str(kind), "name": name} | ({"namespace": namespace} if namespace else {})
        return bool(self._admin("DELETE", "/admin/models", params=params)["deleted"])

    def lookups(self) -> int:
        """How many lookups the service has been asked since it (re)started."""
        return int(self._admin("GET", "/admin/stats")["lookups"])


if __name__ == "__main__":
    main()
