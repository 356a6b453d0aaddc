# syntax=docker/dockerfile:1
# The epp endpoint picker image: `docker build -t <registry>/epp:<tag> .`
# Stage 1 builds wheels for epp and every runtime dependency; stage 2 installs them into a clean
# python:3.11-slim with no compilers, no sources and no wheels left behind, running as non-root.

FROM python:3.11-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# README.md is optional (the glob keeps COPY from failing without it); pyproject.toml names it.
# setup.py generates epp/api/v1 (from protos/) and epp/extproc/envoy_api (Envoy's ext_proc API, from
# the build requirement xds-protos, which pip installs in the build's own environment, not in /wheels).
COPY pyproject.toml setup.py README.md* ./
COPY protos ./protos
COPY epp ./epp
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# The wheels are bind-mounted from the builder for this one step, so no layer keeps them.
# LightGBM (the SLO latency predictor's trainer) links the system OpenMP runtime, libgomp1.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/* \
    && pip install --no-index --find-links=/wheels epp \
    && groupadd --system --gid 10001 epp \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin epp
USER 10001:10001
WORKDIR /tmp
# ext_proc gRPC, gRPC health, Prometheus metrics.
EXPOSE 9002 9003 9090
ENTRYPOINT ["epp", "serve"]
# The same image is the decode pods' sidecar of disaggregated serving: command ["epp", "sidecar"]
# (manifests/overlays/pd; it listens on 8000 and serves its metrics on --metrics-port).
