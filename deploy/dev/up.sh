#!/usr/bin/env bash
# The run command: builds what is missing and starts the whole module locally on embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/dev/bootstrap.sh
exec .venv/bin/ai-inference dev up "$@"
