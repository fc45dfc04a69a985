"""The request deadline and body cap of ``klutch_gitops.serving``, on a real uvicorn over real
sockets: a slow-loris client trickling headers or a body is cut off, and an oversized body is a
413 before the app sees a byte of it."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI, Request

from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.serving import bounded_config, serve_in_thread

DEADLINE = 1.0
LIMIT = 1024


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int, list[int]]]:
    """A tiny app behind the bounded config; yields host, port and the body sizes it received."""
    received: list[int] = []
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        received.append(len(await request.body()))
        return {"bytes": received[-1]}

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    port = free_port()
    running = serve_in_thread(
        bounded_config(
            app,
            f"127.0.0.1:{port}",
            max_body_bytes=LIMIT,
            request_seconds=DEADLINE,
            access_log=False,
        ),
        "test-serving",
    )
    deadline = time.monotonic() + 10
    while not running.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield "127.0.0.1", port, received
    running.should_exit = True


def trickle(address: tuple[str, int], chunks: list[bytes], pause: float) -> tuple[bytes, float]:
    """Send ``chunks`` one by one with ``pause`` between; return what came back and when the
    server closed the connection (seconds after connecting)."""
    started = time.monotonic()
    with socket.create_connection(address, timeout=10) as sock:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
                time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while part := sock.recv(4096):
                answer += part
        except ConnectionResetError:
            pass
    return answer, time.monotonic() - started


def test_a_normal_request_is_served(server) -> None:
    host, port, _ = server
    answer = httpx.post(f"http://{host}:{port}/echo", content=b"x" * LIMIT)
    assert answer.status_code == 200
    assert answer.json() == {"bytes": LIMIT}


def test_trickled_headers_are_cut_off_with_a_408(server) -> None:
    host, port, _ = server
    header = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 40
    answer, elapsed = trickle((host, port), [header[i : i + 2] for i in range(0, 60, 2)], 0.1)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"the request was not sent in time" in answer
    assert DEADLINE <= elapsed < DEADLINE + 2  # not the 3 s the client wanted to take


def test_a_connection_that_sends_nothing_is_closed(server) -> None:
    host, port, _ = server
    answer, elapsed = trickle((host, port), [], 0)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert elapsed < DEADLINE + 2


def test_a_trickled_body_is_cut_off_and_never_reaches_the_app(server) -> None:
    host, port, received = server
    before = len(received)
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    answer, elapsed = trickle((host, port), [head] + [b"y"] * 100, 0.05)
    assert b"200 OK" not in answer
    assert elapsed < DEADLINE + 2  # 100 bytes at 20 per second would take 5 s
    assert len(received) == before


def test_keep_alive_between_requests_is_not_a_slow_request(server) -> None:
    """The deadline is per request: a client that sends whole requests slowly is served."""
    host, port, _ = server
    with httpx.Client() as http:
        for _ in range(2):
            assert http.get(f"http://{host}:{port}/healthz").status_code == 200
            time.sleep(DEADLINE * 1.5)  # longer than the deadline, shorter than keep-alive (5 s)
        assert http.get(f"http://{host}:{port}/healthz").status_code == 200


def test_a_declared_oversized_body_is_a_413_before_it_is_sent(server) -> None:
    host, port, received = server
    before = len(received)
    head = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {12 * 1024 * 1024}\r\n\r\n"
    answer, _ = trickle((host, port), [head.encode()], 0)
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 413 Request Entity Too Large"
    assert b'"the request body is larger than 1024 bytes"' in rest
    assert len(received) == before


def test_a_chunked_oversized_body_is_a_413_and_the_app_sees_none_of_it(server) -> None:
    host, port, received = server
    before = len(received)

    def chunks() -> Iterator[bytes]:
        for _ in range(8):
            yield b"z" * 512

    answer = httpx.post(f"http://{host}:{port}/echo", content=chunks())
    assert answer.status_code == 413
    assert answer.json()["fix"] == "send at most 1024 bytes"
    assert len(received) == before


@pytest.mark.parametrize("length", ["-1", "abc", "1e9"])
def test_a_malformed_content_length_is_refused(server, length: str) -> None:
    host, port, received = server
    before = len(received)
    head = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
    answer, _ = trickle((host, port), [head.encode()], 0)
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 413 ")), answer
    assert len(received) == before


def test_uvicorn_logs_through_the_root_handler() -> None:
    """Both servers' uvicorn lines must reach the root handler (JSON, scrubbed): uvicorn's
    default config, applied by ``uvicorn.Config``, would give its loggers a plain handler of
    their own and stop them propagating."""
    uvicorn_logger = logging.getLogger("uvicorn")
    saved = uvicorn_logger.propagate, list(uvicorn_logger.handlers)
    uvicorn_logger.propagate, uvicorn_logger.handlers = True, []
    try:
        bounded_config(FastAPI(), "127.0.0.1:0")
        assert uvicorn_logger.propagate
        assert uvicorn_logger.handlers == []
    finally:
        uvicorn_logger.propagate, uvicorn_logger.handlers = saved
