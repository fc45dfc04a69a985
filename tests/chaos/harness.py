"""The chaos tier's harness: the reconciler as a real child process, and checks of the end state.

``ReconcilerProcess`` runs ``klutch-gitops run --config FILE`` from a config dict (``config_for``
makes the one of a make_tenant tenant; merge more sections into it, e.g. ``leaderElection``),
with its config, log and failpoint markers in a directory of the test. ``kill`` is SIGKILL;
``start`` again runs the same config on the same work dir, so the new process resumes from what
the killed one left on disk. Replicas are several instances, each with its own directory, config
(its own ``listen``) and ``name``, which is its ``POD_NAME`` and so, with the pid, its identity
in leader election::

    replicas = [
        ReconcilerProcess(
            tmp_path / f"r{i}", {**config, "listen": f"127.0.0.1:{free_port()}"}, name=f"r{i}"
        ).start()
        for i in range(3)
    ]

Start them from the test's main thread: a child dies with the thread that started it
(PR_SET_PDEATHSIG), which is what keeps an aborted test run from leaving reconcilers behind.

The checks read the end state the way a person would: the remote's history (``commits``,
``duplicates``, ``lost``, ``touching``), what it reports (``reconciled``, ``git_claims``) and both
clusters (``mirrored``: every Git claim and no orphan, in the App Cluster and the Control Plane).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from klutch_gitops.config import Bot, RepositorySpec
from klutch_gitops.dev.localstack.processes import Process
from klutch_gitops.failpoints import DIR_ENV, ENV
from klutch_gitops.kube.client import Kube, KubeError
from reconciler.sync import objects
from tests.integration.gitops import POSTGRES, Tenant, eventually, git

CLI = [sys.executable, "-m", "klutch_gitops.cli", "run"]
BOT = Bot().name
# /readyz names what it waits for only to a request with the reconciler's metricsToken
METRICS_TOKEN_ENV = "KLUTCH_GITOPS_METRICS_TOKEN"
METRICS_TOKEN = "chaos-metrics-token"


def config_for(tenant: Tenant, **sections: Any) -> dict[str, Any]:
    """The config file of ``tenant``'s reconciler, as make_tenant configured it; ``sections``
    replace or add top-level keys."""
    config = tenant.config
    return {
        "controlPlane": {"kubeconfig": str(config.control_plane_kubeconfig)},
        "listen": config.listen,
        "pollInterval": f"{config.poll_interval}s",
        "batchWindow": f"{config.batch_window}s",
        "workers": config.workers,
        "workDir": str(config.work_dir),
        "repositories": [repository_entry(spec) for spec in config.repositories],
        "metricsToken": {"env": METRICS_TOKEN_ENV},
        **sections,
    }


def repository_entry(spec: RepositorySpec) -> dict[str, Any]:
    """A registration as the config file spells it (kubeconfigs and secrets as files)."""
    entry: dict[str, Any] = {
        "name": spec.name,
        "url": spec.url,
        "branch": spec.branch,
        "path": spec.path,
        "consumerNamespace": spec.consumer_namespace,
        "appNamespaces": list(spec.app_namespaces),
        "appCluster": {"kubeconfig": str(spec.app_kubeconfig.file)},
        "controlPlane": {"kubeconfig": str(spec.control_plane_kubeconfig.file)},
        "writeBack": {"mode": spec.write_back.mode},
        "appSync": spec.app_sync,
    }
    if spec.webhook_secret is not None:
        entry["webhookSecret"] = {"file": str(spec.webhook_secret.file)}
    return entry


class ReconcilerProcess:
    """One ``klutch-gitops run`` child process; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        config: Mapping[str, Any],
        name: str = "reconciler",
        env: Mapping[str, str] | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.config_file = directory / f"{name}.yaml"
        self.config_file.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.url = f"http://{config['listen']}"
        self.work_dir = Path(config["workDir"])
        self.log = directory / f"{name}.log"
        self.pid_file = directory / f"{name}.pid"
        self.markers = directory / f"{name}-failpoints"
        self.env = {"POD_NAME": name, METRICS_TOKEN_ENV: METRICS_TOKEN, **(env or {})}
        self.process: Process | None = None

    def start(self, failpoints: Mapping[str, str] | None = None) -> ReconcilerProcess:
        """Start (again), with ``failpoints`` ({name: action}) armed; markers are cleared."""
        assert not self.running, f"{self.name} runs already"
        for marker in self.markers.glob("*"):
            marker.unlink()
        env = {**os.environ, **self.env, DIR_ENV: str(self.markers)}
        env[ENV] = ";".join(f"{name}={action}" for name, action in (failpoints or {}).items())
        self.process = Process(
            self.name, [*CLI, "--config", str(self.config_file)], self.log, self.pid_file, env
        )
        self.process.start()
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def kill(self) -> None:
        """SIGKILL: no stop, no flush, no lease released."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        """SIGTERM: the clean stop (the work in flight finishes, leases are released)."""
        if self.process is not None:
            self.process.stop(grace=60)

    def wait_paused(self, failpoint: str, timeout: float = 120) -> None:
        """Until the process sits in ``failpoint`` (its marker names this process)."""
        assert self.process is not None
        assert self.process.popen is not None
        marker, pid = self.markers / failpoint, str(self.process.popen.pid)
        self.process.wait_until(
            lambda: marker.exists() and marker.read_text() == pid, f"failpoint {failpoint}", timeout
        )

    def readyz(self) -> httpx.Response | None:
        """The answer of /readyz, or None while nothing listens."""
        try:
            authorization = {"Authorization": f"Bearer {METRICS_TOKEN}"}
            return httpx.get(f"{self.url}/readyz", headers=authorization, timeout=5)
        except httpx.TransportError:
            return None

    def wait_ready(self, timeout: float = 120) -> None:
        eventually(
            lambda: (answer := self.readyz()) is not None and answer.status_code == 200,
            f"{self.name} to be ready",
            timeout,
        )

    def records(self) -> list[dict[str, Any]]:
        """The JSON log lines of every run so far (the banner line is not JSON)."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append(record)
        return found


# -- the end state ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    sha: str
    author: str
    message: str
    files: tuple[str, ...]
    patch: str  # the change itself, without the commit's metadata

    @property
    def by_bot(self) -> bool:
        return self.author == BOT


def commits(remote: Path, ref: str = "main") -> list[Commit]:
    """The history of ``ref``, oldest first."""
    found = []
    for sha in git(remote, "rev-list", "--reverse", ref).split():
        author, _, message = git(remote, "show", "-s", "--format=%an%n%B", sha).partition("\n")
        files = git(remote, "show", "--format=", "--name-only", sha).split()
        patch = git(remote, "show", "--format=", "--patch", sha)
        found.append(Commit(sha, author, message, tuple(files), patch))
    return found


def duplicates(history: Iterable[Commit]) -> list[tuple[str, str]]:
    """Pairs of bot commits that say the same thing: equal message (source commit included)
    and equal change. A retried push or a restarted reconciler must never make one."""
    seen: dict[tuple[str, str], str] = {}
    pairs = []
    for commit in history:
        if not commit.by_bot:
            continue
        key = (commit.message, commit.patch)
        if key in seen:
            pairs.append((seen[key], commit.sha))
        seen.setdefault(key, commit.sha)
    return pairs


def reconciled(tenant: Tenant) -> str | None:
    """The source commit that the remote's ``reconcile.yaml`` reports; None before the first."""
    try:
        report = tenant.remote_file(f"{tenant.config.repositories[0].path}/.klutch/reconcile.yaml")
    except subprocess.CalledProcessError:
        return None
    return yaml.safe_load(report)["sourceCommit"]


def lost(remote: Path, shas: Iterable[str], ref: str = "main") -> list[str]:
    """The commits of ``shas`` that ``ref`` does not contain."""
    history = set(git(remote, "rev-list", ref).split())
    return [sha for sha in shas if sha not in history]


def touching(history: Iterable[Commit], file: str) -> list[Commit]:
    """The bot commits that changed ``file``."""
    return [commit for commit in history if commit.by_bot and file in commit.files]


def git_claims(remote: Path, path: str = "claims", ref: str = "main") -> dict[str, dict]:
    """The PostgresqlInstances on ``ref`` under ``path`` (``.klutch/`` skipped), by name."""
    claims = {}
    for file in git(remote, "ls-tree", "-r", "--name-only", ref, "--", path).split():
        if "/.klutch/" in f"/{file}" or not file.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(git(remote, "show", f"{ref}:{file}")):
            if isinstance(doc, dict) and doc.get("kind") == POSTGRES.kind:
                claims[doc["metadata"]["name"]] = doc
    return claims


def live_claims(kube: Kube, namespace: str) -> dict[str, dict]:
    """The PostgresqlInstances in ``namespace`` by name; AssertionError (retry) while the kind
    is not served there yet."""
    try:
        items, _ = kube.list(POSTGRES, namespace)
    except KubeError as error:
        if error.not_found:
            raise AssertionError(f"{POSTGRES.plural} not served in {namespace} yet") from None
        raise
    return {obj["metadata"]["name"]: obj for obj in items}


def mirrored(tenant: Tenant, expected: Mapping[str, dict]) -> bool:
    """Every claim of ``expected`` and nothing else in the App namespace and in the mapped
    Control Plane namespace (no orphan), with Git's spec; every App copy holds the finalizer and
    none is stuck deleting. An AssertionError says what differs, so ``eventually`` can retry."""
    app, cp = (
        live_claims(tenant.app, tenant.namespace),
        live_claims(tenant.control_plane, tenant.mapped),
    )
    for where, live in (("App Cluster", app), ("Control Plane", cp)):
        extra, missing = sorted(live.keys() - expected.keys()), sorted(expected.keys() - live)
        assert not extra, f"{where}: orphans {extra}"
        assert not missing, f"{where}: missing {missing}"
        for name, doc in expected.items():
            meta = live[name]["metadata"]
            assert not meta.get("deletionTimestamp"), f"{where}: {name} is being deleted"
            differs = {k for k, v in doc["spec"].items() if live[name]["spec"].get(k) != v}
            assert not differs, f"{where}: {name} differs from Git in {sorted(differs)}"
    for name, obj in app.items():
        assert objects.FINALIZER in (obj["metadata"].get("finalizers") or []), name
    return True


def is_ready(status: Mapping[str, Any] | None) -> bool:
    """Whether a claim's status (in Git or a cluster) says Ready=True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (status or {}).get("conditions") or []
    )
