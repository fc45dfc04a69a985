"""A real HTTPS Git server for tests: git's own ``git http-backend`` (smart HTTP, fetch and push)
behind TLS on a loopback port, serving the bare repositories under one directory.

Tenants may register only https:// and ssh:// repositories, so tests that bind a repository use
this server instead of ``file://``. Its certificate comes from a CA of its own (the local stack's
PKI helpers); the test process trusts that CA the way a platform team trusts a private forge's CA
in production: git's ``GIT_SSL_CAINFO`` (git-config(1), http.sslCAInfo) in the environment of the
reconciler, which in-process reconcilers and spawned processes alike inherit.

http-backend is run as a CGI per request, as git-http-backend(1) describes: GIT_PROJECT_ROOT,
GIT_HTTP_EXPORT_ALL, and ``http.receivepack`` to allow pushes without an authenticated user.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from klutch_gitops.dev.localstack.pki import issue, new_ca

CHUNK = 64 * 1024


@dataclass(frozen=True)
class GitServer:
    """Where the server keeps its repositories and how to reach them."""

    root: Path  # the bare repositories, <root>/<name>.git
    base_url: str  # https://127.0.0.1:PORT
    ca_file: Path  # the CA that signed the server's certificate

    def create(self, name: str | None = None) -> tuple[str, Path]:
        """A new empty bare repository (branch main): its https URL and its directory."""
        name = name or f"repo-{uuid.uuid4().hex[:8]}"
        bare = self.root / f"{name}.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        return self.url(name), bare

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}.git"

    def url_of(self, bare: Path) -> str:
        """The https URL of a bare repository made under ``root`` by other means."""
        return f"{self.base_url}/{bare.relative_to(self.root).as_posix()}"


class _Handler(BaseHTTPRequestHandler):
    """Hands each request to ``git http-backend`` and relays its CGI answer."""

    protocol_version = "HTTP/1.1"
    root: Path

    def do_GET(self) -> None:
        self._backend(b"")

    def do_POST(self) -> None:
        self._backend(self._body())

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _backend(self, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.receivepack",
            "GIT_CONFIG_VALUE_0": "true",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
        }
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


class _Server(ThreadingHTTPServer):
    """Quiet about clients that hang up mid-answer (a controller stopping, go-git dropping a
    connection it no longer needs); anything else is printed as socketserver does."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


@contextmanager
def running_git_server(root: Path) -> Iterator[GitServer]:
    """Serve ``root`` over HTTPS on a free loopback port until the block ends."""
    root.mkdir(parents=True, exist_ok=True)
    ca = new_ca("klutch-gitops test forge CA")
    leaf = issue(ca, "127.0.0.1", sans=("127.0.0.1", "localhost"), server=True)
    certs = Path(tempfile.mkdtemp(prefix="klutch-gitserver-"))
    (certs / "ca.crt").write_bytes(ca.cert_pem)
    (certs / "tls.crt").write_bytes(leaf.cert_pem)
    (certs / "tls.key").write_bytes(leaf.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    handler = type("Handler", (_Handler,), {"root": root})
    server = _Server(("127.0.0.1", 0), handler)
    # The handshake happens in the request's thread, so one slow client never blocks accept().
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    thread = threading.Thread(target=server.serve_forever, name="git-server", daemon=True)
    thread.start()
    try:
        yield GitServer(root, f"https://127.0.0.1:{server.server_address[1]}", certs / "ca.crt")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        shutil.rmtree(certs, ignore_errors=True)
