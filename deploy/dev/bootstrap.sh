#!/usr/bin/env bash
# Creates .venv and installs the project with its test extras (idempotent, quiet when warm).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml dev/pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing ai-inference with its dev extras, and the local stack (dev/)"
  .venv/bin/pip install --quiet --upgrade pip
  # Two distributions: the production module, and the local stack (ai-inference-dev) that adds
  # `ai-inference dev` and `ai-inference cluster`; the production wheel carries none of dev/.
  .venv/bin/pip install --quiet -e '.[dev]' -e ./dev
  rm -f .venv/.installed-*
  touch "$stamp"
fi
