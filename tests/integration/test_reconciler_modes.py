"""The reconciler's other ways of working, end to end: write-back modes, RepositoryBindings,
the platform repository, a restart in the middle of a sync, and the one-shot CLI."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from klutch_gitops.apis import REPOSITORY_BINDINGS
from klutch_gitops.config import Config
from klutch_gitops.config_file import config_from, load_config, platform_from
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.resources import CRDS
from reconciler.manager import Reconciler
from reconciler.sync import objects
from reconciler.sync.notes import NOTES_REF
from reconciler.sync.platform import PLATFORM_LABEL, source_id
from reconciler.sync.writeback import TRAILER_RECONCILER
from tests.env import Env
from tests.gitserver import GitServer
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.tenant import Tenant, report_ready, repository_binding
from tests.kit.wait import eventually

HUMAN = "Human Developer"
BOT = "klutch-gitops[bot]"
ROOT = Path(__file__).resolve().parents[2]
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
TEMPLATES = {
    "example-backend": Resource(
        "example-backend.klutch.anynines.com",
        "v1alpha1",
        "apiserviceexporttemplates",
        "APIServiceExportTemplate",
    ),
    "klutch": Resource(
        "klutch.anynines.com", "v1alpha1", "apiserviceexporttemplates", "APIServiceExportTemplate"
    ),
}


# -- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def new_tenant(env: Env) -> Callable[..., Tenant]:
    def make(mode: str = "inline", running: bool = True) -> Tenant:
        tenant = env.tenant(mode=mode)
        if not running:
            tenant.reconciler.stop()
        env.cleanup.append(tenant.reconciler.stop)
        return tenant

    return make


def start(config: Config, cleanup: list[Callable[[], Any]]) -> Reconciler:
    reconciler = Reconciler(config).start(serve_http=False)
    cleanup.append(reconciler.stop)
    return reconciler


def bare_repo(tmp_path: Path, name: str, root: Path | None = None) -> tuple[Path, Path]:
    """A bare remote (in ``root``, say a Git server's, else ``tmp_path``) and a person's clone
    of it, with one commit on main."""
    remote = (root or tmp_path) / f"{name}-{uuid.uuid4().hex[:6]}.git"
    clone = tmp_path / f"{name}-human"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    git(clone, "config", "user.name", HUMAN)
    git(clone, "config", "user.email", "human@example.com")
    git(clone, "checkout", "-q", "-b", "main")
    (clone / "README.md").write_text(f"{name}\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "start")
    git(clone, "push", "-q", "origin", "main")
    return remote, clone


def push(clone: Path, files: dict[str, str | None], message: str = "change claims") -> str:
    """Commit and push as the person, rebasing on whatever the bot pushed meanwhile."""
    for name, text in files.items():
        path = clone / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", message)
    for _ in range(5):  # the bot may push between our pull and our push, as it would for anyone
        git(clone, "pull", "-q", "--rebase", "origin", "main")
        pushed = subprocess.run(
            ["git", "push", "-q", "origin", "HEAD:main"], cwd=clone, capture_output=True
        )
        if pushed.returncode == 0:
            return git(clone, "rev-parse", "HEAD")
    raise AssertionError(f"could not push to {clone}: the branch kept moving")


def show(remote: Path, ref: str, name: str) -> bytes | None:
    """A file's exact bytes at ``ref``, or None when it is not there."""
    result = subprocess.run(
        ["git", "show", f"{ref}:{name}"], cwd=remote, capture_output=True, check=False
    )
    return result.stdout if result.returncode == 0 else None


def authors(remote: Path, ref: str) -> set[str]:
    return set(git(remote, "log", "--format=%an", ref).splitlines())


def never(check: Callable[[], Any], what: str, seconds: float = 3.0) -> None:
    """Fail if ``check`` becomes true within ``seconds``: for things that must not happen."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not check(), what
        time.sleep(0.2)


def claims_of(kube: Kube, namespace: str, selector: str | None = None) -> list[str]:
    try:
        items, _ = kube.list(POSTGRES, namespace, label_selector=selector)
    except KubeError as error:
        if error.not_found:  # the App Cluster does not serve the kind yet
            return []
        raise
    return sorted(item["metadata"]["name"] for item in items)


def write_config(tenant: Tenant, path: Path, work_dir: Path, **extra: Any) -> Path:
    """The tenant's registration as a config file for ``klutch-gitops run``."""
    spec = tenant.config.repositories[0]
    assert spec.app_kubeconfig.file
    assert spec.control_plane_kubeconfig.file
    repository = {
        "name": spec.name,
        "url": spec.url,
        "path": spec.path,
        "consumerNamespace": spec.consumer_namespace,
        "appNamespaces": list(spec.app_namespaces),
        "appCluster": {"kubeconfig": str(spec.app_kubeconfig.file)},
        "controlPlane": {"kubeconfig": str(spec.control_plane_kubeconfig.file)},
        **extra,
    }
    config = {
        "controlPlane": {"kubeconfig": str(tenant.config.control_plane_kubeconfig)},
        "listen": f"127.0.0.1:{free_port()}",
        "pollInterval": "1s",
        "batchWindow": "300ms",
        "workers": 2,
        "workDir": str(work_dir),
        "repositories": [repository],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def cli(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "klutch_gitops.cli", *args],
        cwd=ROOT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kwargs,
    )


# -- 1. write-back mode `files` -------------------------------------------------------------


def test_files_mode_writes_status_beside_the_claims(new_tenant: Callable[..., Tenant]) -> None:
    tenant = new_tenant(mode="files")
    text = claim("orders", tenant.namespace)
    push(tenant.clone, {"claims/orders.yaml": text})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "orders"), "the CP copy")
    report_ready(tenant, "orders")

    status_file = f"claims/.klutch/status/{tenant.namespace}/PostgresqlInstance/orders.yaml"

    def written() -> dict | None:
        content = show(tenant.remote, "main", status_file)
        doc = yaml.safe_load(content) if content else None
        return doc if doc and (doc.get("status") or {}).get("host") == "db.example" else None

    doc = eventually(written, "the status file on main")
    assert doc["apiVersion"] == "anynines.com/v1"
    assert doc["kind"] == "PostgresqlInstance"
    assert doc["metadata"] == {"name": "orders", "namespace": tenant.namespace}
    assert doc["status"]["conditions"][0]["status"] == "True"
    assert show(tenant.remote, "main", "claims/orders.yaml") == text.encode()  # byte for byte
    assert BOT in authors(tenant.remote, "main")

    push(tenant.clone, {"claims/orders.yaml": None}, "drop orders")
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "orders") is None,
        "the CP copy to go",
    )
    eventually(
        lambda: show(tenant.remote, "main", status_file) is None, "the status file to be removed"
    )
    eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "orders") is None, "the App copy to go"
    )


# -- 2. write-back mode `branch` ------------------------------------------------------------


def test_branch_mode_keeps_main_human_only(new_tenant: Callable[..., Tenant]) -> None:
    tenant = new_tenant(mode="branch")
    push(tenant.clone, {"claims/orders.yaml": claim("orders", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "orders"), "the CP copy")
    report_ready(tenant, "orders")

    status_file = f"claims/.klutch/status/{tenant.namespace}/PostgresqlInstance/orders.yaml"

    def on_branch(ref: str = "klutch-status") -> dict | None:
        content = show(tenant.remote, ref, status_file)
        doc = yaml.safe_load(content) if content else None
        return doc if doc and (doc.get("status") or {}).get("host") == "db.example" else None

    eventually(on_branch, "the status file on klutch-status")
    assert show(tenant.remote, "main", status_file) is None
    assert show(tenant.remote, "main", "claims/.klutch/reconcile.yaml") is None

    # a later human change is noted as reconciled (a git note, issue 15), and main stays
    # human-only
    human = push(
        tenant.clone,
        {"claims/orders.yaml": claim("orders", tenant.namespace, plan="postgresql-single-small")},
        "bigger plan",
    )

    def noted() -> bool:
        try:
            note = git(tenant.remote, "notes", f"--ref={NOTES_REF}", "show", human)
        except subprocess.CalledProcessError:
            return False  # not noted yet
        return tenant.spec.name in yaml.safe_load(note)

    eventually(noted, "the new source commit noted as reconciled")
    assert authors(tenant.remote, "main") == {HUMAN}
    assert authors(tenant.remote, "klutch-status") == {BOT}
    assert git(tenant.remote, "rev-parse", "main") == human
    assert on_branch() is not None


# -- 3. RepositoryBinding registered at run time ---------------------------------------------


def kubeconfig_secret(name: str, namespace: str, kubeconfig: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
    }


def test_a_broken_kubeconfig_secret_reports_secret_valid_false(
    new_tenant: Callable[..., Tenant],
    tmp_path: Path,
    cleanup: list[Callable[[], Any]],
    git_server: GitServer,
) -> None:
    tenant = new_tenant(running=False)
    remote, _ = bare_repo(tmp_path, "broken", git_server.root)
    admin, consumer = tenant.control_plane, tenant.consumer
    secrets = Resource("", "v1", "secrets", "Secret")
    admin.create(secrets, kubeconfig_secret("broken-app", consumer, "this: is not a kubeconfig"))
    binder = tenant.config.repositories[0].control_plane_kubeconfig.file
    assert binder is not None
    admin.create(secrets, kubeconfig_secret("broken-binder", consumer, binder.read_text()))
    start(replace(tenant.config, repositories=(), work_dir=tmp_path / "broken-work"), cleanup)
    admin.create(
        REPOSITORY_BINDINGS,
        repository_binding(
            consumer,
            "broken",
            git_server.url_of(remote),
            tenant.namespace,
            app_ref="broken-app",
            binder_ref="broken-binder",
            path=None,
        ),
    )
    cleanup.append(lambda: admin.delete(REPOSITORY_BINDINGS, consumer, "broken"))

    def secret_invalid() -> dict | None:
        status = (admin.get(REPOSITORY_BINDINGS, consumer, "broken") or {}).get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        found = conditions.get("SecretValid", {})
        return conditions if found.get("status") == "False" else None

    conditions = eventually(secret_invalid, "SecretValid=False on the RepositoryBinding")
    assert (
        "App Cluster kubeconfig is not a usable kubeconfig" in conditions["SecretValid"]["message"]
    )
    assert conditions["Ready"]["status"] == "False"


def test_repository_binding_is_followed_until_deleted(
    new_tenant: Callable[..., Tenant], env: Env
) -> None:
    tenant = new_tenant(running=False)
    remote, clone = bare_repo(env.tmp_path, "bound", env.git_server.root)
    admin, consumer = tenant.control_plane, tenant.consumer
    secrets = Resource("", "v1", "secrets", "Secret")
    app_kubeconfig = Path(env.stack.clusters["app"].kubeconfig).read_text()
    binder = tenant.config.repositories[0].control_plane_kubeconfig.file
    assert binder is not None
    admin.create(secrets, kubeconfig_secret("app-cluster", consumer, app_kubeconfig))
    admin.create(secrets, kubeconfig_secret("binder", consumer, binder.read_text()))

    reconciler = start(
        replace(tenant.config, repositories=(), work_dir=env.tmp_path / "bound-work"), env.cleanup
    )
    push(clone, {"claims/first.yaml": claim("first", tenant.namespace)}, "first claim")
    admin.create(
        REPOSITORY_BINDINGS,
        repository_binding(consumer, "team", env.git_server.url_of(remote), tenant.namespace),
    )
    env.cleanup.append(lambda: admin.delete(REPOSITORY_BINDINGS, consumer, "team"))
    registration = f"{consumer}.team"

    app_copy = eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "first"), "the App copy"
    )
    assert app_copy["metadata"]["labels"][objects.REPOSITORY_LABEL] == registration
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "first"), "the CP copy")

    def ready() -> dict | None:
        status = (admin.get(REPOSITORY_BINDINGS, consumer, "team") or {}).get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        good = conditions.get("Ready", {}).get("status") == "True"
        return status if good and status.get("lastFetchedCommit") else None

    status = eventually(ready, "Ready=True and lastFetchedCommit on the RepositoryBinding")
    assert {c["type"]: c["status"] for c in status["conditions"]}["SecretValid"] == "True"
    assert status["lastFetchedCommit"] in git(remote, "rev-list", "main").splitlines()

    admin.delete(REPOSITORY_BINDINGS, consumer, "team")
    eventually(lambda: registration not in reconciler.syncs, "the registration to be dropped")
    push(clone, {"claims/later.yaml": claim("later", tenant.namespace)}, "after the unbinding")
    never(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "later") is not None,
        "a push after the RepositoryBinding was deleted was mirrored",
    )
    for kube, namespace in ((tenant.app, tenant.namespace), (admin, tenant.mapped)):
        live = kube.get(POSTGRES, namespace, "first")
        assert live is not None, f"the claim in {namespace} was removed with the binding"
        assert not live["metadata"].get("deletionTimestamp")


# -- 4. the platform repository -------------------------------------------------------------


def platform_file(namespace: str, suffix: str, with_klutch: bool = True) -> str:
    documents = [
        {
            "apiVersion": "example-backend.klutch.anynines.com/v1alpha1",
            "kind": "APIServiceExportTemplate",
            "metadata": {"name": f"postgresqlinstances-{suffix}", "namespace": namespace},
            "spec": {
                "APIServiceSelector": {"group": "anynines.com", "resource": "postgresqlinstances"}
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"not-platform-{suffix}", "namespace": namespace},
            "data": {"a": "b"},
        },
    ]
    if with_klutch:
        documents.append(
            {
                "apiVersion": "klutch.anynines.com/v1alpha1",
                "kind": "APIServiceExportTemplate",
                "metadata": {"name": f"servicebindings-{suffix}", "namespace": namespace},
                "spec": {
                    "APIServiceSelector": {"group": "anynines.com", "resource": "servicebindings"}
                },
            }
        )
    return yaml.safe_dump_all(documents, sort_keys=False)


def test_platform_repository_applies_templates_and_prunes(env: Env) -> None:
    admin = Kube(env.clusters["control-plane"])
    suffix = uuid.uuid4().hex[:6]
    namespace = f"platform-{suffix}"
    core = client.CoreV1Api(env.clusters["control-plane"])
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    env.cleanup.append(lambda: core.delete_namespace(namespace))
    remote, clone = bare_repo(env.tmp_path, "platform")
    push(clone, {"templates/apis.yaml": platform_file(namespace, suffix)}, "offer two APIs")

    start(
        config_from(
            Path(env.stack.clusters["control-plane"].kubeconfig),
            platform=platform_from(f"file://{remote}"),
            poll_interval=1.0,
            workers=2,
            work_dir=env.tmp_path / "work",
        ),
        env.cleanup,
    )
    names = {
        "example-backend": f"postgresqlinstances-{suffix}",
        "klutch": f"servicebindings-{suffix}",
    }
    for group, name in names.items():
        live = eventually(
            lambda group=group, name=name: admin.get(TEMPLATES[group], namespace, name),
            f"the {group} template on the Control Plane",
        )
        assert live["metadata"]["labels"][PLATFORM_LABEL] == source_id(
            platform_from(f"file://{remote}")
        )
    assert admin.get(CONFIG_MAPS, namespace, f"not-platform-{suffix}") is None

    push(clone, {"templates/apis.yaml": platform_file(namespace, suffix, False)}, "retire one")
    eventually(
        lambda: admin.get(TEMPLATES["klutch"], namespace, names["klutch"]) is None,
        "the removed template to be pruned",
    )
    assert admin.get(TEMPLATES["example-backend"], namespace, names["example-backend"])
    assert admin.get(CONFIG_MAPS, namespace, f"not-platform-{suffix}") is None


# -- 5. a restart in the middle of a sync ---------------------------------------------------


def test_restart_mid_sync_converges_without_duplicates(
    new_tenant: Callable[..., Tenant], tmp_path: Path, cleanup: list[Callable[[], Any]]
) -> None:
    tenant = new_tenant()
    repo = tenant.config.repositories[0].name
    # the App Cluster serves the kind and the namespace is mapped: the next pass only applies
    eventually(
        lambda: repo in tenant.reconciler.syncs and tenant.reconciler.syncs[repo].view.mapping,
        "the namespace mapping",
    )
    eventually(lambda: tenant.app.get(CRDS, None, "postgresqlinstances.anynines.com"), "the CRD")
    tenant.reconciler.stop()

    names = [f"db-{index:02d}" for index in range(30)]
    humans = [
        push(
            tenant.clone,
            {f"claims/{name}.yaml": claim(name, tenant.namespace) for name in names},
            "30 claims",
        )
    ]
    config_path = write_config(tenant, tmp_path / "reconciler.yaml", tmp_path / "restart-work")
    logs = (tmp_path / "first-run.log").open("w")
    first = cli("run", "--config", str(config_path), stdout=logs, stderr=subprocess.STDOUT)
    cleanup.append(lambda: (first.kill(), first.wait(), logs.close()))
    selector = f"{objects.REPOSITORY_LABEL}={repo}"
    deadline = time.monotonic() + 60
    while not claims_of(tenant.app, tenant.namespace, selector):  # polled tightly: a pass over
        assert time.monotonic() < deadline, "no claim reached the App Cluster"  # 30 is short
        time.sleep(0.005)
    first.send_signal(signal.SIGKILL)  # in the middle of the pass, as a crash would
    first.wait()
    at_kill = claims_of(tenant.control_plane, tenant.mapped)
    assert len(at_kill) < len(names), "the pass had finished: the crash was not mid-sync"

    reconciler = start(load_config(config_path), cleanup)
    humans.append(push(tenant.clone, {"docs/notes.md": "after the crash\n"}, "human: notes"))
    eventually(lambda: claims_of(tenant.app, tenant.namespace, selector) == names, "30 App claims")
    eventually(lambda: claims_of(tenant.control_plane, tenant.mapped) == names, "30 CP claims")

    for name in names:
        report_ready(tenant, name)
    humans.append(push(tenant.clone, {"docs/notes.md": "racing the status\n"}, "human: more notes"))

    def all_in_git() -> bool:
        content = show(tenant.remote, "main", "claims/.klutch/reconcile.yaml")
        report = (yaml.safe_load(content) if content else {}).get("registrations") or {}
        return report.get(repo, {}).get("counts", {}).get("ready") == len(names)

    eventually(all_in_git, "every Ready status in Git", timeout=60)
    for name in names:
        written = yaml.safe_load(show(tenant.remote, "main", f"claims/{name}.yaml") or b"")
        assert written["status"]["conditions"][0]["status"] == "True", name

    # idle: asking for another write-back commits nothing
    head = git(tenant.remote, "rev-parse", "main")
    reconciler.queue.add(("writeback", repo))
    never(lambda: git(tenant.remote, "rev-parse", "main") != head, "an idle status commit")

    history = git(tenant.remote, "rev-list", "main").splitlines()
    assert all(sha in history for sha in humans), "a human commit was lost"
    assert claims_of(tenant.app, tenant.namespace, selector) == names  # exactly once each
    assert claims_of(tenant.control_plane, tenant.mapped) == names
    bots = git(tenant.remote, "log", f"--grep=^{TRAILER_RECONCILER}:", "--format=%H", "main")
    patches = [git(tenant.remote, "diff-tree", "-p", "--no-commit-id", sha) for sha in bots.split()]
    assert all(patches), "a status commit that changes nothing"
    assert len(set(patches)) == len(patches), "two status commits with the same change"
    for name in names:  # each claim's status arrived in exactly one status commit
        touching = git(
            tenant.remote, "log", "--format=%an", "main", "--", f"claims/{name}.yaml"
        ).splitlines()
        assert touching.count(BOT) == 1, (name, touching)


# -- 6. klutch-gitops run --once --------------------------------------------------------------


def test_run_once_cli(new_tenant: Callable[..., Tenant], tmp_path: Path) -> None:
    tenant = new_tenant(running=False)
    push(
        tenant.clone,
        {
            "claims/orders.yaml": claim("orders", tenant.namespace),
            "claims/users.yaml": claim("users", tenant.namespace),
        },
    )
    config_path = write_config(tenant, tmp_path / "once.yaml", tmp_path / "once-work")
    once = cli(
        "run",
        "--config",
        str(config_path),
        "--once",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = once.communicate(timeout=120)
    assert once.returncode == 0, err
    for kube, namespace in ((tenant.app, tenant.namespace), (tenant.control_plane, tenant.mapped)):
        assert claims_of(kube, namespace) == ["orders", "users"]
    report = yaml.safe_load(tenant.remote_file("claims/.klutch/reconcile.yaml"))
    assert report["registrations"][tenant.spec.name]["counts"]["claims"] == 2

    broken = write_config(tenant, tmp_path / "broken.yaml", tmp_path / "once-work", colour="red")
    failed = cli(
        "run", "--config", str(broken), "--once", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = failed.communicate(timeout=60)
    assert failed.returncode == 1, (out, err)
    assert "repositories[0].colour" in err
    assert "unknown field" in err
    assert "remove it" in err
    assert "Traceback" not in err + out
