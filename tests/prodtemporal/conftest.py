"""Session fixture: the production Temporal (``devstack.temporal_server``): the Temporal server built
from its Go module, on a PostgreSQL of its own, behind its own mutual TLS.

Fixtures:
  production_temporal   (session) a running ``ProductionTemporal``: ``address``, ``credentials``
                        (``module_env(client)`` for a process's settings), ``connect(client)``

A test whose fixtures include ``production_temporal`` gets the ``prodtemporal`` marker. The server is
BUILT (never skipped) before the first test runs, outside any test timeout: a cold build is about ten
minutes on two cores, then cached (``<cache>/temporal-server-<version>/``).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from devstack.temporal_server import ProductionTemporal, ensure_server_binaries
from devstack.temporal_server import production_temporal as start_production_temporal

FIXTURE = "production_temporal"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _uses_production_temporal(item: pytest.Item) -> bool:
    return FIXTURE in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_production_temporal(item):
            item.add_marker(pytest.mark.prodtemporal)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not any(_uses_production_temporal(i) for i in session.items):
        return
    ensure_server_binaries(progress=_say)


@pytest_asyncio.fixture(scope="session")
async def production_temporal(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProductionTemporal]:
    async with start_production_temporal(tmp_path_factory.mktemp("prodtemporal"), progress=_say) as server:
        yield server
