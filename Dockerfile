# The image of the reconciler and the bind API (charts/klutch-gitops runs both from it). Two ways
# to build the same image:
#   with Docker:        docker build -t ghcr.io/anynines/klutch-gitops:0.1.0 .
#   without a daemon:   python -m tools.release.image build --out dist/image   (root, Debian/Ubuntu: an
#                       OCI image layout from mmdebstrap and chroot; push it with skopeo or crane)
# Both start from Debian bookworm slim, install the Debian packages listed in
# tools/release/image/packages.txt and run tools/release/image/install.sh: a venv in
# /opt/klutch-gitops with klutch-gitops[server] from wheels pinned by requirements.lock (Python
# 3.11, bookworm's), and the user 10001.
# tests/unit/tools/release/image/test_image_spec.py keeps this file and the daemonless build alike.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}

COPY tools/release/image/packages.txt tools/release/image/install.sh /tmp/klutch-image/
RUN apt-get update \
 && sed 's/#.*//' /tmp/klutch-image/packages.txt \
    | DEBIAN_FRONTEND=noninteractive xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/*

# The wheels: the project's, and one of every pin in requirements.lock; install.sh installs only
# from them (--no-index), as the daemonless build does.
COPY requirements.lock pyproject.toml README.md /tmp/klutch-image/source/
COPY klutch_gitops /tmp/klutch-image/source/klutch_gitops
COPY klutch_local /tmp/klutch-image/source/klutch_local
COPY reconciler /tmp/klutch-image/source/reconciler
COPY bind_api /tmp/klutch-image/source/bind_api
COPY catalog /tmp/klutch-image/source/catalog
RUN python3 -m venv /tmp/klutch-image/pip \
 && /tmp/klutch-image/pip/bin/pip wheel --no-deps --wheel-dir /tmp/klutch-image/wheels \
    /tmp/klutch-image/source \
 && /tmp/klutch-image/pip/bin/pip download --no-deps --only-binary=:all: \
    --dest /tmp/klutch-image/wheels --requirement /tmp/klutch-image/source/requirements.lock \
 && PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 sh /tmp/klutch-image/install.sh \
    /tmp/klutch-image/wheels /tmp/klutch-image/source/requirements.lock \
 && rm -rf /tmp/klutch-image /root/.cache

ENV PATH=/opt/klutch-gitops/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
LABEL org.opencontainers.image.title=klutch-gitops \
      org.opencontainers.image.description="GitOps front door for Klutch data services: the reconciler and the bind API" \
      org.opencontainers.image.licenses=Apache-2.0
USER 10001
EXPOSE 8080 8443
ENTRYPOINT ["/usr/bin/tini", "--", "klutch-gitops"]
CMD ["--help"]
