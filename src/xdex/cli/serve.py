"""`xdex serve`: the HTTP API of a trained model (FastAPI + uvicorn; the `serve` extra)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

from xdex.cli.evaluate import SEARCH_HELP

logger = logging.getLogger(__name__)


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_cmd(
        model_dir: Path = typer.Argument(..., help="Model directory written by `xdex train`."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
        port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
        search: Optional[str] = typer.Option(None, "--search", help=SEARCH_HELP),
        read_only: bool = typer.Option(
            False, "--read-only", help="Refuse POST /labels (403), so the model directory is never written."),
    ) -> None:
        """Serve POST /predict, POST /labels, GET /labels/{id}, GET /health and GET /metrics (OpenAPI schema at
        /docs). Labels added with POST /labels are saved in MODEL_DIR (added_labels.npz) and kept on restart;
        only one server should add labels to a model directory."""
        try:
            import uvicorn

            from xdex.serving import create_app
        except ImportError as e:
            raise ValueError(f"`xdex serve` needs the serve extra: pip install 'xdex[serve]' ({e})") from None
        from xdex.inference.predictor import Predictor

        app_ = create_app(Predictor(model_dir, search=search), read_only=read_only)
        logger.info("serving %s on http://%s:%d%s", model_dir, host, port, " (read-only)" if read_only else "")
        uvicorn.run(app_, host=host, port=port, log_level="info")
