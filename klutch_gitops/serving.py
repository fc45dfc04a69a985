"""HTTP serving with bounds on what a client may send, shared by the bind API and the reconciler.

uvicorn bounds the size of a request's line and headers (h11's incomplete-event limit) and the idle
time between requests (``timeout_keep_alive``), but not the time a client takes to send a request:
its keep-alive timer is cancelled by every byte received, so a client trickling headers or a body
holds a connection forever (Kludex/uvicorn#157 lists "--timeout-request-start" and
"--timeout-request-complete" as never built). An ASGI middleware cannot help with the headers,
because the app is called only once they are complete. So:

- ``DeadlineH11Protocol`` gives every request a deadline from its first byte (or the connection's
  start) until the request, body included, has been received; past it the connection is closed,
  with a 408 when no request has begun.
- ``LimitedBody`` refuses a body over a size with 413 before the app reads any of it: at once by
  ``Content-Length``, or as soon as a chunked body passes the limit.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_SECONDS = 10.0  # from a request's first byte to its last, body included
MAX_HEADER_BYTES = 16 * 1024  # request line and headers
MAX_BODY_BYTES = 1024 * 1024
# Connections and requests at once; past it uvicorn answers 503, so strangers holding requests
# open (each for up to REQUEST_SECONDS, each buffering up to its body cap) cannot exhaust memory.
MAX_CONCURRENCY = 256
TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 54\r\n\r\n"
    b"the request was not sent in time; send it all at once\n"
)
_RECEIVING = (h11.IDLE, h11.SEND_BODY)  # the client's states while a request is on its way
Receive = Callable[[], Awaitable[dict[str, Any]]]  # ASGI's receive and send
Send = Callable[[dict[str, Any]], Awaitable[None]]


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request (line, headers, body)."""

    request_seconds = REQUEST_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
            if self._deadline is None:
                self._arm()
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request's clock starts with its first byte; until then keep-alive's applies.
        if self.conn.their_state is h11.IDLE:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.request_seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state not in _RECEIVING:
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self.transport.write(TIMEOUT_RESPONSE)  # nothing of a request was parsed yet
        self.logger.warning("closed a connection whose request did not arrive in time")
        self.transport.close()


class LimitedBody:
    """ASGI middleware: a request body over ``max_bytes`` is a 413, and the app never sees it.

    The body is read here (at most ``max_bytes``) and handed on whole, so a refusal always comes
    before the app has parsed or acted on anything.
    """

    def __init__(self, app: Any, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        text = json.dumps(
            {
                "error": f"the request body is larger than {self.max_bytes} bytes",
                "fix": f"send at most {self.max_bytes} bytes",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(text)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": text})


def bounded_config(
    app: Any,
    listen: str,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    request_seconds: float = REQUEST_SECONDS,
    **options: Any,
) -> uvicorn.Config:
    """A uvicorn config for ``host:port`` with the request deadline, header and body limits.

    uvicorn's own logging config is never applied (``log_config=None``): it would give the
    ``uvicorn`` loggers a plain-text handler and stop them propagating, so their lines would
    bypass the root handler's JSON and scrubbing (``klutch_gitops.logs``)."""
    options.setdefault("log_config", None)
    host, _, port = listen.rpartition(":")
    protocol = type(
        "DeadlineH11Protocol", (DeadlineH11Protocol,), {"request_seconds": request_seconds}
    )
    return uvicorn.Config(
        LimitedBody(app, max_body_bytes),
        host=host or "127.0.0.1",
        port=int(port),
        http=protocol,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=5,
        limit_concurrency=MAX_CONCURRENCY,
        **options,
    )


def serve_in_thread(config: uvicorn.Config, name: str) -> uvicorn.Server:
    """Run ``config`` in a daemon thread; ``server.should_exit = True`` stops it."""
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, name=name, daemon=True).start()
    return server
