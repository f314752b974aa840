"""The production wheel, built and installed non-editable into a fresh venv, plans and serves.

Nothing of the source tree is importable there: the probe runs from an empty folder with the venv's
own python, so the recipe tables it plans with are the wheel's package data.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from inference_api.plan import LaunchPlanRequest, OrderFacts
from planner import PlanningRequest, plan_launch
from tests.planner.helpers import DEFAULT_LLM, sim_snapshot

pytestmark = pytest.mark.packaging

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("installed_probe.py")
# The image's install step (Dockerfile): the wheel and its dependencies, nothing else.
INSTALL_WHEEL = REPO_ROOT / "deploy" / "image" / "install-wheel.sh"


def _run(*cmd: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out, REPO_ROOT)
    (built,) = out.glob("ai_inference-*.whl")
    return built


@pytest.fixture(scope="module")
def installed_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    _run("sh", INSTALL_WHEEL, python, wheel)
    return python


def test_wheel_carries_the_recipe_tables_and_none_of_the_local_stack(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tables = {n for n in names if n.startswith("recipes/") and n.endswith(".yaml")}
    assert tables == {
        "recipes/runtime-recipes.compiled.yaml",
        "recipes/recipe-taxonomy.yaml",
        "recipes/platform-hardware-families.yaml",
        # The model families' serving features (tool-call and reasoning parsers), read by planner/recipes.py.
        "recipes/model-families.yaml",
    }
    top_level = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == {"inference_api", "planner", "recipes", "workflows", "activities", "worker"}
    assert not [n for n in names if "devstack" in n or n.startswith("tests/") or "standins" in n]


def test_installed_package_plans_and_serves_the_planner_as_the_source_tree_does(
    installed_python: Path, tmp_path: Path
) -> None:
    snapshot = sim_snapshot()
    request = LaunchPlanRequest(
        facts=OrderFacts(modelName="Qwen/Qwen2.5-32B-Instruct-AWQ"), acceleratorPolicy=DEFAULT_LLM, holder="ns/a"
    )
    (tmp_path / "inventory.json").write_text(snapshot.model_dump_json())
    (tmp_path / "request.json").write_text(request.model_dump_json())
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()

    output = _run(installed_python, PROBE, tmp_path / "inventory.json", tmp_path / "request.json", cwd=workdir)
    probe = json.loads(output.strip().splitlines()[-1])  # the service logs before the probe's answer

    # The code and tables came from the venv, not the source tree.
    assert Path(probe["planner_file"]).is_relative_to(installed_python.parent.parent)
    assert not Path(probe["planner_file"]).is_relative_to(REPO_ROOT)
    # The tables are the wheel's top-level recipes/, read through importlib.resources.
    assert Path(probe["recipes_dir"]).name == "recipes"
    assert Path(probe["recipes_dir"]).is_relative_to(installed_python.parent.parent)
    assert not Path(probe["recipes_dir"]).is_relative_to(REPO_ROOT)
    expected = plan_launch(PlanningRequest(**request.model_dump(), inventory=snapshot)).model_dump(mode="json")
    assert expected["plan"] is not None
    assert probe["planned"] == expected
    assert probe["served"] == expected


def test_installed_cli_has_no_local_stack_commands(installed_python: Path, tmp_path: Path) -> None:
    cli = installed_python.parent / "ai-inference"
    help_text = _run(cli, "--help", cwd=tmp_path)
    for command in ("worker", "watch", "planner", "replan", "crds"):
        assert command in help_text
    assert " dev " not in help_text
    assert " cluster " not in help_text
