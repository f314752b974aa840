"""tests/monitoring: the chart's monitoring proven against real tools (helm, promtool, Prometheus).

The live stack's fixture (``monitored``, test_live_queries.py) starts a Prometheus of its own: it
needs the pinned prometheus and helm built before the first test, like the fixtures of
tests/metrics/fixtures.py (``tests.fixtures.binaries`` marks such tests ``binaries``).
"""

from __future__ import annotations

from tests.fixtures.binaries import BINARY_FIXTURES

BINARY_FIXTURES.update({"monitored": ("prometheus", "helm")})
