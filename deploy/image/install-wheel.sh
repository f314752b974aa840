#!/bin/sh
# Install the module's wheel and its runtime dependencies, nothing else: the one install step of the
# image (Dockerfile) and of the packaging test (tests/packaging/test_wheel.py), so what the test
# proves is what the image runs.
#
# usage: install-wheel.sh PYTHON WHEEL
#   PYTHON  the interpreter to install into (the image's /usr/local/bin/python, a test's venv python)
#   WHEEL   the ai_inference-*.whl that `pip wheel --no-deps .` built
set -eu
if [ "$#" -ne 2 ]; then
    echo "usage: $0 PYTHON WHEEL" >&2
    exit 2
fi
python=$1
wheel=$2
# No extras (the dev tools are never installed), no cache left behind, no version check on the network.
exec "$python" -m pip install --no-cache-dir --disable-pip-version-check --no-input --quiet "$wheel"
