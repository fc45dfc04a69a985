from __future__ import annotations

import json
import re
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klutch_gitops.dev.cli import dev
from klutch_gitops.dev.localstack import binaries
from klutch_gitops.errors import KlutchError

ALL = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "dex",
    "crossplane",
    "crossplane-v1",
    "source-controller",
    "kustomize-controller",
    "argocd",
    "helm",
    "gitea",
)
ASSETS = (
    "crossplane-crds",
    "crossplane-v1-crds",
    "source-controller-crds",
    "kustomize-controller-crds",
    "argocd-crds",
    "gitea-static",
)


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty cache and no override variables."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KLUTCH_BIN_DIR", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    return tmp_path


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_versions_come_from_the_committed_wrapper_modules() -> None:
    versions = {c.name: c.version() for c in binaries.COMPONENTS}
    assert versions["kubernetes"] == "v1.34.3"
    assert versions["etcd"].startswith("v3.6.")
    assert versions["dex"] == "v0.0.0-20240807174518-43956db7fd75"  # v2.41.1
    assert versions["crossplane"].startswith("v2.")  # the stack's default
    assert versions["crossplane-v1"].startswith("v1.20.")  # Klutch supports Crossplane 1.17-1.20
    # Flux 2.x's controllers: v1.9 is the newest line Go 1.26 builds (v1.10 needs Go 1.27).
    assert versions["source-controller"].startswith("v1.9.")
    assert versions["kustomize-controller"].startswith("v1.9.")
    assert versions["argo-cd"].startswith("v3.")


def test_kubernetes_version_is_stamped_into_both_version_packages() -> None:
    kubernetes = next(c for c in binaries.COMPONENTS if c.name == "kubernetes")
    flags = kubernetes.ldflags()
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v1.34.3" in flags
        assert f"-X {pkg}.gitMinor=34" in flags


def test_crossplane_version_is_stamped() -> None:
    """Where each major line keeps it: 2.x in crossplane-runtime, 1.x in its own module."""
    stamped = {
        "crossplane": "github.com/crossplane/crossplane-runtime/v2/pkg/version.version",
        "crossplane-v1": "github.com/crossplane/crossplane/internal/version.version",
    }
    for name, variable in stamped.items():
        component = next(c for c in binaries.COMPONENTS if c.name == name)
        assert component.ldflags() == f"-X {variable}={component.version()}"


def test_helm_is_stamped_with_its_version_and_its_client_go_kubernetes_version() -> None:
    """As helm's release build does; otherwise `helm template` assumes Kubernetes 1.20."""
    helm = next(c for c in binaries.COMPONENTS if c.name == "helm")
    assert helm.version().startswith("v3.")
    client_go = re.search(
        r"^\s*k8s\.io/client-go v0\.(\d+)\.", (helm.module_dir / "go.mod").read_text(), re.M
    )
    assert client_go, "tools/bins/helm/go.mod requires no k8s.io/client-go"
    flags = helm.ldflags()
    assert f"-X helm.sh/helm/v3/internal/version.version={helm.version()}" in flags
    for pkg in ("chartutil", "lint/rules"):
        assert f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersionMajor=1" in flags
        assert f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersionMinor={client_go[1]}" in flags


def test_gitea_builds_with_sqlite_and_carries_its_templates_and_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gitea = next(c for c in binaries.COMPONENTS if c.name == "gitea")
    assert gitea.version().startswith("v1.")
    assert gitea.cgo
    assert gitea.trees == {"gitea-static": ("options", "templates")}
    argv: list[str] = []
    monkeypatch.setattr(binaries, "_run_go", lambda component, name, command: argv.extend(command))
    binaries._go_build(gitea, "gitea", tmp_path / "gitea")
    assert argv[argv.index("-tags") + 1] == "sqlite,sqlite_unlock_notify"
    assert f"-X main.Version={gitea.version()}" in argv


def test_go_versions_compare_as_numbers() -> None:
    assert binaries.go_version("go1.26.8") == (1, 26, 8)
    assert binaries.go_version("1.24.0") == (1, 24, 0)
    assert binaries.go_version("go1.26") == (1, 26, 0)
    assert binaries.go_version("go1.9.1") < binaries.go_version("1.10") < (1, 26, 7)
    assert binaries.go_version("devel +abc") is None


def test_required_go_is_the_newest_wrapper_module_directive() -> None:
    assert binaries.required_go() >= (1, 26, 7)  # Crossplane 1.20.13's go.mod says go 1.26.7


def test_cache_is_keyed_by_component_and_version(isolated: Path) -> None:
    etcd = next(c for c in binaries.COMPONENTS if c.name == "etcd")
    assert (
        binaries.cache_dir(etcd)
        == isolated / "cache" / "klutch-gitops" / "bin" / f"etcd-{etcd.version()}"
    )


def test_missing_binaries_are_named_with_the_fix(isolated: Path) -> None:
    with pytest.raises(KlutchError) as raised:
        binaries.require(*ALL, *ASSETS)
    assert all(name in raised.value.message for name in (*ALL, *ASSETS))
    assert "make bins" in raised.value.fix


def test_overrides_take_precedence_over_the_cache(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubernetes = next(c for c in binaries.COMPONENTS if c.name == "kubernetes")
    cached = executable(binaries.cache_dir(kubernetes) / "kube-apiserver")
    assert binaries.require("kube-apiserver")["kube-apiserver"] == cached

    assets = isolated / "assets"
    envtest = executable(assets / "kube-apiserver")
    executable(assets / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    assert binaries.require("kube-apiserver")["kube-apiserver"] == envtest

    mine = executable(isolated / "mine" / "kube-apiserver")
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "mine"))
    resolved = binaries.resolve_all()
    assert resolved["kube-apiserver"].path == mine
    assert resolved["kube-apiserver"].source == "KLUTCH_BIN_DIR"
    assert resolved["etcd"].source == "KUBEBUILDER_ASSETS"  # falls through per binary
    assert resolved["dex"].path is None


def test_a_non_executable_file_does_not_count(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated / "bins").mkdir()
    (isolated / "bins" / "etcd").write_text("not a program")
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "bins"))
    assert binaries.resolve_all()["etcd"].path is None


def test_an_asset_is_a_directory(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated / "bins").mkdir()
    (isolated / "bins" / "crossplane-crds").write_text("not a directory")
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "bins"))
    assert binaries.resolve_all()["crossplane-crds"].path is None
    (isolated / "bins" / "crossplane-crds").unlink()
    (isolated / "bins" / "crossplane-crds").mkdir()
    assert binaries.require("crossplane-crds")["crossplane-crds"] == isolated / "bins" / (
        "crossplane-crds"
    )


def test_build_skips_what_is_present(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALL:
        executable(isolated / "prebuilt" / name)
    for name in ASSETS:
        (isolated / "prebuilt" / name).mkdir()
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "prebuilt"))
    reports = binaries.build_missing()
    assert {r.binary for r in reports} == {*ALL, *ASSETS}
    assert {(r.source, r.seconds) for r in reports} == {("KLUTCH_BIN_DIR", None)}


@pytest.fixture
def fake_go(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every binary but Crossplane's prebuilt, and a go that "builds" and knows a module cache."""
    for name in ALL:
        if name != "crossplane":
            executable(isolated / "prebuilt" / name)
    for name in ASSETS:
        if name != "crossplane-crds":
            (isolated / "prebuilt" / name).mkdir()
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "prebuilt"))
    module = isolated / "modcache" / "crossplane"
    monkeypatch.setattr(binaries, "_check_go", lambda: None)
    monkeypatch.setattr(binaries, "_go_build", lambda component, binary, output: executable(output))
    monkeypatch.setattr(
        binaries, "_run_go", lambda component, name, argv: json.dumps({"Dir": str(module)})
    )
    return module


def test_build_copies_assets_from_the_module_next_to_the_binary(fake_go: Path) -> None:
    (fake_go / "cluster" / "crds").mkdir(parents=True)
    for name in ("b.yaml", "a.yaml", "README.md"):
        (fake_go / "cluster" / "crds" / name).write_text(name)
    reports = {r.binary: r for r in binaries.build_missing()}
    assert reports["crossplane"].source == reports["crossplane-crds"].source == "built"
    crds = binaries.require("crossplane-crds")["crossplane-crds"]
    assert crds.parent == binaries.require("crossplane")["crossplane"].parent
    assert sorted(p.name for p in crds.iterdir()) == ["a.yaml", "b.yaml"]
    assert sorted(p.name for p in binaries.cache_root().iterdir()) == [".lock", crds.parent.name]


def test_an_asset_without_yaml_fails_and_leaves_no_cache_entry(fake_go: Path) -> None:
    (fake_go / "cluster" / "crds").mkdir(parents=True)
    with pytest.raises(KlutchError) as raised:
        binaries.build_missing()
    assert "cluster/crds" in raised.value.message
    assert binaries.resolve_all()["crossplane"].path is None  # the built binary was not kept
    assert sorted(p.name for p in binaries.cache_root().iterdir()) == [".lock"]


def test_a_missing_asset_alone_is_copied_and_the_binary_kept(fake_go: Path) -> None:
    (fake_go / "cluster" / "crds").mkdir(parents=True)
    (fake_go / "cluster" / "crds" / "a.yaml").write_text("a")
    crossplane = next(c for c in binaries.COMPONENTS if c.name == "crossplane")
    binary = executable(binaries.cache_dir(crossplane) / "crossplane")
    binary.write_text("#!/bin/sh\n# built before\n")
    reports = {r.binary: r.source for r in binaries.build_missing()}
    assert (reports["crossplane"], reports["crossplane-crds"]) == ("cache", "built")
    assert binary.read_text().endswith("# built before\n")
    assert (binaries.cache_dir(crossplane) / "crossplane-crds" / "a.yaml").exists()


def test_trees_are_copied_whole_and_writable(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = isolated / "modcache" / "gitea"
    for name in ("options/locale/locale_en-US.ini", "templates/mail/auth/activate.tmpl"):
        (module / name).parent.mkdir(parents=True, exist_ok=True)
        (module / name).write_text(name)
        (module / name).chmod(0o444)
    (module / "main.go").write_text("package main\n")
    monkeypatch.setattr(
        binaries, "_run_go", lambda component, name, argv: json.dumps({"Dir": str(module)})
    )
    gitea = next(c for c in binaries.COMPONENTS if c.name == "gitea")
    output = isolated / "gitea-static"
    binaries._copy_trees(gitea, gitea.trees["gitea-static"], output)
    copied = sorted(str(p.relative_to(output)) for p in output.rglob("*") if p.is_file())
    assert copied == ["options/locale/locale_en-US.ini", "templates/mail/auth/activate.tmpl"]
    assert all(p.stat().st_mode & stat.S_IWUSR for p in output.rglob("*"))
    (module / "templates" / "mail" / "auth" / "activate.tmpl").unlink()
    (module / "templates" / "mail" / "auth").rmdir()
    (module / "templates" / "mail").rmdir()
    with pytest.raises(KlutchError) as raised:
        binaries._copy_trees(gitea, gitea.trees["gitea-static"], isolated / "again")
    assert "no files in templates/" in raised.value.message


def test_modules_are_downloaded_before_their_component_builds(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``go list -deps`` of exactly the binaries' packages, so test-only modules the proxy
    refuses are never asked for; the build of a component waits for its download."""
    (fake_go / "cluster" / "crds").mkdir(parents=True)
    (fake_go / "cluster" / "crds" / "a.yaml").write_text("a")
    calls: list[tuple[str, list[str]]] = []

    def run_go(component: binaries.Component, name: str, argv: list[str]) -> str:
        calls.append((component.name, argv))
        return json.dumps({"Dir": str(fake_go)})

    monkeypatch.setattr(binaries, "_run_go", run_go)
    monkeypatch.setattr(
        binaries,
        "_go_build",
        lambda component, binary, output: (
            calls.append((component.name, ["build"])),
            executable(output),
        ),
    )
    binaries.build_missing()
    crossplane = [argv for name, argv in calls if name == "crossplane"]
    assert crossplane[0] == [
        "go", "list", "-deps", "-f", "{{.ImportPath}}",
        "github.com/crossplane/crossplane/v2/cmd/crossplane",
    ]  # fmt: skip
    assert ["build"] in crossplane[1:]


def test_a_refused_download_fails_the_build_and_names_it(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run_go(component: binaries.Component, name: str, argv: list[str]) -> str:
        raise KlutchError(f"building {name} failed: 403 Forbidden", "check the module proxy")

    monkeypatch.setattr(binaries, "_run_go", run_go)
    with pytest.raises(KlutchError, match="crossplane modules"):
        binaries.build_missing()
    assert binaries.resolve_all()["crossplane"].path is None


def test_two_components_build_at_once_each_after_its_modules(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd's and Dex's builds meet at a barrier, which one builder alone would never pass."""
    for name in ALL:
        if name not in ("etcd", "dex"):
            executable(isolated / "prebuilt" / name)
    for name in ASSETS:
        (isolated / "prebuilt" / name).mkdir()
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "prebuilt"))
    monkeypatch.setattr(binaries, "_check_go", lambda: None)
    monkeypatch.setattr(binaries, "_run_go", lambda component, name, argv: "")
    barrier = threading.Barrier(2, timeout=10)
    monkeypatch.setattr(
        binaries,
        "_go_build",
        lambda component, binary, output: (barrier.wait(), executable(output)),
    )
    steps: list[binaries.Step] = []
    reports = binaries.build_missing(steps.append)
    assert {r.binary for r in reports if r.source == "built"} == {"etcd", "dex"}
    for component in ("etcd", "dex"):
        mine = [(s.name, s.seconds is not None) for s in steps if s.component == component]
        assert mine == [
            ("modules", False),
            ("modules", True),
            (component, False),
            (component, True),
        ]


def test_bins_in_a_pipe_prints_a_line_as_each_step_starts_and_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CI log shows progress (a spinner prints nothing there), then the table."""

    def build_missing(on_step: object) -> list[binaries.BuildReport]:
        assert callable(on_step)
        for seconds in (None, 4.2):
            on_step(binaries.Step("kubernetes", "v1.34.3", "modules", seconds))
        for seconds in (None, 61.0):
            on_step(binaries.Step("kubernetes", "v1.34.3", "kubectl", seconds))
        return [binaries.BuildReport("kubernetes", "v1.34.3", "kubectl", "built", 61.0)]

    monkeypatch.setattr(binaries, "build_missing", build_missing)
    result = CliRunner().invoke(dev, ["bins"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [re.sub(r"^ *\d+s  ", "", line) for line in lines[:4]] == [
        "start modules (kubernetes v1.34.3)",
        "done  modules (kubernetes v1.34.3) in 4s",
        "start kubectl (kubernetes v1.34.3)",
        "done  kubectl (kubernetes v1.34.3) in 61s",
    ]
    assert lines[4].split() == ["binary", "version", "source", "build"]
    assert lines[5].split() == ["kubectl", "v1.34.3", "built", "61s"]
