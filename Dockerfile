# syntax=docker/dockerfile:1.7
# The module's image: the `ai-inference` command (worker, watch, planner), installed from the wheel.
# Build and push: docs/admin-guide.md, "The image". The base is pinned; bump it with a reason.
ARG PYTHON_IMAGE=python:3.11.14-slim-trixie

# -- builder: the production wheel, exactly as `pip wheel .` builds it (tests/packaging proves it)
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY inference_api/ inference_api/
COPY planner/ planner/
COPY recipes/ recipes/
COPY workflows/ workflows/
COPY activities/ activities/
COPY worker/ worker/
RUN python -m pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /wheels .

# -- runtime: the wheel and its dependencies, nothing of the source tree, run as a non-root uid
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY deploy/image/install-wheel.sh /usr/local/lib/ai-inference/install-wheel.sh
# The dependencies exactly as requirements/module.lock pins them, every file checked against its
# hash (requirements/lock.sh regenerates it); then the wheel alone, by the install step the packaging
# test runs, with no dependency resolved (PIP_NO_DEPS: pip's --no-deps); then pip check: the lock
# holds everything the wheel requires.
RUN --mount=type=bind,source=requirements/module.lock,target=/tmp/module.lock \
    --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --disable-pip-version-check --no-input --quiet \
        --require-hashes -r /tmp/module.lock \
 && PIP_NO_DEPS=1 sh /usr/local/lib/ai-inference/install-wheel.sh /usr/local/bin/python /wheels/ai_inference-*.whl \
 && python -m pip check
# The chart's podSecurityContext.runAsUser/runAsGroup; no passwd entry is needed (HOME is /tmp, an
# emptyDir in the chart: the root filesystem is read-only there).
ENV HOME=/tmp
USER 64535:64535
ENTRYPOINT ["ai-inference"]
CMD ["--help"]
