"""Running a stand-in as a child process: one way to start it with the repo importable and to stop it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with the repository on PYTHONPATH, its output appended to ``log``."""
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), str(REPO_ROOT / "dev"), os.environ.get("PYTHONPATH")]))
    with log.open("ab") as log_file:
        return subprocess.Popen(
            cmd, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": python_path}
        )


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """Terminate, then kill what does not go within five seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
