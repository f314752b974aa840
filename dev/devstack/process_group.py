"""Starting, waiting for and stopping a server the local stack runs in a process group of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def stop_group(process: subprocess.Popen[bytes] | None, first: int = signal.SIGTERM, timeout: float = 10) -> None:
    """``first`` to the process's group, SIGKILL after ``timeout`` seconds; nothing when it has exited."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, first)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def start_group(
    argv: Sequence[str],
    log_file: Path,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """``argv`` in a process group of its own, stdout and stderr appended to ``log_file``."""
    cwd.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
            env=dict(env) if env is not None else None, start_new_session=True, preexec_fn=preexec_fn,
        )  # fmt: skip


def log_tail(log_file: Path, chars: int = 3000) -> str:
    return log_file.read_text(errors="replace")[-chars:] if log_file.is_file() else ""


def until_answers(
    process: subprocess.Popen[bytes] | None,
    answers: Callable[[], bool],
    name: str,
    what: str,
    log_file: Path,
    error: type[Exception],
    timeout: float = 60,
) -> None:
    """Until ``answers()`` is true; ``error`` (with the log's tail) when the process exits first or
    ``timeout`` passes. ``answers`` may raise OSError (nothing listens yet): asked again."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise error(f"{name} exited with {process.returncode}: {log_tail(log_file)}")
        said: object = "no answer"
        try:
            if answers():
                return
        except OSError as err:  # urllib's URLError is one
            said = err
        if time.monotonic() > deadline:
            raise error(f"{what} does not answer after {timeout:.0f}s ({said}): {log_tail(log_file)}")
        time.sleep(0.3)
