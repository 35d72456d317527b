"""The HTTP API of ``xdex serve``: a FastAPI app over a :class:`~xdex.inference.Predictor`.

Endpoints (wire format of ``POST /predict``: ``{"texts": [...], "k": 10}`` in,
``{"predictions": [[{"id": ..., "text": ..., "score": ...}, ...], ...]}`` out, one list per text,
best first; ``id`` is the label's key):

* ``POST /predict``: rank labels for one or many texts;
* ``GET /labels/{id}``: a label's text;
* ``GET /health``: liveness and the number of labels;
* ``GET /metrics``: request counts per endpoint and ``/predict`` latency percentiles (ms) over the
  last ``LATENCY_WINDOW`` requests.

Requests are validated by their schema: an empty or blank text, ``k`` out of ``[1, MAX_K]``, more than
``MAX_TEXTS`` texts or a wrong type get a 422 answer that names the field. Needs the ``serve`` extra.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from typing import Annotated

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, StringConstraints

from xdex import __version__
from xdex.inference.predictor import Predictor

MAX_TEXTS = 1024  # texts per request
MAX_K = 1000  # labels per text
LATENCY_WINDOW = 10_000  # /predict latencies kept for the percentiles

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class PredictRequest(BaseModel):
    texts: list[Text] = Field(min_length=1, max_length=MAX_TEXTS, description="texts to label")
    k: int = Field(10, ge=1, le=MAX_K, description="labels per text")


class ScoredLabelOut(BaseModel):
    id: str
    text: str
    score: float


class PredictResponse(BaseModel):
    predictions: list[list[ScoredLabelOut]]


class LabelOut(BaseModel):
    id: str
    text: str


class RequestStats:
    """Request counts per endpoint and a bounded window of ``/predict`` latencies; safe across threads."""

    def __init__(self, window: int = LATENCY_WINDOW):
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._latencies: deque[float] = deque(maxlen=window)

    def record(self, endpoint: str) -> None:
        with self._lock:
            self._counts[endpoint] += 1

    def observe(self, seconds: float) -> None:
        """One ``/predict`` latency."""
        with self._lock:
            self._latencies.append(seconds * 1000.0)

    def snapshot(self) -> dict:
        with self._lock:
            counts, latencies = dict(self._counts), np.array(self._latencies)
        percentiles = {f"p{q}": float(np.percentile(latencies, q)) for q in (50, 95, 99)} if len(latencies) else {}
        return {"requests": counts, "predict_latency_ms": percentiles, "latency_window": len(latencies)}


def create_app(predictor: Predictor) -> FastAPI:
    """The API over ``predictor`` (its model is loaded once and shared by all requests)."""
    app = FastAPI(title="xdex", version=__version__, description="Extreme multi-label classification with label text")
    stats = RequestStats()
    model = predictor.model
    position = {key: i for i, key in enumerate(model.label_ids)}

    @app.middleware("http")
    async def count(request: Request, call_next):
        response = await call_next(request)
        route = request.scope.get("route")
        stats.record(getattr(route, "path", "unknown"))
        return response

    @app.post("/predict", response_model=PredictResponse)
    def predict(request: PredictRequest) -> PredictResponse:
        start = time.perf_counter()
        ranked = predictor.predict(request.texts, request.k)
        out = [[ScoredLabelOut(id=label.key, text=label.text, score=label.score) for label in labels]
               for labels in ranked]
        stats.observe(time.perf_counter() - start)
        return PredictResponse(predictions=out)

    @app.get("/labels/{label_id}", response_model=LabelOut)
    def label(label_id: str) -> LabelOut:
        if label_id not in position:
            raise HTTPException(status_code=404, detail=f"no label with id {label_id!r}")
        return LabelOut(id=label_id, text=model.label_texts[position[label_id]])

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "labels": predictor.n_labels, "version": __version__}

    @app.get("/metrics")
    def metrics() -> dict:
        return stats.snapshot()

    return app
