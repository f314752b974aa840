"""Stopping a server the local stack started in a process group of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


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
