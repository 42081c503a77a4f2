# syntax=docker/dockerfile:1
# schedcache with its CLI and the extras that deploy/ and docker-compose.yml run: `kube`
# (schedcache sync) and `extender` (schedcache extender / scheduler). Slim and non-root
# (UID 65532, as deploy/'s pods run it); nothing is written outside /tmp at run time, so the
# root filesystem can be read-only.
#   docker build -t schedcache:0.1.0 .
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY schedcache ./schedcache
COPY lua ./lua
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[kube,extender]'

FROM python:3.11-slim-bookworm
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
