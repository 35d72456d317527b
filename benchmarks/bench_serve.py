"""Load test of `xdex serve` on the loopback interface: throughput and latency percentiles.

    python benchmarks/bench_serve.py MODEL_DIR --data DIR [--clients 1 4 16] [--requests 2000]
        [--seconds 60] [--k 10] [--update-docs]

Starts `xdex serve MODEL_DIR` on 127.0.0.1 in a subprocess, waits for /health, then for each client
count sends single-text `POST /predict` requests (texts taken in turn from the dataset's test split)
from that many threads, each on its own keep-alive connection, until `--requests` requests or
`--seconds` seconds. Reports requests/s, p50/p95/p99 latency in ms (client side, connection reuse
included) and the number of errors (any status other than 200 counts).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from docs_section import publish

log = logging.getLogger("bench_serve")
SECTION = "## Serving: latency and throughput of `xdex serve`"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: Path, port: int, timeout: float = 120.0) -> subprocess.Popen:
    """`xdex serve` in a subprocess, returned once /health answers."""
    command = [sys.executable, "-m", "xdex", "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
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


def load(url: str, texts: list[str], clients: int, requests: int, seconds: float, k: int) -> dict:
    """``clients`` threads share ``requests`` single-text requests; latencies in ms, errors counted."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    counter = iter(range(requests))
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def work(c: int) -> None:
        with httpx.Client(timeout=30.0) as session:
            while time.monotonic() < stop:
                with lock:
                    i = next(counter, None)
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
    all_ms = np.concatenate([np.array(x) for x in latencies])
    return {"clients": clients, "requests": len(all_ms), "errors": sum(errors), "rps": len(all_ms) / wall,
            **{f"p{q}": float(np.percentile(all_ms, q)) for q in (50, 95, 99)}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--data", required=True, help="dataset folder (or 'demo') whose test texts are sent")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=2000, help="requests per client count, at most")
    parser.add_argument("--seconds", type=float, default=60.0, help="time per client count, at most")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import xdex.data

    dataset = xdex.data.load(args.data)
    texts = (dataset.test or dataset.train).texts
    load_avg = os.getloadavg()[0]
    port = free_port()
    server = start_server(args.model_dir, port)
    try:
        url = f"http://127.0.0.1:{port}/predict"
        load(url, texts, 1, 50, 30.0, args.k)  # warm-up
        rows = []
        for clients in args.clients:
            rows.append(load(url, texts, clients, args.requests, args.seconds, args.k))
            log.info("%s", rows[-1])
    finally:
        server.terminate()
        server.wait(timeout=30)
    table = ["| clients | requests | errors | requests/s | p50 ms | p95 ms | p99 ms |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    table += [f"| {r['clients']} | {r['requests']} | {r['errors']} | {r['rps']:.0f} | {r['p50']:.2f} | "
              f"{r['p95']:.2f} | {r['p99']:.2f} |" for r in rows]
    command = shlex.join(["python", "benchmarks/bench_serve.py", *argv])
    section = "\n".join([
        SECTION, "", f"`{command}`", "",
        f"{os.cpu_count()} CPU cores ({platform.machine()}), Python {platform.python_version()}, 1-minute load "
        f"average {load_avg:.1f} at the start. Server and clients share the machine; one text per request, "
        f"k = {args.k}, texts of {dataset.name}'s test split in turn; latency measured by the client "
        "(keep-alive connections), after 50 warm-up requests.", "", *table, "",
    ])
    publish(section, args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
