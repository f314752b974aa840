"""Shared fixtures. Real components are plugins in tests/fixtures/ (cluster, temporal, ...)."""

pytest_plugins = [
    "tests.fixtures.cluster",
    "tests.fixtures.temporal",
]
