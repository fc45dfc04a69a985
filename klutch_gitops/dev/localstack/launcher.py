"""Starting the stack's processes: each one logged and remembered in start order (so they stop in
reverse), then awaited until a readiness probe answers."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from klutch_gitops.dev.localstack.pki import Pki
from klutch_gitops.dev.localstack.processes import Process

READY_TIMEOUT = 120.0


class Launcher:
    """Spawns processes with their log and pid files under the state directory."""

    def __init__(self, logs: Path, pids: Path, on_event: Callable[[str], None]) -> None:
        self.logs = logs
        self.pids = pids
        self.on_event = on_event
        self.processes: list[Process] = []

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(name, argv, self.logs / f"{name}.log", self.pids / f"{name}.pid", env)
        self.processes.append(process)
        process.start()
        self.on_event(f"started {name} (pid {process.popen.pid if process.popen else '?'})")
        return process

    def await_ready(self, process: Process, what: str, ready: Callable[[], bool]) -> None:
        seconds = process.wait_until(ready, what, READY_TIMEOUT)
        self.on_event(f"{process.name} ready ({what}) after {seconds:.1f}s")


def tls_context(pki: Pki, client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.serving_ca))
    if client:
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return context


def status_ok(url: str, tls: ssl.SSLContext | None) -> bool:
    try:
        return httpx.get(url, verify=tls or True, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def json_ok(url: str, tls: ssl.SSLContext | None, check: Callable[[dict[str, Any]], bool]) -> bool:
    try:
        response = httpx.get(url, verify=tls or True, timeout=2.0)
        return response.status_code == 200 and check(response.json())
    except (httpx.HTTPError, ValueError):
        return False
