"""The chaos tier's harness: the reconciler as a real child process.

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

The checks of the end state (the remote's history, what it reports, both clusters) are the test
kit's: tests.kit.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from klutch_gitops.dev.localstack.processes import Process
from reconciler.failpoints import DIR_ENV, ENV
from tests.kit.tenant import Tenant, repository_entry
from tests.kit.wait import eventually

CLI = [sys.executable, "-m", "klutch_gitops.cli", "run"]
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
        return self._get("/readyz")

    def registrations(self) -> dict[str, dict]:
        """Each registration's status (GET /registrations), by name; empty while nothing listens."""
        answer = self._get("/registrations")
        if answer is None:
            return {}
        return {r["name"]: r["status"] for r in answer.json()["registrations"]}

    def _get(self, path: str) -> httpx.Response | None:
        try:
            authorization = {"Authorization": f"Bearer {METRICS_TOKEN}"}
            return httpx.get(f"{self.url}{path}", headers=authorization, timeout=5)
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
