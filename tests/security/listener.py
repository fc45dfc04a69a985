"""A loopback TCP server of the attacker's that records every connection and its first bytes.

Attacks that would make our processes reach out (a kubeconfig's server or proxy, a payload's forge
API) point at it; a test asserts that it got nothing. It speaks no protocol, so a TLS handshake or
an HTTP request is recorded all the same.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Listener:
    port: int
    connections: list[bytes] = field(default_factory=list)


class _Recording(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(1.0)
        try:
            data = self.request.recv(65536)
        except OSError:
            data = b""
        self.server.connections.append(data)  # type: ignore[attr-defined]


@contextmanager
def listening() -> Iterator[Listener]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Recording)
    server.daemon_threads = True
    found = Listener(server.server_address[1])
    server.connections = found.connections  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
