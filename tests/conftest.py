"""Shared fixtures. Real components are plugins in tests/fixtures/ (binaries, cluster, temporal).

Each plugin marks the tests whose fixtures need it (``binaries``, ``cluster``, ``temporal``, ``vllm``,
``engine``, ``prodtemporal``; derived from the fixture closure, not written by hand), so the fast path that
needs no built binary and no service is ``pytest -m "not cluster and not temporal and not binaries and not
packaging and not vllm and not engine and not prodtemporal"``.
"""

pytest_plugins = [
    "tests.fixtures.binaries",
    "tests.fixtures.cluster",
    "tests.fixtures.temporal",
    "tests.fixtures.prodtemporal",
    "tests.fixtures.vllm",
    "tests.fixtures.engine",
    "tests.metrics.fixtures",
]
