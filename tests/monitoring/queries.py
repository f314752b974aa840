"""The chart's queries as Grafana and Prometheus run them: every dashboard panel's target with its
template variables substituted, every alert's expression and its signal, evaluated through
Prometheus' HTTP API.

* ``panel_queries(dashboards)``: each target of each panel (rows' nested panels included), named
  ``<dashboard uid>/<panel title>/<refId>``.
* ``GrafanaRange``: Grafana's built-in variables for a dashboard range — ``$__interval`` (the range
  over the panel's data points, not below the data source's scrape interval), ``$__rate_interval``
  (``max($__interval + scrape interval, 4 x scrape interval)``, Grafana's formula), ``$__range``.
* ``format_multi``: a multi-value/``includeAll`` variable as Grafana's Prometheus data source writes
  it into a query (``(a|b)``, regex-escaped; ``allValue`` for All).
* ``label_values``: a ``label_values(selector, label)`` variable query answered by Prometheus' label
  API, as Grafana asks it.
* ``alert_signal``: an alert's expression without its final threshold comparison (what it compares:
  ``sum by (...) (increase(...))`` of ``... > 0``): where the stack has the series, it has data.
* ``Prometheus``: instant and range queries (POST, so long expressions fit), an error answered as
  ``QueryError`` with Prometheus' own message.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Grafana asks a panel for at most this many points (its width in pixels, about): the finest
# $__interval, so the strictest $__rate_interval.
MAX_DATA_POINTS = 1000
# Characters Grafana's Prometheus data source escapes in a multi-value variable's values
# (prometheusSpecialRegexEscape), each written as \\<c> inside the query's double-quoted string.
_REGEX_SPECIAL = set("$^*{}[]'+?.()|")
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<selector>.+?)\s*,\s*(?P<label>\w+)\s*\)\s*$")
# The last comparison of an alert's expression with a number: ``... > 3600``.
_THRESHOLD = re.compile(r"^(?P<signal>.*?)\s*(?:>=|<=|==|!=|>|<)\s*(?:bool\s+)?[-+0-9.eE]+\s*$", re.DOTALL)


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str  # the dashboard's uid
    panel: str  # the panel's title
    ref: str  # the target's refId
    expr: str
    instant: bool = False  # the target asks for the last value only

    @property
    def key(self) -> str:
        return f"{self.dashboard}/{self.panel}/{self.ref}"


def _panels(panels: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or ())


def panel_queries(dashboards: Iterable[Mapping[str, Any]]) -> list[PanelQuery]:
    """Every PromQL target of every panel of ``dashboards``."""
    found: list[PanelQuery] = []
    for dashboard in dashboards:
        for panel in _panels(dashboard.get("panels") or ()):
            for target in panel.get("targets") or ():
                if target.get("expr"):
                    found.append(
                        PanelQuery(
                            dashboard["uid"],
                            panel["title"],
                            target["refId"],
                            target["expr"],
                            bool(target.get("instant")) and not target.get("range"),
                        )
                    )
    return found


def variables(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = (dashboard.get("templating") or {}).get("list") or []
    return listed


@dataclass(frozen=True)
class GrafanaRange:
    """A dashboard's time range as Grafana turns it into built-in variables and a query step."""

    start: float
    end: float
    scrape_seconds: int

    @property
    def range_seconds(self) -> int:
        return max(1, math.ceil(self.end - self.start))

    @property
    def interval_seconds(self) -> int:
        return max(self.scrape_seconds, math.ceil(self.range_seconds / MAX_DATA_POINTS))

    @property
    def rate_interval_seconds(self) -> int:
        return max(self.interval_seconds + self.scrape_seconds, 4 * self.scrape_seconds)

    def builtins(self) -> dict[str, str]:
        return {
            "__interval": f"{self.interval_seconds}s",
            "__interval_ms": str(self.interval_seconds * 1000),
            "__rate_interval": f"{self.rate_interval_seconds}s",
            "__range": f"{self.range_seconds}s",
            "__range_s": str(self.range_seconds),
            "__range_ms": str(self.range_seconds * 1000),
        }


def regex_escape(value: str) -> str:
    """One value as Grafana's Prometheus data source writes it into a regex matcher's string."""
    out = []
    for char in value:
        if char == "\\":
            out.append("\\\\\\\\")
        elif char in _REGEX_SPECIAL:
            out.append("\\\\" + char)
        else:
            out.append(char)
    return "".join(out)


def format_multi(values: list[str] | None, all_value: str | None = None) -> str:
    """A multi-value (or includeAll) variable's selection in a query: ``None`` is All."""
    if values is None:
        if all_value is None:
            raise ValueError("All selected, but the variable has no allValue")
        return all_value
    if len(values) == 1:
        return regex_escape(values[0])
    return "(" + "|".join(regex_escape(v) for v in values) + ")"


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with ``$name`` / ``${name}`` replaced; a variable not in ``values`` is an error."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"variable ${name} of {expr!r} has no value in the test")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def alert_signal(expr: str) -> str | None:
    """The expression an alert compares with its threshold, or ``None`` if it ends in no comparison."""
    match = _THRESHOLD.match(expr.strip())
    return match.group("signal").strip() if match else None


class QueryError(AssertionError):
    """Prometheus refused or failed a query; the message is Prometheus' own."""


@dataclass(frozen=True)
class Prometheus:
    url: str
    timeout: float = 30

    def _call(self, path: str, params: Mapping[str, str] | list[tuple[str, str]]) -> Any:
        data = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/{path}", data=data, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            try:
                body = json.loads(text)
            except ValueError:
                raise QueryError(f"HTTP {err.code} from /api/v1/{path}: {text[:500]}") from err
        if body.get("status") != "success":
            raise QueryError(f"{body.get('errorType')}: {body.get('error')}")
        if body.get("warnings"):
            raise QueryError(f"warnings: {body['warnings']}")
        return body["data"]

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}", timeout=self.timeout) as response:
            body = json.loads(response.read())
        assert body.get("status") == "success", body
        return body["data"]

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self._call("query", params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def range(self, expr: str, span: GrafanaRange) -> list[dict[str, Any]]:
        data = self._call(
            "query_range",
            {
                "query": expr,
                "start": f"{span.start:.3f}",
                "end": f"{span.end:.3f}",
                "step": f"{span.interval_seconds}s",
            },
        )
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, query: str, span: GrafanaRange) -> list[str]:
        """A ``label_values(selector, label)`` variable query, as Grafana asks Prometheus."""
        match = _LABEL_VALUES.match(query)
        if match is None:
            raise ValueError(f"not a label_values(selector, label) query: {query!r}")
        params = [
            ("match[]", match.group("selector")),
            ("start", f"{span.start:.3f}"),
            ("end", f"{span.end:.3f}"),
        ]
        data = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/label/{match.group('label')}/values?{data}"
        with urllib.request.urlopen(url, timeout=self.timeout) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise QueryError(f"{body.get('errorType')}: {body.get('error')}")
        return sorted(body["data"])


def finite_points(result: list[dict[str, Any]]) -> int:
    """How many samples of a query's answer (range or instant) are numbers (not NaN, not infinite)."""
    count = 0
    for series in result:
        samples = series.get("values") or ([series["value"]] if "value" in series else [])
        count += sum(1 for _, value in samples if math.isfinite(float(value)))
    return count
