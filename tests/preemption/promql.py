"""A tiny evaluator for exactly the expressions of the chart's capacity alerts — not PromQL at large.

Supported: ``(sum|max) by (labels) (INNER) > N`` where INNER is ``increase(metric[duration])`` or a
bare ``metric`` (optionally in parentheses). Anything else raises :class:`UnsupportedExpressionError`, so a
change of the chart's expressions is noticed rather than evaluated wrongly.

Semantics follow Prometheus where they matter for these alerts:

* an instant selector takes each series' latest sample within the 5-minute lookback, unless the
  target's latest scrape lacks the series (Prometheus writes a staleness marker then);
* ``increase(m[d])`` needs at least two samples of a series inside ``(t-d, t]`` (a series that
  appears only once yields nothing), and a drop in value is a counter reset (the new value counts
  as the increase). Prometheus also extrapolates to the window's edges; that scales a positive
  increase and never turns zero into more, so ``> 0`` decides the same without it;
* a rule with ``for`` fires once its expression has returned the series at every evaluation
  across at least that long; before that the alert is pending.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

LOOKBACK = 300.0
Labels = tuple[tuple[str, str], ...]


class UnsupportedExpressionError(ValueError):
    pass


@dataclass
class Timeline:
    """Scrapes of one target: (time, {(metric name, labels): value})."""

    scrapes: list[tuple[float, dict[tuple[str, Labels], float]]] = field(default_factory=list)

    def add(self, at: float, samples: Mapping[tuple[str, Labels], float]) -> None:
        self.scrapes.append((at, dict(samples)))

    def series(self, metric: str) -> dict[Labels, list[tuple[float, float]]]:
        out: dict[Labels, list[tuple[float, float]]] = {}
        for at, samples in self.scrapes:
            for (name, labels), value in samples.items():
                if name == metric:
                    out.setdefault(labels, []).append((at, value))
        return out


_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_EXPR = re.compile(
    r"^(?P<agg>sum|max)\s+by\s*\((?P<by>[\w\s,]*)\)\s*\(\s*(?P<inner>.+?)\s*\)\s*>\s*(?P<threshold>[\d.]+)$"
)
_INCREASE = re.compile(r"^\(?\s*increase\(\s*(?P<metric>[a-zA-Z_:][\w:]*)\s*\[(?P<range>\w+)\]\s*\)\s*\)?$")
_BARE = re.compile(r"^\(?\s*(?P<metric>[a-zA-Z_:][\w:]*)\s*\)?$")


def seconds(duration: str) -> float:
    match = _DURATION.match(duration.strip())
    if not match:
        raise UnsupportedExpressionError(f"duration {duration!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _increase(points: Sequence[tuple[float, float]]) -> float:
    total = 0.0
    for (_, before), (_, after) in pairwise(points):
        total += after - before if after >= before else after
    return total


def evaluate(expr: str, timeline: Timeline, at: float) -> dict[Labels, float]:
    """The expression's result at time ``at``: output labels -> value."""
    match = _EXPR.match(" ".join(expr.split()))
    if not match:
        raise UnsupportedExpressionError(expr)
    by = [label.strip() for label in match.group("by").split(",") if label.strip()]
    inner = match.group("inner")
    values: dict[Labels, float] = {}
    if increase := _INCREASE.match(inner):
        window = seconds(increase.group("range"))
        for labels, points in timeline.series(increase.group("metric")).items():
            inside = [(t, v) for t, v in points if at - window < t <= at]
            if len(inside) >= 2:
                values[labels] = _increase(inside)
    elif bare := _BARE.match(inner):
        # The latest scrape decides: a series missing from it got a staleness marker there.
        latest = max((t for t, _ in timeline.scrapes if t <= at), default=None)
        for labels, points in timeline.series(bare.group("metric")).items():
            recent = [(t, v) for t, v in points if at - LOOKBACK < t <= at]
            if recent and recent[-1][0] == latest:
                values[labels] = recent[-1][1]
    else:
        raise UnsupportedExpressionError(inner)
    grouped: dict[Labels, list[float]] = {}
    for labels, value in values.items():
        kept = tuple((k, v) for k, v in labels if k in by)
        grouped.setdefault(kept, []).append(value)
    combine = sum if match.group("agg") == "sum" else max
    threshold = float(match.group("threshold"))
    return {labels: float(combine(vs)) for labels, vs in grouped.items() if combine(vs) > threshold}


def alert_states(expr: str, hold_for: float, timeline: Timeline, evaluations: Sequence[float]) -> dict[Labels, str]:
    """``pending`` or ``firing`` per series at the last evaluation (rules evaluated at these times)."""
    since: dict[Labels, float] = {}
    result: dict[Labels, float] = {}
    for at in evaluations:
        result = evaluate(expr, timeline, at)
        since = {labels: since.get(labels, at) for labels in result}
    last = evaluations[-1]
    return {labels: "firing" if last - start >= hold_for else "pending" for labels, start in since.items()}
