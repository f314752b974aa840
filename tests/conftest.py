"""Shared fixtures. Real components are plugins in tests/fixtures/ (binaries, cluster, temporal).

Each plugin marks the tests whose fixtures need it (``binaries``, ``cluster``, ``temporal``, ``vllm``,
``engine``, ``prodtemporal``, ``tracing``; derived from the fixture closure, not written by hand), so the
fast path that needs no built binary and no service is ``pytest -m "not cluster and not temporal and not
binaries and not packaging and not vllm and not engine and not prodtemporal"`` (every ``tracing`` test is a
``cluster`` test too).
"""

import pytest

pytest_plugins = [
    "tests.fixtures.binaries",
    "tests.fixtures.cluster",
    "tests.fixtures.temporal",
    "tests.fixtures.prodtemporal",
    "tests.fixtures.vllm",
    "tests.fixtures.engine",
    "tests.fixtures.tracing",
    "tests.metrics.fixtures",
]

# The docs run as written (tests/docs/test_run_as_written.py) start a whole `dev up` stack of their own
# — a second control plane, Temporal, Prometheus, Jaeger and the real engine — and stop it at the end:
# they run after every other test, so that stack never overlaps the suites that share the session's.
RUN_LAST = ("tests/docs/test_run_as_written.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] in RUN_LAST)
