#!/usr/bin/env bash
# The run command: builds what is missing and starts the whole module locally on embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Every system prerequisite first, in a second: a missing one stops here, named with its install command.
bash deploy/dev/prerequisites.sh --for up
bash deploy/dev/bootstrap.sh
exec .venv/bin/ai-inference dev up "$@"
