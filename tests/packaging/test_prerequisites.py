"""deploy/dev/prerequisites.sh: the first step of up.sh and test.sh names every missing prerequisite
with the command that installs it, before anything is built.

Each case runs the script with a PATH that is a folder of links to the real tools, less the one a case
takes away, and with nginx's fallback folders (/usr/sbin on Debian) pointed at an empty folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEV = REPO_ROOT / "deploy" / "dev"
SCRIPT = DEV / "prerequisites.sh"
# What the script runs besides the prerequisites themselves.
SHELL_TOOLS = ("bash", "sed", "sort", "head", "tail", "dirname")


def _real(tool: str) -> str:
    found = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/usr/local/sbin:/usr/local/go/bin")
    assert found, f"{tool}: not on this machine, whose prerequisite check passed"
    return found


@pytest.fixture
def toolbox(tmp_path: Path) -> Path:
    """A PATH folder with every prerequisite of --for test linked in, nginx and chromium included."""
    box = tmp_path / "bin"
    box.mkdir()
    for tool in (*SHELL_TOOLS, "go", "openssl", "git", "tar", "nginx", "chromium"):
        (box / tool).symlink_to(_real(tool))
    # The interpreter itself (not a pyenv shim, not the venv's link): it finds its stdlib from there.
    (box / "python3").symlink_to(os.path.realpath(sys.executable))
    return box


def run(box: Path, target: str, **env: str) -> subprocess.CompletedProcess[str]:
    empty = box.parent / "no-sbin"
    empty.mkdir(exist_ok=True)
    environment = {"PATH": str(box), "HOME": os.environ.get("HOME", "/root"), "AI_INFERENCE_SBIN_DIRS": str(empty)}
    return subprocess.run(
        [str(box / "bash"), str(SCRIPT), "--for", target],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("target", ["up", "test"])
def test_all_present_passes(toolbox: Path, target: str) -> None:
    done = run(toolbox, target)
    assert done.returncode == 0, done.stderr
    assert f"prerequisites ({target}): all present" in done.stdout
    assert "nginx" in done.stdout
    assert "openssl" in done.stdout
    assert ("postgresql" in done.stdout) == (target == "test")


@pytest.mark.parametrize("target", ["up", "test"])
def test_missing_nginx_is_named_with_its_install_command(toolbox: Path, target: str) -> None:
    (toolbox / "nginx").unlink()
    done = run(toolbox, target)
    assert done.returncode == 1
    assert f"prerequisites ({target}): 1 missing; nothing was built" in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert line.startswith("  - nginx (")
    assert "apt-get install nginx-light" in line
    assert "all present" not in done.stdout


def test_missing_chromium_is_named_for_the_tests_only(toolbox: Path) -> None:
    (toolbox / "chromium").unlink()
    assert run(toolbox, "up").returncode == 0  # the local stack needs no browser
    done = run(toolbox, "test")
    assert done.returncode == 1
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert line.startswith("  - Chromium (")
    assert line.endswith("apt-get install chromium")
    # A browser named by AI_INFERENCE_CHROMIUM (the browser test's own setting) is taken.
    assert run(toolbox, "test", AI_INFERENCE_CHROMIUM=_real("chromium")).returncode == 0


def test_an_nginx_without_the_modules_is_refused(toolbox: Path) -> None:
    (toolbox / "nginx").unlink()
    # A stand-in that reports a build without http_ssl and grpc (a new file, never the real binary).
    (toolbox / "nginx").write_text(
        "#!/bin/sh\necho 'configure arguments: --with-http_v2_module --without-http_grpc_module' >&2\n"
    )
    (toolbox / "nginx").chmod(0o755)
    done = run(toolbox, "up")
    assert done.returncode == 1
    assert "lacks http_ssl grpc" in done.stderr
    assert "apt-get install nginx-light" in done.stderr


def test_every_missing_one_is_named_at_once(toolbox: Path, tmp_path: Path) -> None:
    for tool in ("nginx", "openssl", "git"):
        (toolbox / tool).unlink()
    done = run(
        toolbox,
        "test",
        AI_INFERENCE_POSTGRES_ROOT=str(tmp_path / "no-postgresql"),
        PYTHON=str(tmp_path / "no-python"),
    )
    assert done.returncode == 1
    assert "prerequisites (test): 5 missing" in done.stderr
    for install in (
        "apt-get install nginx-light",
        "apt-get install openssl",
        "apt-get install git",
        "apt-get install postgresql",
        "apt-get install python3 python3-venv",
    ):
        assert install in done.stderr, install


def test_a_go_off_path_is_named_with_the_path_to_add(toolbox: Path, tmp_path: Path) -> None:
    (toolbox / "go").unlink()
    elsewhere = tmp_path / "go" / "bin"
    elsewhere.mkdir(parents=True)
    (elsewhere / "go").symlink_to(_real("go"))
    done = run(toolbox, "up", AI_INFERENCE_GO_FALLBACK_DIR=str(elsewhere))
    assert done.returncode == 1
    assert f'export PATH="$PATH:{elsewhere}"' in done.stderr


@pytest.mark.parametrize(("script", "target"), [("up.sh", "up"), ("test.sh", "test")])
def test_up_and_test_check_the_prerequisites_before_anything_else(script: str, target: str) -> None:
    text = (DEV / script).read_text()
    check = text.index(f"bash deploy/dev/prerequisites.sh --for {target}")
    assert check < text.index("bash deploy/dev/bootstrap.sh")
