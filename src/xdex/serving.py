"""The HTTP API of ``xdex serve``: a FastAPI app over a :class:`~xdex.inference.Predictor`.

Endpoints (wire format of ``POST /predict``: ``{"texts": [...], "k": 10}`` in,
``{"predictions": [[{"id": ..., "text": ..., "score": ...}, ...], ...]}`` out, one list per text,
best first; ``id`` is the label's key):

* ``POST /predict``: rank labels for one or many texts;
* ``POST /labels``: add labels by their texts (zero-shot): ``{"texts": [...], "ids": [...]}`` in (``ids``
  optional; generated as ``added-<row>`` when left out), ``{"ids": [...]}`` out with status 201. The labels
  are saved in the model directory, then searchable at once. A taken or repeated id gets a 409 answer; a
  server started read-only answers 403;
* ``GET /labels/{id}``: a label's text;
* ``GET /health``: liveness, the number of labels and how many of them were added after training;
* ``GET /metrics``: request counts per endpoint and ``/predict`` latency percentiles (ms) over the
  last ``LATENCY_WINDOW`` requests.

Requests are validated by their schema: an empty or blank text, ``k`` out of ``[1, MAX_K]``, more than
``MAX_TEXTS`` texts, ``ids`` not matching ``texts`` or a wrong type get a 422 answer that names the field.
Needs the ``serve`` extra.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from typing import Annotated

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, StringConstraints, ValidationInfo, field_validator

from xdex import __version__
from xdex.inference.added_labels import KeyConflict
from xdex.inference.predictor import Predictor

logger = logging.getLogger(__name__)

MAX_TEXTS = 1024  # texts per request
MAX_K = 1000  # labels per text
LATENCY_WINDOW = 10_000  # /predict latencies kept for the percentiles

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
LabelId = Annotated[str, StringConstraints(min_length=1)]


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


class AddLabelsRequest(BaseModel):
    texts: list[Text] = Field(min_length=1, max_length=MAX_TEXTS, description="texts of the new labels")
    ids: list[LabelId] | None = Field(None, description="their ids, one per text (default: generated)")

    @field_validator("ids")
    @classmethod
    def one_per_text(cls, ids: list[str] | None, info: ValidationInfo) -> list[str] | None:
        texts = info.data.get("texts")
        if ids is not None and texts is not None and len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts; give one id per text, or none")
        return ids


class AddLabelsResponse(BaseModel):
    ids: list[str]


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


def create_app(predictor: Predictor, read_only: bool = False) -> FastAPI:
    """The API over ``predictor`` (its model is loaded once and shared by all requests); ``read_only`` turns
    ``POST /labels`` off, for a model directory that must not change."""
    app = FastAPI(title="xdex", version=__version__, description="Extreme multi-label classification with label text")
    stats = RequestStats()

    @app.middleware("http")
    async def count(request: Request, call_next):
        response = await call_next(request)
        route = request.scope.get("route")
        stats.record(getattr(route, "path_format", "unknown"))  # e.g. "/labels/{label_id}"
        return response

    @app.post("/predict", response_model=PredictResponse)
    def predict(request: PredictRequest) -> PredictResponse:
        start = time.perf_counter()
        ranked = predictor.predict(request.texts, request.k)
        out = [[ScoredLabelOut(id=label.key, text=label.text, score=label.score) for label in labels]
               for labels in ranked]
        stats.observe(time.perf_counter() - start)
        return PredictResponse(predictions=out)

    @app.post("/labels", response_model=AddLabelsResponse, status_code=201)
    def add_labels(request: AddLabelsRequest) -> AddLabelsResponse:
        if read_only:
            raise HTTPException(status_code=403, detail="this server is read-only: it does not add labels")
        try:
            ids = predictor.add_labels(request.texts, request.ids)
        except KeyConflict as e:
            raise HTTPException(status_code=409, detail=str(e)) from None
        except ValueError as e:
            raise HTTPException(status_code=422, detail=str(e)) from None
        except OSError as e:
            logger.error("could not save new labels in %s: %s", predictor.model_dir, e)
            raise HTTPException(status_code=500, detail=f"the labels could not be saved, none was added ({e})") \
                from None
        logger.info("added %d labels (%s ...)", len(ids), ids[0])
        return AddLabelsResponse(ids=ids)

    @app.get("/labels/{label_id:path}", response_model=LabelOut)
    def label(label_id: str) -> LabelOut:
        try:
            _, text = predictor.label(label_id)
        except KeyError:
            raise HTTPException(status_code=404, detail=f"no label with id {label_id!r}") from None
        return LabelOut(id=label_id, text=text)

    @app.get("/health")
    def health() -> dict:
        model = predictor.model
        added = len(model.label_ids) - model.n_trained
        return {"status": "ok", "labels": len(model.label_ids), "added_labels": added, "version": __version__}

    @app.get("/metrics")
    def metrics() -> dict:
        return stats.snapshot()

    return app
