# syntax=docker/dockerfile:1
# schedcache with its CLI and the extras that deploy/ and docker-compose.yml run: `kube`
# (schedcache sync) and `extender` (schedcache extender / scheduler). Slim and non-root
# (UID 65532, as deploy/'s pods run it); nothing is written outside /tmp at run time, so the
# root filesystem can be read-only. Reproducible: the base image is pinned by digest as well
# as tag, and every Python package by version (constraints.txt, from .ci/lock-image).
# Build and publish: docs/kubernetes.md, "The image".
#   docker build -t schedcache:0.1.0 .
# The base, by tag (readable) and digest (what is pulled): the multi-platform index of
# python:3.11-slim-bookworm as Docker Hub listed it in October 2026 (Python 3.11.16). To move
# to a newer build of it, take the index digest that this prints:
#   docker buildx imagetools inspect python:3.11-slim-bookworm
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY schedcache ./schedcache
COPY lua ./lua
RUN pip wheel --no-cache-dir --wheel-dir /wheels --constraint constraints.txt '.[kube,extender]'

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Only the wheels built above (--no-index): what they are was decided by the build stage.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels 'schedcache[kube,extender]'
USER 65532:65532
ENTRYPOINT ["schedcache"]
CMD ["--help"]
