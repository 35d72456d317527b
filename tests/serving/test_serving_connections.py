"""A real `xdex serve` (uvicorn on 127.0.0.1, a free port) refuses oversized bodies before reading them and
closes idle and slow connections. Deadlines in these tests are short (about a second) and their bounds
generous (30 s), so they pass on a slow machine and fail only when a connection is never closed."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from xdex.serving import Limits, create_app, make_server

PATIENCE = 30.0  # seconds a test waits for what the server should do in about one


@contextlib.contextmanager
def running(predictor, limits: Limits):
    """The address of a server of ``predictor`` with ``limits``, running in a thread."""
    server = make_server(create_app(predictor, read_only=True, limits=limits), limits=limits, log_level="warning")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + PATIENCE
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(PATIENCE)
        sock.close()


def connect(address) -> socket.socket:
    conn = socket.create_connection(address, timeout=PATIENCE)
    return conn


def read_until_closed(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails the test)."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_a_large_content_length_gets_413_without_sending_the_body(predictor):
    with running(predictor, Limits(max_body_bytes=10_000)) as address, connect(address) as conn:
        conn.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n")
        response = read_until_closed(conn)  # answered and closed though not one byte of the body was sent
        assert status(response) == 413 and b"larger than 10000 bytes" in response


def test_a_chunked_body_is_cut_off_once_past_the_limit(predictor):
    with running(predictor, Limits(max_body_bytes=10_000)) as address, connect(address) as conn:
        conn.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 4000
        for _ in range(3):  # 12,000 bytes, and no last chunk: the body is never complete
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        response = read_until_closed(conn)
        assert status(response) == 413


def test_a_body_that_does_not_arrive_gets_408(predictor):
    with running(predictor, Limits(timeout_read=1.0)) as address, connect(address) as conn:
        conn.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"texts\": ")
        response = read_until_closed(conn)
        assert status(response) == 408 and b"did not arrive within 1 s" in response


def test_idle_connections_are_closed(predictor):
    with running(predictor, Limits(timeout_keep_alive=1.0)) as address:
        with connect(address) as conn:  # opened, never used
            assert read_until_closed(conn) == b""
        with connect(address) as conn:  # idle after an answer
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            response = read_until_closed(conn)
            assert status(response) == 200 and json.loads(response.split(b"\r\n\r\n", 1)[1])["status"] == "ok"


def test_a_request_head_sent_byte_by_byte_is_cut_off(predictor):
    """The keep-alive timer stops at the first byte; the head's own deadline closes the connection."""
    with running(predictor, Limits(timeout_keep_alive=1.0, timeout_read=1.5)) as address, connect(address) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        conn.settimeout(0.2)
        deadline = time.monotonic() + PATIENCE
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                conn.sendall(b"X")  # a header name that never ends
                closed = conn.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:  # reset by the server
                closed = True
        assert closed


def test_connections_beyond_the_limit_get_503(predictor):
    with running(predictor, Limits(limit_concurrency=2, timeout_keep_alive=PATIENCE)) as address:
        with connect(address), connect(address) as second:
            time.sleep(0.2)  # both accepted
            second.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert status(read_until_closed(second)) == 503
        with connect(address) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert status(read_until_closed(conn)) == 200
