#!/usr/bin/env bash
# Regenerates the hash-pinned locks of the module's Python dependencies (uv from PyPI: pip install uv):
#   requirements/dev.lock     the test extras and the local stack (dev/): deploy/dev/bootstrap.sh, CI
#   requirements/module.lock  the production wheel's runtime dependencies: the image (Dockerfile)
# Existing pins are kept; pass uv's options to move them: --upgrade (all), --upgrade-package NAME.
# module.lock is constrained by dev.lock, so the image runs the versions the tests ran.
# tests/packaging/test_locks.py fails when pyproject.toml and the locks disagree.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
common=(--universal --python-version 3.11 --generate-hashes --quiet
  --custom-compile-command "bash requirements/lock.sh")
"$UV" pip compile "${common[@]}" "$@" requirements/dev.in \
  --no-emit-package ai-inference --no-emit-package ai-inference-dev -o requirements/dev.lock
"$UV" pip compile "${common[@]}" "$@" pyproject.toml -c requirements/dev.lock -o requirements/module.lock
