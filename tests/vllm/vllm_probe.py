"""Asks the installed vLLM itself. Runs INSIDE the cached vLLM environment, with its python:

    ~/.cache/ai-inference/vllm-<version>/venv/bin/python tests/vllm/vllm_probe.py REQUEST.json RESULT.json

REQUEST: ``{"argvs": [["vllm", "serve", MODEL, FLAG, ...], ...], "toolParsers": [NAME, ...],
"reasoningParsers": [NAME, ...]}`` — runtime container commands, and parser names the recipes compile.
RESULT:  ``{"version": ..., "parserSeconds": ..., "refusals": {"<index>": "<argparse error>"},
"metrics": {"vllm:<name>": "gauge|counter|histogram|unknown"}, "metricFiles": N,
"parserProblems": {"tool:<name>" | "reasoning:<name>": "<why>"}, "registered": {"tool": [...], "reasoning": [...]}}``.

Parser names: each must be registered in the release's ``ToolParserManager`` / ``ReasoningParserManager``
and its class must load (``get_tool_parser`` / ``get_reasoning_parser`` import a lazily registered one).

Flags: vLLM's real ``vllm serve`` parser, built as ``vllm serve`` builds it (``make_arg_parser``),
with the platform set to CPU first: without a GPU, vLLM cannot infer a device and the parser's
defaults fail to build otherwise. Each argv without ``vllm serve`` is parsed; argparse's refusal
(an unknown flag, a value outside a flag's choices, a bad type: exit status 2) is recorded, and so
is a refusal of ``validate_parsed_serve_args``, the checks ``vllm serve`` runs before loading.

Metric names: read from the installed package's source, not imported — instantiating the stat
loggers needs a full engine config (a model). Every call in ``vllm/`` that passes a ``name``
starting with ``vllm:`` to a Gauge/Counter/Histogram (``self._gauge_cls(name="vllm:...")``,
``prometheus_client.Counter(...)``) is a metric the release defines; the callee's name gives its type.

The result goes to a file, not stdout: vLLM logs to stdout.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

KINDS = ("gauge", "counter", "histogram")


def build_parser() -> Any:
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def refusal(parser: Any, argv: list[str]) -> str | None:
    """Why vLLM refuses this command line, or None when it accepts it."""
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args

    if argv[:2] != ["vllm", "serve"]:
        return f"not a `vllm serve` command line: {argv[:2]}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv[2:])
    except SystemExit as exit_:
        lines = [line for line in err.getvalue().splitlines() if "error:" in line]
        return lines[-1].strip() if lines else f"argparse exited with status {exit_.code}"
    try:
        validate_parsed_serve_args(args)
    except Exception as error:  # vLLM raises TypeError/ValueError for these
        return f"{type(error).__name__}: {error}"
    return None


def parser_problems(tool_names: list[str], reasoning_names: list[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Why a parser name the recipes compile is not one the release can load; the registered names."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    problems: dict[str, str] = {}
    for kind, manager, names, get in (
        ("tool", ToolParserManager, tool_names, ToolParserManager.get_tool_parser),
        ("reasoning", ReasoningParserManager, reasoning_names, ReasoningParserManager.get_reasoning_parser),
    ):
        registered = set(manager.list_registered())
        for name in names:
            if name not in registered:
                problems[f"{kind}:{name}"] = f"not registered in {manager.__name__}"
                continue
            try:
                get(name)
            except Exception as error:  # an import error of the parser's module
                problems[f"{kind}:{name}"] = f"{type(error).__name__}: {error}"
    registered_names = {
        "tool": sorted(ToolParserManager.list_registered()),
        "reasoning": sorted(ReasoningParserManager.list_registered()),
    }
    return problems, registered_names


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _metric_name(node: ast.Call) -> str | None:
    for keyword in node.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value if keyword.value.value.startswith("vllm:") else None
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        value = node.args[0].value
        kind = _callee(node).lower()
        if value.startswith("vllm:") and any(k in kind for k in KINDS):
            return value
    return None


def defined_metrics(package: Path) -> tuple[dict[str, str], int]:
    """vllm:<name> -> its type, from every call that defines one in the package's source."""
    metrics: dict[str, str] = {}
    files = 0
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if '"vllm:' not in text and "'vllm:" not in text:
            continue
        files += 1
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            name = _metric_name(node)
            if name is None:
                continue
            callee = _callee(node).lower()
            kind = next((k for k in KINDS if k in callee), "unknown")
            if metrics.get(name, "unknown") == "unknown":
                metrics[name] = kind
    return metrics, files


def main() -> None:
    request_path, result_path = Path(sys.argv[1]), Path(sys.argv[2])
    request = json.loads(request_path.read_text())
    import vllm

    started = time.monotonic()
    parser = build_parser()
    built = time.monotonic() - started
    refusals = {}
    for index, argv in enumerate(request["argvs"]):
        reason = refusal(parser, argv)
        if reason is not None:
            refusals[str(index)] = reason
    metrics, files = defined_metrics(Path(vllm.__file__).parent)
    problems, registered = parser_problems(request.get("toolParsers", []), request.get("reasoningParsers", []))
    result = {
        "parserProblems": problems,
        "registered": registered,
        "version": vllm.__version__,
        "parserSeconds": round(built, 1),
        "refusals": refusals,
        "metrics": metrics,
        "metricFiles": files,
    }
    result_path.write_text(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
