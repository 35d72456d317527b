"""Load test of `xdex serve` on the loopback interface: throughput and latency percentiles.

    python -m benchmarks.bench_serve MODEL_DIR --data DIR [--clients 1 4 16] [--requests 2000]
        [--seconds 60] [--k 10] [--additions 200] [--client raw|httpx] [--http-only] [--update-docs]

Starts `xdex serve MODEL_DIR` on 127.0.0.1 in a subprocess, waits for /health, then for each client
count sends single-text `POST /predict` requests (texts taken in turn from the dataset's test split)
from that many clients, each on its own keep-alive connection, until `--requests` requests or
`--seconds` seconds. Reports requests/s, p50/p95/p99 latency in ms (client side, connection reuse
included), the number of errors (any status other than 200 counts), and the CPU time per request of the
server process (all its threads; Linux) and of the clients: on a machine shared with other work, wall-clock
figures move with that work, the CPU a request costs much less.

``--http-only`` measures the HTTP path alone: the server is the app of `xdex serve` with its uvicorn settings
(``xdex.serving.create_app`` and ``make_server``, read-only, the loaded objects frozen as `xdex serve` freezes
them) over the model whose ``predict`` answers every text
with one ranking computed at start, so a request costs what parsing, checking, batching, counting and writing
it cost, without the model's work.

The clients share the machine with the server, so their own cost is part of what is measured. ``--client raw``
(the default) runs them as coroutines of one event loop that write each request's bytes and read the whole
answer (status line, headers, ``Content-Length`` bytes of body) from the socket: a full HTTP/1.1 round trip,
for about a tenth of the CPU time of an httpx client (``--client httpx``: one thread and ``httpx.Client`` per
client), which took about 1 ms of CPU per request: half a core of two at 500 requests/s.

Then, on a copy of the model directory (the user's is never changed), one client adds ``--additions``
labels one `POST /labels` request at a time while 4 clients keep predicting; reported: the latency of an
addition (the label's embedding and the atomic save included), the prediction latency meanwhile, the
errors, and whether every added label is served afterwards (`GET /health` count and `GET /labels/{id}`),
also by a server restarted on the copy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np

from benchmarks.harness import Goal, command_line, goals_line, load_average, machine_line, publish

log = logging.getLogger("bench_serve")
MODULE = "benchmarks.bench_serve"
SECTION = "## Serving: latency and throughput of `xdex serve`"
GOAL_ONE_CLIENT_P50_MS = 3.0  # one text on loopback, one client
GOAL_CLIENTS = 16
GOAL_REQUESTS_PER_S = 1000.0  # with GOAL_CLIENTS clients on 2 cores, no errors
CLIENTS = {"raw": "the clients coroutines of one event loop on raw sockets",
           "httpx": "one thread and httpx client per client"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --http-only: the server of `xdex serve` over a model that answers every text with one ranking
HTTP_ONLY_SERVER = """
import sys
from xdex.inference.predictor import Predictor
from xdex.serving import create_app, make_server
predictor = Predictor(sys.argv[1], read_only=True)
fixed = predictor.predict(["a text"], int(sys.argv[3]))[0]
predictor.predict = lambda texts, k: [fixed[:k] for _ in texts]
app = create_app(predictor, read_only=True)
try:  # as `xdex serve` does, where it does
    from xdex.cli.serve import _freeze_loaded_objects
    _freeze_loaded_objects()
except ImportError:
    pass
make_server(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="info").run()
"""


def start_server(model_dir: Path, port: int, timeout: float = 120.0, http_only_k: int | None = None
                 ) -> subprocess.Popen:
    """`xdex serve` in a subprocess, returned once /health answers; with ``http_only_k``, the same app over a
    model that answers every text with one ranking of that many labels (module docstring)."""
    command = [sys.executable, "-m", "xdex", "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    if http_only_k is not None:
        command = [sys.executable, "-c", HTTP_ONLY_SERVER, str(model_dir), str(port), str(http_only_k)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server stopped with exit code {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.terminate()
    raise RuntimeError(f"the server did not answer /health within {timeout:.0f} s")


def drive(url: str, texts: list[str], clients: int, k: int, next_request: Callable[[], int | None]) -> dict:
    """``clients`` threads, each on its own keep-alive connection, send single-text `POST /predict` requests
    (text ``i`` of ``texts``, cyclically) for as long as ``next_request()`` gives an ``i``; latencies in ms,
    errors (any status other than 200) counted."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    lock = threading.Lock()

    def work(c: int) -> None:
        with httpx.Client(timeout=30.0) as session:
            while True:
                with lock:
                    i = next_request()
                if i is None:
                    return
                start = time.perf_counter()
                try:
                    ok = session.post(url, json={"texts": [texts[i % len(texts)]], "k": k}).status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies[c].append((time.perf_counter() - start) * 1000.0)
                errors[c] += not ok

    threads = [threading.Thread(target=work, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    all_ms = [x for row in latencies for x in row]
    return {"clients": clients, "requests": len(all_ms), "errors": sum(errors), "rps": len(all_ms) / wall,
            **percentiles(all_ms)}


def drive_raw(url: str, texts: list[str], clients: int, k: int, next_request: Callable[[], int | None]) -> dict:
    """As :func:`drive`, with ``clients`` coroutines of one event loop, each on its own keep-alive connection, that
    write each request's bytes and read its whole answer: the same round trips for a fraction of the client's CPU
    (module docstring). A connection that fails or that the server closes is opened again for the next request."""
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    latencies: list[float] = []
    errors = 0

    async def ask(streams: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes) -> tuple[int, bool]:
        """The answer's status and whether the server keeps the connection open."""
        reader, writer = streams
        writer.write(request)
        lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = dict(line.lower().split(b":", 1) for line in lines[1:] if b":" in line)
        if b"content-length" not in headers:  # every answer of xdex serve has one
            raise ValueError("an answer without Content-Length")
        await reader.readexactly(int(headers[b"content-length"]))
        return status, headers.get(b"connection", b"").strip() != b"close"

    async def client() -> None:
        nonlocal errors
        streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while (i := next_request()) is not None:
            body = json.dumps({"texts": [texts[i % len(texts)]], "k": k}).encode()
            request = f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
            start = time.perf_counter()
            try:
                if streams is None:
                    streams = await asyncio.open_connection(host, port)
                status, keep = await ask(streams, request)
            except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                status, keep = 0, False
            latencies.append((time.perf_counter() - start) * 1000.0)
            errors += status != 200
            if not keep and streams is not None:
                streams[1].close()
                streams = None
        if streams is not None:
            streams[1].close()

    async def run() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - t0

    wall = asyncio.run(run())
    return {"clients": clients, "requests": len(latencies), "errors": errors, "rps": len(latencies) / wall,
            **percentiles(latencies)}


def load(url: str, texts: list[str], clients: int, requests: int, seconds: float, k: int,
         client: str = "raw") -> dict:
    """``clients`` clients (``raw`` or ``httpx``) share ``requests`` single-text requests, for at most
    ``seconds``."""
    counter = iter(range(requests))
    stop = time.monotonic() + seconds
    run = drive_raw if client == "raw" else drive
    return run(url, texts, clients, k, lambda: next(counter, None) if time.monotonic() < stop else None)


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system, all threads) that process ``pid`` has used so far; NaN where /proc is not."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def measured(server_pid: int, run: Callable[[], dict]) -> dict:
    """``run()``'s figures, with the CPU ms per request of the server process and of this one (the clients)."""
    server, client = process_cpu(server_pid), time.process_time()
    row = run()
    n = max(row["requests"], 1)
    return {**row, "server_cpu_ms": (process_cpu(server_pid) - server) * 1000.0 / n,
            "client_cpu_ms": (time.process_time() - client) * 1000.0 / n}


def percentiles(ms: list[float]) -> dict[str, float]:
    return {f"p{q}": float(np.percentile(ms, q)) if ms else float("nan") for q in (50, 95, 99)}


def add_while_predicting(base: str, texts: list[str], additions: int, k: int, predictors: int = 4) -> dict:
    """One client adds ``additions`` labels (one per request) while ``predictors`` clients predict until it is
    done; latencies in ms, errors counted, the added ids returned."""
    added: list[str] = []
    add_ms: list[float] = []
    add_errors = 0
    done = threading.Event()
    counter = iter(range(10**9))
    predicted: dict = {}
    background = threading.Thread(target=lambda: predicted.update(
        drive(f"{base}/predict", texts, predictors, k, lambda: None if done.is_set() else next(counter))))
    background.start()
    with httpx.Client(timeout=30.0) as session:
        for i in range(additions):
            start = time.perf_counter()
            try:
                reply = session.post(f"{base}/labels", json={"texts": [f"{texts[i % len(texts)]} {i}"]})
                ok = reply.status_code == 201
                added += reply.json()["ids"] if ok else []
            except httpx.HTTPError:
                ok = False
            add_ms.append((time.perf_counter() - start) * 1000.0)
            add_errors += not ok
    done.set()
    background.join()
    return {"additions": len(add_ms), "add_errors": add_errors, "add": percentiles(add_ms), "ids": added,
            "predictions": predicted["requests"], "predict_errors": predicted["errors"],
            "predict": {q: predicted[q] for q in ("p50", "p95", "p99")}}


def served(base: str, ids: list[str], expected: int) -> bool:
    """Whether the server counts ``expected`` labels and knows every id of ``ids``."""
    with httpx.Client(timeout=30.0) as session:
        if session.get(f"{base}/health").json()["labels"] != expected:
            return False
        return all(session.get(f"{base}/labels/{i}").status_code == 200 for i in ids)


def addition_lines(result: dict, n_labels: int, restart_ok: bool) -> list[str]:
    a, p = result["add"], result["predict"]
    return [
        f"Adding labels while predicting (on a copy of the model directory): one client adds {result['additions']} "
        "labels, one `POST /labels` request each, while 4 clients predict single texts.", "",
        "| requests | count | errors | p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
        f"| `POST /labels` (1 label) | {result['additions']} | {result['add_errors']} | {a['p50']:.2f} | "
        f"{a['p95']:.2f} | {a['p99']:.2f} |",
        f"| `POST /predict` meanwhile (4 clients) | {result['predictions']} | {result['predict_errors']} | "
        f"{p['p50']:.2f} | {p['p95']:.2f} | {p['p99']:.2f} |", "",
        f"Afterwards the server counted {n_labels + len(result['ids'])} labels and answered `GET /labels/{{id}}` "
        f"for every added id: {'yes' if result['served'] else 'NO'}; after a restart on the same folder: "
        f"{'yes' if restart_ok else 'NO'}.", "",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--data", required=True, help="dataset folder (or 'demo') whose test texts are sent")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=2000, help="requests per client count, at most")
    parser.add_argument("--seconds", type=float, default=60.0, help="time per client count, at most")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--additions", type=int, default=200,
                        help="labels added while predicting, on a copy of the model (0: skip)")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw",
                        help="load-test client of the prediction table (module docstring)")
    parser.add_argument("--http-only", action="store_true",
                        help="the HTTP path alone: a model that answers every text with one ranking (module docstring)")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section")
    args = parser.parse_args(argv)
    if args.http_only and args.update_docs:
        parser.error("--http-only measures no model: its table does not replace the section")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request: the clients share the cores
    import xdex.data

    dataset = xdex.data.load(args.data)
    texts = (dataset.test or dataset.train).texts
    load_avg = load_average()
    port = free_port()
    server = start_server(args.model_dir, port, http_only_k=args.k if args.http_only else None)
    try:
        url = f"http://127.0.0.1:{port}/predict"
        load(url, texts, 1, 50, 30.0, args.k, args.client)  # warm-up
        rows = []
        for clients in args.clients:
            rows.append(measured(server.pid, lambda c=clients: load(url, texts, c, args.requests, args.seconds, args.k,
                                                                     args.client)))
            log.info("%s", rows[-1])
    finally:
        server.terminate()
        server.wait(timeout=30)
    extra: list[str] = []
    if args.additions > 0 and not args.http_only:
        extra = additions_on_a_copy(args.model_dir, texts, args.additions, args.k)
    table = ["| clients | requests | errors | requests/s | p50 ms | p95 ms | p99 ms | server CPU ms/request | "
             "client CPU ms/request |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    table += [f"| {r['clients']} | {r['requests']} | {r['errors']} | {r['rps']:.0f} | {r['p50']:.2f} | "
              f"{r['p95']:.2f} | {r['p99']:.2f} | {r['server_cpu_ms']:.2f} | {r['client_cpu_ms']:.2f} |" for r in rows]
    command = command_line(MODULE, argv)
    section = "\n".join([
        SECTION, "", f"`{command}`", "",
        f"{machine_line([load_avg], torch_note=None)}. Server and clients share the machine; one text per request, "
        f"k = {args.k}, texts of {dataset.name}'s test split in turn; latency measured by the client "
        f"(keep-alive connections, {CLIENTS[args.client]}), after 50 warm-up requests."
        + (" The HTTP path alone (`--http-only`): every text answered with one fixed ranking, no model work."
           if args.http_only else ""), "", *table, "",
        *([] if args.http_only else [goals_line(serving_goals(rows)), ""]), *extra,
    ])
    publish(section, args.update_docs)
    return 0


def serving_goals(rows: list[dict]) -> list[Goal]:
    """The goals of `xdex serve` against the rows of one run: one client's p50, the throughput of
    :data:`GOAL_CLIENTS` clients, and no error in any row."""
    by_clients = {row["clients"]: row for row in rows}
    one, many = by_clients.get(1), by_clients.get(GOAL_CLIENTS)
    errors = sum(row["errors"] for row in rows)
    return [
        (f"one client p50 ≤ {GOAL_ONE_CLIENT_P50_MS:g} ms", None if one is None else f"{one['p50']:.2f} ms",
         one is not None and one["p50"] <= GOAL_ONE_CLIENT_P50_MS),
        (f"{GOAL_CLIENTS} clients ≥ {GOAL_REQUESTS_PER_S:,.0f} requests/s",
         None if many is None else f"{many['rps']:,.0f}", many is not None and many["rps"] >= GOAL_REQUESTS_PER_S),
        ("no errors", f"{errors} errors", errors == 0),
    ]


def additions_on_a_copy(model_dir: Path, texts: list[str], additions: int, k: int) -> list[str]:
    """The add-while-predicting run on a temporary copy of ``model_dir``, and a restart on it; the docs lines."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(shutil.copytree(model_dir, Path(tmp) / "model", ignore=shutil.ignore_patterns("training")))
        port = free_port()
        server = start_server(copy, port)
        base = f"http://127.0.0.1:{port}"
        try:
            n_labels = httpx.get(f"{base}/health").json()["labels"]
            result = add_while_predicting(base, texts, additions, k)
            result["served"] = served(base, result["ids"], n_labels + len(result["ids"]))
            log.info("%s", {key: value for key, value in result.items() if key != "ids"})
        finally:
            server.terminate()
            server.wait(timeout=30)
        server = start_server(copy, port)
        try:
            restart_ok = served(base, result["ids"], n_labels + len(result["ids"]))
        finally:
            server.terminate()
            server.wait(timeout=30)
    return addition_lines(result, n_labels, restart_ok)


if __name__ == "__main__":
    sys.exit(main())
