#!/bin/sh
# Installs klutch-gitops into the image's root filesystem; run as root inside it by the Dockerfile
# and by `python -m tools.release.image build` (chroot), so both paths make the same image.
#   install.sh WHEELS LOCK
# WHEELS holds the klutch-gitops wheel and a wheel of every pin in LOCK (requirements.lock): the
# install runs with --no-index, so nothing but those wheels lands in the image.
set -eu
wheels=$1
lock=$2
venv=/opt/klutch-gitops

# The venv gets no pip or setuptools (23 MB the services never use): pip runs from the wheel that
# Debian's python3-venv ships (pip's docs: a pip wheel runs as `python pip.whl/pip`).
python3 -m venv --without-pip "$venv"
pip_wheel=$(ls /usr/share/python-wheels/pip-*.whl)
"$venv/bin/python" "$pip_wheel/pip" install --no-index --find-links "$wheels" \
  --constraint "$lock" 'klutch-gitops[server]'
"$venv/bin/python" "$pip_wheel/pip" check

# A numeric non-root user, so Kubernetes can verify runAsNonRoot; written directly (minbase has no
# useradd) and the same in both paths.
grep -q '^klutch:' /etc/group || echo 'klutch:x:10001:' >>/etc/group
grep -q '^klutch:' /etc/passwd \
  || echo 'klutch:x:10001:10001:klutch-gitops:/tmp:/usr/sbin/nologin' >>/etc/passwd
