# The image of the reconciler and the bind API (charts/klutch-gitops runs both from it):
#   docker build -t klutch-gitops:0.1.0 .
# Python 3.11 as in CI; the Python packages are the pinned closure in requirements.lock.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# git and ssh for the repositories; tini reaps the git and ssh children and forwards signals.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/klutch-gitops
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock

# The catalog (CRDs the reconciler installs) is read from beside the packages, so the source tree
# is installed in place (editable) rather than copied into site-packages without it.
COPY pyproject.toml README.md ./
COPY klutch_gitops ./klutch_gitops
COPY reconciler ./reconciler
COPY bind_api ./bind_api
COPY catalog ./catalog
RUN pip install --no-deps -e . \
 && pip check \
 && python -m compileall -q klutch_gitops reconciler bind_api

# A numeric non-root user, so Kubernetes can verify runAsNonRoot.
RUN useradd --uid 10001 --user-group --home-dir /tmp --no-create-home --shell /usr/sbin/nologin klutch
USER 10001:10001
ENV HOME=/tmp

EXPOSE 8080 8443
ENTRYPOINT ["/usr/bin/tini", "--", "klutch-gitops"]
CMD ["--help"]
