#!/usr/bin/env bash
# Creates .venv and installs the project with its test extras (idempotent, quiet when warm).
# The dependencies come from requirements/dev.lock, every file checked against its hash; the two
# projects themselves are installed editable on top, without dependencies (requirements/lock.sh
# regenerates the locks).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# Installed again whenever a pyproject or a lock changes.
stamp=.venv/.installed-$(cat pyproject.toml dev/pyproject.toml requirements/dev.in requirements/dev.lock requirements/module.lock | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing requirements/dev.lock (hash-checked), ai-inference and the local stack (dev/)"
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet --require-hashes -r requirements/dev.lock
  # Two distributions: the production module, and the local stack (ai-inference-dev) that adds
  # `ai-inference dev` and `ai-inference cluster`; the production wheel carries none of dev/.
  .venv/bin/pip install --quiet --no-deps -e . -e ./dev
  # The lock is complete: every requirement of everything installed is met.
  if ! broken=$(.venv/bin/pip check); then
    echo "bootstrap: requirements/dev.lock misses what an installed package requires:" >&2
    echo "$broken" >&2
    exit 1
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
fi
