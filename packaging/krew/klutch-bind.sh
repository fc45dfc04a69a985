#!/bin/sh
# kubectl klutch-bind, as krew installs it (packaging/krew/klutch-bind.yaml; tools/release/dist.py
# puts this file, the klutch-bind and klutch-gitops wheels and requirements.lock into the archive).
# klutch-bind is Python: the first run makes a virtual environment for this version with the
# wheels beside this script, their dependencies pinned by constraints.txt; later runs start it.
# Needs python3 >= 3.11 (or $KLUTCH_BIND_PYTHON) and, on the first run, access to PyPI.
set -eu
version='@VERSION@'
python=${KLUTCH_BIND_PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "kubectl-klutch_bind: $python not found; install Python 3.11 or newer, or set KLUTCH_BIND_PYTHON" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "kubectl-klutch_bind: $("$python" -V 2>&1) is too old; klutch-bind needs Python 3.11 or newer (set KLUTCH_BIND_PYTHON)" >&2
  exit 1
fi
# krew links ~/.krew/bin/kubectl-klutch_bind to this file; the wheels are beside the target.
here=$(dirname "$("$python" -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' "$0")")
venv="${XDG_DATA_HOME:-$HOME/.local/share}/klutch-bind/$version"
# A venv cannot be moved (its scripts name their interpreter by path): it is made in place, and
# .complete marks one whose install finished; anything else there is a failed first run's.
if [ ! -f "$venv/.complete" ]; then
  echo "kubectl-klutch_bind: first run of $version, installing into $venv" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      -c "$here/constraints.txt" "$here"/wheels/*.whl >&2; then
    rm -rf "$venv"
    echo "kubectl-klutch_bind: installing failed; see pip's message above" >&2
    exit 1
  fi
  touch "$venv/.complete"
fi
exec "$venv/bin/kubectl-klutch_bind" "$@"
