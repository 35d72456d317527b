"""A real `xdex serve` (uvicorn on 127.0.0.1, a free port) refuses oversized bodies and heads before reading them
and closes idle and slow connections, with either HTTP parser (httptools, the default, and h11). Deadlines in
these tests are short (about a second) and their bounds generous (30 s), so they pass on a slow machine and fail
only when a connection is never closed."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from xdex.serving import MAX_HEAD_BYTES, Limits, create_app, make_server

PATIENCE = 30.0  # seconds a test waits for what the server should do in about one


@pytest.fixture(params=["httptools", "h11"])
def http(request):
    if request.param == "httptools":
        pytest.importorskip("httptools")
    return request.param


@contextlib.contextmanager
def running(predictor, limits: Limits, http: str = "auto", **options):
    """The address of a server of ``predictor`` with ``limits``, the HTTP parser ``http`` and other
    :func:`make_server` ``options``, running in a thread."""
    options = {"log_level": "warning", **options}
    server = make_server(create_app(predictor, read_only=True, limits=limits), limits=limits, http=http, **options)
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


def test_a_large_content_length_gets_413_without_sending_the_body(predictor, http):
    with running(predictor, Limits(max_body_bytes=10_000), http) as address, connect(address) as conn:
        conn.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n")
        response = read_until_closed(conn)  # answered and closed though not one byte of the body was sent
        assert status(response) == 413 and b"larger than 10000 bytes" in response


def test_a_chunked_body_is_cut_off_once_past_the_limit(predictor, http):
    with running(predictor, Limits(max_body_bytes=10_000), http) as address, connect(address) as conn:
        conn.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 4000
        for _ in range(3):  # 12,000 bytes, and no last chunk: the body is never complete
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        response = read_until_closed(conn)
        assert status(response) == 413


def test_a_body_that_does_not_arrive_gets_408(predictor, http):
    with running(predictor, Limits(timeout_read=1.0), http) as address, connect(address) as conn:
        conn.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"texts\": ")
        response = read_until_closed(conn)
        assert status(response) == 408 and b"did not arrive within 1 s" in response


def test_idle_connections_are_closed(predictor, http):
    with running(predictor, Limits(timeout_keep_alive=1.0), http) as address:
        with connect(address) as conn:  # opened, never used
            assert read_until_closed(conn) == b""
        with connect(address) as conn:  # idle after an answer
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            response = read_until_closed(conn)
            assert status(response) == 200 and json.loads(response.split(b"\r\n\r\n", 1)[1])["status"] == "ok"


def test_a_request_head_sent_byte_by_byte_is_cut_off(predictor, http):
    """The keep-alive timer stops at the first byte; the head's own deadline closes the connection."""
    limits = Limits(timeout_keep_alive=1.0, timeout_read=1.5)
    with running(predictor, limits, http) as address, connect(address) as conn:
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


def test_connections_beyond_the_limit_get_503(predictor, http):
    with running(predictor, Limits(limit_concurrency=2, timeout_keep_alive=PATIENCE), http) as address:
        with connect(address), connect(address) as second:
            time.sleep(0.2)  # both accepted
            second.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert status(read_until_closed(second)) == 503
        with connect(address) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert status(read_until_closed(conn)) == 200


def test_a_request_head_over_the_limit_gets_400(predictor, http):
    """Answered once the bytes received pass the limit, though the head is not complete."""
    with running(predictor, Limits(), http) as address, connect(address) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n" % (b"a" * MAX_HEAD_BYTES))
        assert status(read_until_closed(conn)) == 400
    with running(predictor, Limits(), http) as address, connect(address) as conn:  # a head just below it is served
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"X-Pad: %s\r\n\r\n" % (b"a" * (MAX_HEAD_BYTES - 200)))
        assert status(read_until_closed(conn)) == 200


def test_predictions_over_a_kept_connection(predictor, http):
    """Requests one after another on one connection, answered in order with their own rankings."""
    with running(predictor, Limits(), http) as address, connect(address) as conn:
        answers = []
        for k in (1, 2, 3):
            body = json.dumps({"texts": ["parser"], "k": k}).encode()
            conn.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(1)
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            data = b""
            while len(data) < length:
                data += conn.recv(length - len(data))
            answers.append((status(head), json.loads(data)["predictions"]))
        expected = [[label.key for label in predictor.predict(["parser"], k)[0]] for k in (1, 2, 3)]
        assert [code for code, _ in answers] == [200, 200, 200]
        assert [[label["id"] for label in ranked[0]] for _, ranked in answers] == expected


@pytest.mark.parametrize("access_log", [False, True])
def test_a_line_per_request_only_when_asked(predictor, capsys, access_log):
    options = {"log_level": "info"} | ({"access_log": True} if access_log else {})
    with running(predictor, Limits(), **options) as address:
        conn = connect(address)
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_until_closed(conn).startswith(b"HTTP/1.1 200")
    out = capsys.readouterr()
    assert ('"GET /health HTTP/1.1" 200' in out.out + out.err) == access_log


def test_an_unknown_http_parser_is_refused():
    with pytest.raises(ValueError, match="http must be one of"):
        make_server(object(), http="h2")


def test_without_httptools_auto_takes_h11(monkeypatch):
    import sys

    from xdex.serving import _deadline_protocol

    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)  # as if not installed
    assert _deadline_protocol(1.0).__name__ == "DeadlineH11Protocol"
    with pytest.raises(ValueError, match="needs the httptools package"):
        _deadline_protocol(1.0, "httptools")
