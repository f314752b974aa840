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
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    sh /usr/local/lib/ai-inference/install-wheel.sh /usr/local/bin/python /wheels/ai_inference-*.whl
# The chart's podSecurityContext.runAsUser/runAsGroup; no passwd entry is needed (HOME is /tmp, an
# emptyDir in the chart: the root filesystem is read-only there).
ENV HOME=/tmp
USER 64535:64535
ENTRYPOINT ["ai-inference"]
CMD ["--help"]
