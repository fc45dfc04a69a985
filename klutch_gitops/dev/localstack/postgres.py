"""A throwaway PostgreSQL server: the data-service backend the local provider acts on.

``initdb`` makes a fresh cluster in a directory of the state dir, with a superuser whose password is
generated for this run and a ``pg_hba.conf`` that accepts scram-sha-256 on the socket and on
127.0.0.1 and nothing else (no ``trust``). ``postgres`` itself is a stack child like every other
(PDEATHSIG, pid file, its log in the stack's logs), on a free loopback port, with its socket in the
state dir rather than ``/var/run/postgresql``. Durability is switched off: every ``dev up`` starts
from an empty server anyway.

PostgreSQL refuses to run as root. As root, initdb and the server run in a user namespace of their
own where they are the ``postgres`` user while the kernel still sees root: they can reach a state
dir under root's 0700 home, and since only the namespace changes (not the user the kernel sees),
the parent-death signal survives, which a switch to another user with setpriv would clear.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.dev.localstack.processes import Process, cmdline, free_port, write_pid_file
from klutch_gitops.errors import KlutchError

SUPERUSER = "postgres"
HOST = "127.0.0.1"
DEBIAN_ROOT = Path("/usr/lib/postgresql")
SOCKET_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1
READY_TIMEOUT = 60.0
HBA = f"""# written by klutch-gitops: passwords (scram-sha-256) only, never trust
local all all scram-sha-256
host  all all {HOST}/32 scram-sha-256
"""

# (name, argv, env) -> a started Process: Launcher.spawn, so `dev down` finds the server
Spawn = Callable[[str, list[str], dict[str, str] | None], Process]


@dataclass(frozen=True)
class PostgresInfo:
    """How to reach the server as its superuser, and where the provider keeps backups."""

    host: str
    port: int
    superuser: str
    password: str
    password_file: str
    socket_dir: str
    backup_dir: str
    bin_dir: str

    def env(self) -> dict[str, str]:
        """Variables for ``stack.env``; the password stays in its 0600 file."""
        return {
            "KLUTCH_POSTGRES_HOST": self.host,
            "KLUTCH_POSTGRES_PORT": str(self.port),
            "KLUTCH_POSTGRES_USER": self.superuser,
            "KLUTCH_POSTGRES_PASSWORD_FILE": self.password_file,
            "KLUTCH_POSTGRES_BACKUP_DIR": self.backup_dir,
        }


@dataclass(frozen=True)
class PostgresPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def sockets(self) -> Path:
        return self.root / "run"

    @property
    def backups(self) -> Path:
        return self.root / "backups"

    @property
    def password(self) -> Path:
        return self.root / "superuser-password"


def bin_dir() -> Path:
    """Where initdb, postgres, pg_dump and pg_restore are: Debian's newest, else the PATH."""
    versions = sorted(
        (p for p in DEBIAN_ROOT.glob("*/bin") if (p / "postgres").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1]
    found = shutil.which("postgres")
    if found:
        return Path(found).parent
    raise KlutchError(
        "PostgreSQL's server programs (initdb, postgres) were not found",
        "install Debian's postgresql package: 'apt-get install postgresql'",
    )


def as_server_user(argv: list[str], euid: int | None = None) -> list[str]:
    """``argv`` as it must run: unchanged, or as root inside a user namespace (module docstring)."""
    if (os.geteuid() if euid is None else euid) != 0:
        return argv
    try:
        user = pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise KlutchError(
            "PostgreSQL refuses to run as root, and there is no 'postgres' user to map root to",
            "install Debian's postgresql package (it creates the user), or run as another user",
        ) from None
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    return [
        unshare,
        "--user",
        f"--map-user={user.pw_uid}",
        f"--map-group={user.pw_gid}",
        "--",
        *argv,
    ]


def server_argv(bins: Path, paths: PostgresPaths, port: int) -> list[str]:
    return [
        str(bins / "postgres"),
        "-D",
        str(paths.data),
        "-p",
        str(port),
        "-c",
        f"listen_addresses={HOST}",
        "-c",
        f"unix_socket_directories={paths.sockets}",
        "-c",
        "unix_socket_permissions=0700",
        "-c",
        "fsync=off",
        "-c",
        "full_page_writes=off",
        "-c",
        "synchronous_commit=off",
    ]


def check_socket_path(paths: PostgresPaths, port: int) -> None:
    """A socket path longer than sun_path makes postgres fail with an obscure message."""
    socket = paths.sockets / f".s.PGSQL.{port}"
    if len(os.fsencode(socket)) > SOCKET_PATH_MAX:
        raise KlutchError(
            f"the PostgreSQL socket path {socket} is longer than {SOCKET_PATH_MAX} bytes",
            "use a shorter state directory (--state-dir or $KLUTCH_STATE_DIR)",
        )


def start_postgres(directory: Path, spawn: Spawn, timeout: float = READY_TIMEOUT) -> PostgresInfo:
    """A fresh server in ``directory`` (its previous content removed), accepting the superuser.

    The process comes from ``spawn`` so the stack owns it like its other children; stopping it
    (SIGTERM) is a smart shutdown, so stop its clients first.
    """
    bins = bin_dir()
    paths = PostgresPaths(directory)
    port = free_port()
    check_socket_path(paths, port)
    shutil.rmtree(paths.root, ignore_errors=True)
    paths.root.mkdir(parents=True, mode=0o700)
    for path in (paths.sockets, paths.backups):
        path.mkdir(mode=0o700)
    password = secrets.token_urlsafe(24)
    paths.password.touch(mode=0o600)
    paths.password.write_text(password)
    _initdb(bins, paths)
    argv = as_server_user(server_argv(bins, paths, port))
    process = spawn("postgres", argv, None)
    info = PostgresInfo(
        host=HOST,
        port=port,
        superuser=SUPERUSER,
        password=password,
        password_file=str(paths.password),
        socket_dir=str(paths.sockets),
        backup_dir=str(paths.backups),
        bin_dir=str(bins),
    )
    process.wait_until(lambda: _harden(info), "connections", timeout)
    if process.popen is not None and argv[0] != str(bins / "postgres"):
        # started through unshare, which exec'd postgres: record what /proc shows now, so that
        # `dev down` and `dev status` recognise the server by its pid file
        process.argv = cmdline(process.popen.pid)
        write_pid_file(process.pid_file, process.popen.pid, process.argv)
    return info


def _initdb(bins: Path, paths: PostgresPaths) -> None:
    argv = [
        str(bins / "initdb"),
        "--pgdata",
        str(paths.data),
        "--username",
        SUPERUSER,
        "--pwfile",
        str(paths.password),
        "--auth",
        "scram-sha-256",
        "--encoding",
        "UTF8",
        "--no-locale",
        "--no-sync",
        "--no-instructions",
    ]
    done = subprocess.run(as_server_user(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KlutchError(
            f"initdb failed (exit {done.returncode}):\n{done.stdout}{done.stderr}",
            f"check that {paths.root} is writable and PostgreSQL is installed in {bins}",
        )
    (paths.data / "pg_hba.conf").write_text(HBA)


def _harden(info: PostgresInfo) -> bool:
    """True once the superuser can log in over TCP; then no one else may connect to the
    maintenance databases (every tenant gets only its own database)."""
    import psycopg

    try:
        with psycopg.connect(
            host=info.host,
            port=info.port,
            user=info.superuser,
            password=info.password,
            dbname="postgres",
            connect_timeout=2,
            autocommit=True,
        ) as connection:
            connection.execute(
                "REVOKE CONNECT, TEMPORARY ON DATABASE postgres, template1 FROM PUBLIC"
            )
    except psycopg.OperationalError:
        return False
    return True
