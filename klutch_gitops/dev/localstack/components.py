"""The Go components of the local stack: each a committed wrapper module under ``tools/bins/``
whose go.mod pins the upstream version, and the binaries and data built from it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from klutch_gitops.errors import KlutchError

TOOLS_DIR = Path(__file__).resolve().parents[3] / "tools" / "bins"


def _kube_version_vars(*packages: str) -> dict[str, str]:
    """Kubernetes' version variables; unstamped, ``/version`` says v0.0.0-master."""
    values = {
        "gitVersion": "{version}",
        "gitMajor": "{major}",
        "gitMinor": "{minor}",
        "gitTreeState": "clean",
    }
    return {f"{pkg}.{name}": value for pkg in packages for name, value in values.items()}


@dataclass(frozen=True)
class Component:
    """One wrapper module and the binaries built from it."""

    name: str
    module: str  # the upstream module whose required version keys the cache
    binaries: dict[str, str]  # binary name -> Go package
    # Go variable -> value stamped with -X; {version}, {major} and {minor} are filled in.
    version_vars: dict[str, str] = field(default_factory=dict)
    # Directory name in the cache -> directory of ``module`` whose *.yaml files are copied there,
    # so data that must match the binary (CRDs) is versioned with it and never committed.
    assets: dict[str, str] = field(default_factory=dict)
    # Directory name in the cache -> directories of ``module`` copied there whole, for a binary
    # that reads its data from disk at run time.
    trees: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cgo: bool = False
    tags: tuple[str, ...] = ()  # go build -tags

    @property
    def module_dir(self) -> Path:
        return TOOLS_DIR / self.name

    def version(self) -> str:
        """The version of ``module`` that the wrapper go.mod requires."""
        go_mod = self.module_dir / "go.mod"
        match = re.search(
            rf"^\s*(?:require\s+)?{re.escape(self.module)}\s+(\S+)",
            go_mod.read_text(),
            re.MULTILINE,
        )
        if not match:
            raise KlutchError(
                f"{go_mod}: no 'require {self.module} <version>' line",
                "restore the wrapper go.mod from Git",
            )
        return match.group(1)

    def ldflags(self) -> str:
        version = self.version()
        major, minor = version.lstrip("v").split(".")[:2]
        return " ".join(
            f"-X {var}={value.format(version=version, major=major, minor=minor)}"
            for var, value in self.version_vars.items()
        )


COMPONENTS = (
    Component("etcd", "go.etcd.io/etcd/server/v3", {"etcd": "go.etcd.io/etcd/server/v3"}),
    Component(
        "kubernetes",
        "k8s.io/kubernetes",
        {
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kubectl": "k8s.io/kubernetes/cmd/kubectl",
        },
        version_vars=_kube_version_vars(
            "k8s.io/component-base/version", "k8s.io/client-go/pkg/version"
        ),
    ),
    # Dex 2.41 compiles its SQLite storage only with cgo (gcc), even when it is not used.
    Component("dex", "github.com/dexidp/dex", {"dex": "github.com/dexidp/dex/cmd/dex"}, cgo=True),
    # Crossplane 2, the stack's default, and 1.20 (the newest line Klutch supports, 1.17-1.20),
    # chosen with KLUTCH_CROSSPLANE_VERSION. `crossplane --version` and the package manager's
    # version constraints read the stamped version.
    Component(
        "crossplane",
        "github.com/crossplane/crossplane/v2",
        {"crossplane": "github.com/crossplane/crossplane/v2/cmd/crossplane"},
        version_vars={
            "github.com/crossplane/crossplane-runtime/v2/pkg/version.version": "{version}"
        },
        assets={"crossplane-crds": "cluster/crds"},
    ),
    Component(
        "crossplane-v1",
        "github.com/crossplane/crossplane",
        {"crossplane-v1": "github.com/crossplane/crossplane/cmd/crossplane"},
        version_vars={"github.com/crossplane/crossplane/internal/version.version": "{version}"},
        assets={"crossplane-v1-crds": "cluster/crds"},
    ),
    # helm lints and renders charts/ in the tests. Besides its version, helm's release build stamps
    # the Kubernetes version `helm template` and `helm lint` assume without a cluster, from the
    # k8s.io/client-go it requires (v0.37 -> 1.37; tests/unit/dev/localstack/test_binaries.py keeps
    # them equal).
    Component(
        "helm",
        "helm.sh/helm/v3",
        {"helm": "helm.sh/helm/v3/cmd/helm"},
        version_vars={
            "helm.sh/helm/v3/internal/version.version": "{version}",
            **{
                f"helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}": value
                for pkg in ("chartutil", "lint/rules")
                for part, value in (("Major", "1"), ("Minor", "37"))
            },
        },
    ),
    # The GitOps peers the co-deployment tests run next to the reconciler, out of cluster against
    # the App Cluster: Flux's source- and kustomize-controller (module roots are the main packages)
    # and Argo CD, one binary that becomes application-controller or repo-server by
    # ARGOCD_BINARY_NAME. Their CRDs are copied from the same module versions. The module proxy
    # refuses some fluxcd/pkg zips: tools/bins/source-controller/go.mod pins one it serves.
    Component(
        "source-controller",
        "github.com/fluxcd/source-controller",
        {"source-controller": "github.com/fluxcd/source-controller"},
        assets={"source-controller-crds": "config/crd/bases"},
    ),
    Component(
        "kustomize-controller",
        "github.com/fluxcd/kustomize-controller",
        {"kustomize-controller": "github.com/fluxcd/kustomize-controller"},
        assets={"kustomize-controller-crds": "config/crd/bases"},
    ),
    Component(
        "argo-cd",
        "github.com/argoproj/argo-cd/v3",
        {"argocd": "github.com/argoproj/argo-cd/v3/cmd"},
        assets={"argocd-crds": "manifests/crds"},
    ),
    # Gitea, for the pull-request review tests (its API only). SQLite needs cgo and these tags.
    # Its templates and options (locales, licences, .gitignores) are files here: without the
    # generated bindata (not in the module), Gitea reads them from STATIC_ROOT_PATH.
    Component(
        "gitea",
        "code.gitea.io/gitea",
        {"gitea": "code.gitea.io/gitea"},
        version_vars={"main.Version": "{version}"},
        trees={"gitea-static": ("options", "templates")},
        cgo=True,
        tags=("sqlite", "sqlite_unlock_notify"),
    ),
)
