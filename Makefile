# The entry points people type. Each target installs what it needs itself.
#   make run    the local stack (etcd, app + control-plane clusters, Dex, Crossplane) and the
#               reconciler on the example repositories
#   make test   the type check, then every test tier that CI runs, against the real local stack,
#               on three pytest-xdist workers with a stack each (pyproject's addopts). To debug in
#               one process (pdb, breakpoints, -s output in order): .venv/bin/pytest -n 0 ...
#   make lint   ruff (lint and format) and the type check (mypy, configured in pyproject.toml)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SETUP  := $(VENV)/.setup-done
# Debian packages the local stack runs: OpenLDAP's slapd (the directory behind Dex), PostgreSQL
# (the local data-service backend) and Redis (Argo CD's cache, in the co-deployment tests).
DEBIAN_PACKAGES := slapd postgresql redis-server
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup debian-packages bins run down status typecheck test unit integration chaos security bench lint format dist chart image kind-test runtimes-test clean

$(SETUP): pyproject.toml packaging/klutch-bind/pyproject.toml requirements.lock
	@test -x /usr/sbin/slapd && test -x /usr/bin/redis-server \
		&& ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
		|| $(MAKE) --no-print-directory debian-packages
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements.lock -e '.[server,dev]' -e packaging/klutch-bind
	touch $@

setup: $(SETUP)

debian-packages:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$(DEBIAN_PACKAGES)

bins: setup            ## build kube-apiserver, kube-controller-manager, kubectl, etcd, Dex, Crossplane 2 and 1.20, Flux, Argo CD, helm, Gitea (cached)
	$(BIN)/klutch-gitops dev bins

run: bins              ## local stack + example repositories + the reconciler (Ctrl-C stops it)
	$(BIN)/klutch-gitops dev run

down: setup
	$(BIN)/klutch-gitops dev down

status: setup
	$(BIN)/klutch-gitops dev status

typecheck: setup       ## mypy --strict on klutch_gitops/, klutch_local/, reconciler/ and bind_api/ ([tool.mypy] in pyproject.toml)
	$(BIN)/mypy

test: bins typecheck   ## the type check, then unit + integration tests (CI runs exactly this)
	$(BIN)/pytest

unit: setup
	$(BIN)/pytest -m unit

integration: bins
	$(BIN)/pytest -m integration

chaos: bins            ## the fault tier alone: components killed and restarted mid-work (tests/chaos)
	$(BIN)/pytest -m chaos

security: bins         ## the adversarial tier alone: a hostile tenant against the real local stack (tests/security)
	$(BIN)/pytest -m security

bench: bins            ## reconciler benchmarks on a dedicated local stack (bench/README.md)
	$(BIN)/python -m bench.reconciler

dist: setup            ## wheels and sdists of klutch-gitops and klutch-bind, the krew archive and manifest, into dist/
	$(BIN)/python -m tools.release.dist --out dist

chart: bins            ## helm package charts/klutch-gitops into dist/ (push: charts/klutch-gitops/README.md)
	@mkdir -p dist
	"$$($(BIN)/python -c 'from klutch_gitops.dev.localstack import binaries; print(binaries.require("helm")["helm"])')" \
		package charts/klutch-gitops --destination dist/

image: setup           ## the image as an OCI image layout in dist/image, without a Docker daemon (root; Debian/Ubuntu)
	$(BIN)/python -m tools.release.image build --out dist/image --archive dist/klutch-gitops-image.tar

kind-test: bins        ## tools/kind/up.sh as a test: kind as Control Plane, image, chart, both Deployments Ready (needs Docker and kind; not in make test)
	$(BIN)/pytest -m kind tests/kind

runtimes-test: setup   ## the image in containerd (as kind loads it) and the Dockerfile under buildah (root; not in make test)
	$(BIN)/pytest -m runtimes tests/runtimes

lint: typecheck        ## ruff check, ruff format --check and the type check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache *.egg-info dist
