"""A throwaway PostgreSQL server for tests, started the way the local stack starts it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from klutch_gitops.localstack.postgres import PostgresInfo, start_postgres
from klutch_gitops.localstack.processes import Process


@contextmanager
def running_postgres(directory: Path) -> Iterator[PostgresInfo]:
    processes: list[Process] = []

    def spawn(name: str, argv: list[str], env: dict[str, str] | None) -> Process:
        process = Process(name, argv, directory / f"{name}.log", directory / f"{name}.pid", env)
        processes.append(process)
        process.start()
        return process

    try:
        yield start_postgres(directory / "server", spawn)
    finally:
        for process in processes:
            process.stop()
