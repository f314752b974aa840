"""The module against the vLLM release its recipes ship, checked by that vLLM itself.

The release is installed once into the cache (``devstack.vllm_env``, fixture ``vllm_env``; marker
``vllm``). ``tests/vllm/vllm_probe.py`` runs inside it with its own python, once per session:

* every command line the planner and the builders can produce (``tests/vllm/argvs.py``: every
  recipe of every hardware family x every placement kind x every API contract, read from the built
  StatefulSets) goes through vLLM's real ``vllm serve`` parser — none may be refused — and a few
  known-bad ones must be refused, so the check is shown to bite;
* every vLLM metric name the dashboards, alerts, adapter rules, HPA and stand-in runtime use
  (``tests/vllm/metric_names.py``) must be defined in the installed release's source.

Run with ``-s`` to see the figures (release, command lines and flags checked, metric names checked).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.vllm_env import VllmEnv
from tests.vllm.argvs import PLACEMENTS, Case, compiled_parsers, generated_argvs, shipped_runtime_versions
from tests.vllm.metric_names import used_metric_names

PROBE = Path(__file__).with_name("vllm_probe.py")
PROBE_TIMEOUT = 540  # seconds; importing vLLM and building its parser is ~10 s on an idle machine

# Command lines vLLM 0.33 must refuse, each for another reason: a removed flag (the builder's old
# pooling branch passed it), a value outside a flag's choices, a flag that never existed.
KNOWN_BAD: dict[str, tuple[str, ...]] = {
    "--task (removed)": ("vllm", "serve", "/models/m", "--task", "embed"),
    "--dtype outside its choices": ("vllm", "serve", "/models/m", "--dtype", "float17"),
    "an unknown flag": ("vllm", "serve", "/models/m", "--no-such-flag"),
    # validate_parsed_serve_args: auto tool choice without a parser.
    "--enable-auto-tool-choice without a parser": ("vllm", "serve", "/models/m", "--enable-auto-tool-choice"),
}
# Names no release registers: the registry check must report them.
UNKNOWN_TOOL_PARSER = "no_such_tool_parser"
UNKNOWN_REASONING_PARSER = "no_such_reasoning_parser"
# A name that 0.33 no longer defines: the metric check must report it.
GONE_METRIC = "vllm:gpu_cache_usage_perc"


@dataclass(frozen=True)
class Verdict:
    version: str
    argvs: dict[tuple[str, ...], Case]
    refused: dict[tuple[str, ...], str]
    metrics: dict[str, str]
    metric_files: int
    parser_seconds: float
    parser_problems: dict[str, str]
    registered: dict[str, list[str]]


@pytest.fixture(scope="module")
def verdict(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Verdict:
    argvs = generated_argvs()
    asked = [*argvs, *KNOWN_BAD.values()]
    directory = tmp_path_factory.mktemp("vllm-probe")
    request, result = directory / "request.json", directory / "result.json"
    tools, reasoning = compiled_parsers()
    request.write_text(
        json.dumps(
            {
                "argvs": [list(argv) for argv in asked],
                "toolParsers": sorted(tools | {UNKNOWN_TOOL_PARSER}),
                "reasoningParsers": sorted(reasoning | {UNKNOWN_REASONING_PARSER}),
            }
        )
    )
    done = subprocess.run(
        [str(vllm_env.python), str(PROBE), str(request), str(result)],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT,
        check=False,
    )
    failure = f"the vLLM probe failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, failure
    assert result.exists(), failure
    answer = json.loads(result.read_text())
    refused = {asked[int(index)]: reason for index, reason in answer["refusals"].items()}
    return Verdict(
        answer["version"],
        argvs,
        refused,
        answer["metrics"],
        answer["metricFiles"],
        answer["parserSeconds"],
        answer["parserProblems"],
        answer["registered"],
    )


def exposed_series(metrics: dict[str, str]) -> set[str]:
    """The series names a query can use for the release's metrics (a counter's ``_total``, ...)."""
    suffixes = {"gauge": ("",), "counter": ("", "_total"), "histogram": ("", "_bucket", "_sum", "_count")}
    return {name + suffix for name, kind in metrics.items() for suffix in suffixes.get(kind, ("",))}


def test_the_recipes_target_the_installed_release(vllm_env: VllmEnv, verdict: Verdict) -> None:
    assert verdict.version == vllm_env.version
    assert shipped_runtime_versions() == {vllm_env.version}


def test_every_command_line_the_module_can_produce_is_accepted_by_vllm(verdict: Verdict) -> None:
    generated = verdict.argvs
    flags = {arg.split("=", 1)[0] for argv in generated for arg in argv if arg.startswith("--")}
    contracts = {case.contract for case in generated.values()}
    recipes = {(case.family, case.model) for case in generated.values()}
    refused = {argv: reason for argv, reason in verdict.refused.items() if argv in generated}
    print(
        f"\nvLLM {verdict.version}: {len(generated)} distinct command lines ({len(recipes)} family x model "
        f"recipes x {len(PLACEMENTS)} placement kinds x {len(contracts)} contracts) with {len(flags)} distinct "
        f"flags, checked by its own parser (built in {verdict.parser_seconds}s): {', '.join(sorted(flags))}"
    )
    assert len(contracts) == 3
    # The matrix reaches every branch that adds a flag: the pooling runner, tensor parallelism, a share.
    assert {"--runner", "--convert", "--tensor-parallel-size", "--gpu-memory-utilization", "--quantization"} <= flags
    assert not refused, "vLLM refuses command lines the module produces:\n" + "\n".join(
        f"  {generated[argv]}: {reason}\n    {' '.join(argv)}" for argv, reason in list(refused.items())[:10]
    )


def test_every_parser_the_recipes_compile_is_registered_and_loads_in_the_release(verdict: Verdict) -> None:
    tools, reasoning = compiled_parsers()
    problems = {
        name: why
        for name, why in verdict.parser_problems.items()
        if name not in (f"tool:{UNKNOWN_TOOL_PARSER}", f"reasoning:{UNKNOWN_REASONING_PARSER}")
    }
    print(
        f"\nvLLM {verdict.version}: tool-call parsers {sorted(tools)} and reasoning parsers {sorted(reasoning)} "
        f"checked against {len(verdict.registered['tool'])} + {len(verdict.registered['reasoning'])} registered"
    )
    assert {"hermes", "llama3_json", "mistral", "openai"} <= tools
    assert {"deepseek_r1", "qwen3", "openai_gptoss"} <= reasoning
    assert not problems, f"vLLM {verdict.version} cannot load parsers the recipes name: {problems}"
    # The check bites: a name the release does not register is reported.
    assert f"tool:{UNKNOWN_TOOL_PARSER}" in verdict.parser_problems
    assert f"reasoning:{UNKNOWN_REASONING_PARSER}" in verdict.parser_problems


def test_the_matrix_compiles_every_parser_with_and_without_the_class_turning_it_off(verdict: Verdict) -> None:
    tools, reasoning = compiled_parsers()
    argvs = [" ".join(argv) for argv in verdict.argvs]
    for name in tools:
        assert any(f"--enable-auto-tool-choice --tool-call-parser {name}" in a for a in argvs), name
    for name in reasoning:
        assert any(f"--reasoning-parser {name}" in a for a in argvs), name
    # A class turning both off: a family's example compiles with neither flag.
    assert any("Qwen3-8B" in a and "--tool-call-parser" not in a and "--reasoning-parser" not in a for a in argvs)


@pytest.mark.parametrize("why", list(KNOWN_BAD))
def test_vllm_refuses_a_known_bad_command_line(verdict: Verdict, why: str) -> None:
    argv = KNOWN_BAD[why]
    assert argv in verdict.refused, f"vLLM {verdict.version} accepted {' '.join(argv)} ({why})"
    assert "error" in verdict.refused[argv].lower()


def test_every_vllm_metric_name_the_module_uses_exists_in_the_release(verdict: Verdict) -> None:
    exposed = exposed_series(verdict.metrics)
    used = used_metric_names()
    for required in ("dashboards/performance.json", "dashboards/queries.json", "standins/runtime.py", "HPA"):
        assert any(required in source and names for source, names in used.items()), f"no names read from {required}"
    missing = sorted(f"{source}: {name}" for source, names in used.items() for name in names if name not in exposed)
    checked = set().union(*used.values())
    print(
        f"\nvLLM {verdict.version}: {len(checked)} distinct vLLM metric names checked "
        f"({', '.join(f'{source} {len(names)}' for source, names in used.items())}) against "
        f"{len(verdict.metrics)} metrics defined in {verdict.metric_files} files of its source"
    )
    assert not missing, f"vLLM {verdict.version} defines no such metric:\n  " + "\n  ".join(missing)


def test_the_metric_check_reports_a_name_the_release_dropped(verdict: Verdict) -> None:
    exposed = exposed_series(verdict.metrics)
    assert GONE_METRIC not in exposed
    assert "vllm:kv_cache_usage_perc" in exposed
    assert {"vllm:prompt_tokens_total", "vllm:e2e_request_latency_seconds_bucket"} <= exposed
