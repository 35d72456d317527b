"""`xdex serve`: the HTTP API of a trained model (FastAPI + uvicorn; the `serve` extra)."""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from xdex.cli.common import loaded_objects_frozen
from xdex.cli.evaluate import SEARCH_HELP

if TYPE_CHECKING:
    from xdex.inference.predictor import Predictor

logger = logging.getLogger(__name__)

# the defaults of xdex.serving.Limits (and BATCH_WAIT), which needs the serve extra to be imported
MAX_BODY_BYTES, MAX_TEXT_CHARS, MAX_TEXTS = 4 * 1024 * 1024, 10_000, 1024
TIMEOUT_READ, TIMEOUT_KEEP_ALIVE, LIMIT_CONCURRENCY = 20.0, 5.0, 128
BATCH_WAIT = 0.001


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_cmd(
        model_dir: Path = typer.Argument(..., help="Model directory written by `xdex train`."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
        port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
        search: str | None = typer.Option(None, "--search", help=SEARCH_HELP),
        read_only: bool = typer.Option(
            False, "--read-only", help="Refuse POST /labels (403), so the model directory is never written."),
        token_file: Path | None = typer.Option(
            None, "--token-file",
            help="File holding the token that POST /labels needs (Authorization: Bearer <token>; 401 without). "
                 "Default: the XDEX_SERVE_TOKEN environment variable; neither: any client may add labels."),
        max_body_bytes: int = typer.Option(
            MAX_BODY_BYTES, "--max-body-bytes", min=1, help="Largest request body (413 beyond)."),
        max_text_chars: int = typer.Option(
            MAX_TEXT_CHARS, "--max-text-chars", min=1,
            help="Longest text in characters (422 beyond); the encoder reads its first max_length tokens."),
        max_texts: int = typer.Option(MAX_TEXTS, "--max-texts", min=1, help="Most texts in one request (422 beyond)."),
        timeout_read: float = typer.Option(
            TIMEOUT_READ, "--timeout-read", min=0.1,
            help="Seconds a client has to send a request's head (else the connection is closed), then its body "
                 "(else 408)."),
        timeout_keep_alive: float = typer.Option(
            TIMEOUT_KEEP_ALIVE, "--timeout-keep-alive", min=0.1, help="Seconds before an idle connection is closed."),
        limit_concurrency: int = typer.Option(
            LIMIT_CONCURRENCY, "--limit-concurrency", min=1,
            help="Most connections and requests at once (503 beyond)."),
        batch_wait: float = typer.Option(
            BATCH_WAIT, "--batch-wait", min=0.0, max=1.0,
            help="Seconds a model call waits for more requests when the previous call answered several (a busy "
                 "server); 0: never. A lone client never waits."),
        access_log: bool = typer.Option(
            False, "--access-log", help="Log a line per request (off by default: GET /metrics counts requests)."),
    ) -> None:
        """Serve POST /predict, POST /labels, GET /labels/{id}, GET /health, GET /metrics (Prometheus) and GET
        /stats (JSON) (OpenAPI schema at /docs). Labels added with POST /labels are saved in MODEL_DIR
        (added_labels.npz) and kept on restart. One server at a time adds labels to a model directory: a second
        one serves read-only, with a warning. See docs/serving.md, "Security", for what is exposed and how to put
        the server behind a proxy."""
        try:
            from xdex.serving import TOKEN_ENV, Limits, check_token, create_app, make_server, read_token
        except ImportError as e:
            raise ValueError(f"`xdex serve` needs the serve extra: pip install 'xdex[serve]' ({e})") from None
        from xdex.inference.predictor import Predictor

        limits = Limits(max_body_bytes=max_body_bytes, max_text_chars=max_text_chars, max_texts=max_texts,
                        timeout_read=timeout_read, timeout_keep_alive=timeout_keep_alive,
                        limit_concurrency=limit_concurrency)
        token = None
        if token_file is not None:
            token = read_token(token_file)
        elif os.environ.get(TOKEN_ENV) is not None:
            token = os.environ[TOKEN_ENV].strip()
            check_token(token, f"the token in ${TOKEN_ENV}")
        predictor = Predictor(model_dir, search=search, read_only=read_only)
        _serving_threads(predictor)
        logger.info("compiled loops ready in %.1f s (built at a first start, then read from numba's cache)",
                    predictor.warm_up())
        app_ = create_app(predictor, read_only=read_only, limits=limits, token=token, batch_wait=batch_wait)
        if predictor.is_writer and token is None and not _loopback(host):
            logger.warning("any client that reaches %s can add labels to %s: give a token (--token-file or $%s) or "
                           "--read-only", host, model_dir, TOKEN_ENV)
        mode = " (read-only)" if not predictor.is_writer else " (POST /labels needs the token)" if token else ""
        logger.info("serving %s on http://%s:%d%s", model_dir, host, port, mode)
        with loaded_objects_frozen():
            make_server(app_, host=host, port=port, limits=limits, access_log=access_log).run()


def _serving_threads(predictor: Predictor) -> None:
    """One intra-op thread for a model with a bag-of-embeddings encoder, as its training steps get
    (xdex/train/threads.py): the server's calls rank a few texts each, and a second OpenMP thread waiting for a core
    that the event loop or the clients hold costs more than it shares. Except over an exact index large enough
    that its scan of the labels is split between threads (``SPLIT_FROM_ITEMS`` labels): there the scan is most of
    a call, and every core halves it (docs/benchmarks.md, "Serving"). ``OMP_NUM_THREADS`` set: unchanged."""
    import torch

    from xdex.index.exact import ExactIndex
    from xdex.index.quantized import SPLIT_FROM_ITEMS
    from xdex.train.threads import step_threads

    threads = step_threads(predictor.model.net.encoder, torch.device("cpu"))
    index = predictor.model.index
    if threads is not None and isinstance(index, ExactIndex) and len(index) >= SPLIT_FROM_ITEMS:
        logger.info("the model's %d labels are searched on %d threads (OMP_NUM_THREADS sets another count)",
                    len(index), torch.get_num_threads())
    elif threads is not None:
        torch.set_num_threads(threads)
        logger.info("the model runs on %d intra-op thread(s) (OMP_NUM_THREADS sets another count)", threads)


def _loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
