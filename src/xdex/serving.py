"""The HTTP API of ``xdex serve``: a FastAPI app over a :class:`~xdex.inference.Predictor`.

Endpoints (wire format of ``POST /predict``: ``{"texts": [...], "k": 10}`` in,
``{"predictions": [[{"id": ..., "text": ..., "score": ...}, ...], ...]}`` out, one list per text,
best first; ``id`` is the label's key):

* ``POST /predict``: rank labels for one or many texts; requests that arrive while the model is busy are answered
  by one call of it (:class:`~xdex.inference.batching.MicroBatcher`); a valid JSON request is answered by
  :class:`PredictFastPath` in front of FastAPI, any other by the route, which gives the errors;
* ``POST /labels``: add labels by their texts (zero-shot): ``{"texts": [...], "ids": [...]}`` in (``ids``
  optional; generated as ``added-<row>`` when left out), ``{"ids": [...]}`` out with status 201. The labels
  are saved in the model directory, then searchable at once. A taken or repeated id gets a 409 answer; a
  server that does not write answers 403 saying why (started ``read_only``, or another process holds the
  model directory's writer lock); with a ``token``, a request without ``Authorization: Bearer <token>`` gets
  401 before its body is read;
* ``GET /labels/{id}``: a label's text;
* ``GET /health``: liveness, the number of labels and how many of them were added after training, whether the
  server adds labels, and its limits;
* ``GET /metrics``: the server's metrics in the Prometheus text format (``prometheus_client``, one registry per
  app): requests by endpoint and status (``xdex_requests_total``), their latency by endpoint
  (``xdex_request_duration_seconds``, a histogram with ``LATENCY_BUCKETS``), requests refused before they reached
  an endpoint by status (``xdex_requests_refused_total``), texts ranked (``xdex_predict_texts_total``), the labels
  served (``xdex_labels``) and how many of them were added after training (``xdex_labels_added``), and the
  process's CPU time and memory (``process_*``);
* ``GET /stats``: the same counts in JSON: requests per endpoint, requests refused before they reached one (by
  status), and ``/predict`` latency percentiles (ms) over the last ``LATENCY_WINDOW`` requests.

Requests are validated by their schema, with strict types (``"k": "5"``, ``"k": true`` or ``"k": 1e400`` are not
numbers): an empty or blank text, a text over ``Limits.max_text_chars`` characters or with a lone surrogate,
``k`` out of ``[1, MAX_K]``, more than ``Limits.max_texts`` texts, ``ids`` not matching ``texts``, an unknown
field or a wrong type get a 422 answer that names the field and the rule, never the input. A body over
``Limits.max_body_bytes`` gets 413 as soon as that is known: at once from its ``Content-Length``, else when the
count of received bytes passes it, without reading the rest; a body that does not arrive within
``Limits.timeout_read`` seconds gets 408. :func:`make_server` adds uvicorn's connection limits and timeouts and a
limit on a request head's size (``MAX_HEAD_BYTES``).
Needs the ``serve`` extra.
"""

import asyncio
import contextlib
import hmac
import json
import logging
import math
import stat
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, cast

import numpy as np
import prometheus_client as prom
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from xdex import __version__
from xdex.inference.added_labels import MAX_KEY_CHARS, MAX_LABEL_TEXT_CHARS, KeyConflict, check_new_key, shown
from xdex.inference.batching import MicroBatcher
from xdex.inference.predictor import Predictor, ReadOnlyError, ScoredLabel

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger(__name__)

MAX_TEXTS = 1024  # texts per request
MAX_K = 1000  # labels per text
MAX_TEXT_CHARS = 10_000  # characters per text; about 20 per token of the longest encoder input (512 tokens)
MAX_BODY_BYTES = 4 * 1024 * 1024  # MAX_TEXTS texts of 512 tokens at about 6 bytes of JSON per token: 3.1 MB
TIMEOUT_READ = 20.0  # seconds to send a request's head, then its body
TIMEOUT_KEEP_ALIVE = 5.0  # seconds an idle connection is kept open
LIMIT_CONCURRENCY = 128  # connections and requests at once
LATENCY_WINDOW = 10_000  # /predict latencies kept for the percentiles
# upper bounds (s) of the latency histogram: fine steps over the 1-50 ms an answer takes, coarse ones beyond
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5,
                   1.0, 2.5, 10.0)
INLINE_LABELS = 2000  # an answer of more labels is written on a thread of the pool, not on the event loop
BATCH_WAIT = 0.001  # seconds a model call waits for company after one that answered several requests
MAX_ERRORS = 20  # validation errors listed in a 422 answer
MAX_MESSAGE_CHARS = 300  # characters of one error message in an answer
MAX_HEAD_BYTES = 16 * 1024  # request line and headers (h11's own limit; enforced for httptools)
TOKEN_ENV = "XDEX_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Limits:
    """What one client may ask of the server (module docstring and docs/serving.md, "Security")."""

    max_body_bytes: int = MAX_BODY_BYTES
    max_text_chars: int = MAX_TEXT_CHARS
    max_texts: int = MAX_TEXTS
    timeout_read: float = TIMEOUT_READ
    timeout_keep_alive: float = TIMEOUT_KEEP_ALIVE
    limit_concurrency: int | None = LIMIT_CONCURRENCY

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")


def _check_id(value: str) -> str:
    check_new_key(value)
    return value


class _PredictBody(Protocol):
    """What a validated ``POST /predict`` body holds (its model is built from the limits)."""

    texts: list[str]
    k: int


class _AddLabelsBody(Protocol):
    """What a validated ``POST /labels`` body holds (its model is built from the limits)."""

    texts: list[str]
    ids: list[str] | None


def _request_models(limits: Limits) -> tuple[type[BaseModel], type[BaseModel]]:
    """The request bodies of ``POST /predict`` and ``POST /labels`` under ``limits``."""
    Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=limits.max_text_chars)]
    LabelText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                                 max_length=min(limits.max_text_chars, MAX_LABEL_TEXT_CHARS))]
    LabelId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_KEY_CHARS), AfterValidator(_check_id)]

    class PredictRequest(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        texts: list[Text] = Field(min_length=1, max_length=limits.max_texts, description="texts to label")
        k: int = Field(10, ge=1, le=MAX_K, description="labels per text")

    class AddLabelsRequest(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        texts: list[LabelText] = Field(min_length=1, max_length=limits.max_texts,
                                       description="texts of the new labels")
        ids: list[LabelId] | None = Field(None, description="their ids, one per text (default: generated)")

        @field_validator("ids")
        @classmethod
        def one_per_text(cls, ids: list[str] | None, info: ValidationInfo) -> list[str] | None:
            texts = info.data.get("texts")
            if ids is not None and texts is not None and len(ids) != len(texts):
                raise ValueError(f"{len(ids)} ids for {len(texts)} texts; give one id per text, or none")
            return ids

    return PredictRequest, AddLabelsRequest


class ScoredLabelOut(BaseModel):
    id: str
    text: str
    score: float


class PredictResponse(BaseModel):
    predictions: list[list[ScoredLabelOut]]


class LabelOut(BaseModel):
    id: str
    text: str


class AddLabelsResponse(BaseModel):
    ids: list[str]


async def _result(future: "Future[Any]") -> Any:
    """The result of a thread's ``future``, awaited on the running loop. Unlike ``asyncio.wrap_future``, a cancelled
    wait leaves ``future`` alone: the batcher's worker still sets its result (a cancelled future would refuse it)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def settle(done: "Future[Any]") -> None:  # on the loop
        if waiter.done():
            return
        error = done.exception()
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(done.result())

    future.add_done_callback(lambda done: loop.call_soon_threadsafe(settle, done))
    return await waiter


def predictions_json(ranked: Sequence[Sequence[ScoredLabel]]) -> bytes:
    """The body of a ``POST /predict`` answer: the JSON that FastAPI wrote from :class:`PredictResponse` (UTF-8, a
    score that is not finite ``null``, as pydantic writes them), without building and validating a model per
    label."""
    out = {"predictions": [[{"id": label.key, "text": label.text,
                             "score": label.score if math.isfinite(label.score) else None} for label in labels]
                           for labels in ranked]}
    return json.dumps(out, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


class RequestStats:
    """Request counts per endpoint, refusals by status and a bounded window of ``/predict`` latencies (for
    ``GET /stats``), and the same events as Prometheus metrics in ``registry`` (for ``GET /metrics``); safe across
    threads. Each app has its own registry, so that several apps live in one process."""

    def __init__(self, window: int = LATENCY_WINDOW):
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._latencies: deque[float] = deque(maxlen=window)
        self.registry = prom.CollectorRegistry()
        self._requests = prom.Counter("xdex_requests", "Requests answered, by endpoint and status",
                                      ("endpoint", "status"), registry=self.registry)
        self._duration = prom.Histogram("xdex_request_duration_seconds",
                                        "Time from a request's arrival to its answer, by endpoint", ("endpoint",),
                                        buckets=LATENCY_BUCKETS, registry=self.registry)
        self._refusals = prom.Counter("xdex_requests_refused",
                                      "Requests refused before they reached an endpoint, by status", ("status",),
                                      registry=self.registry)
        self.texts = prom.Counter("xdex_predict_texts", "Texts ranked by POST /predict", registry=self.registry)
        prom.ProcessCollector(registry=self.registry)
        # the labelled children, looked up once: a request then costs two dictionary look-ups and two updates
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def record(self, endpoint: str, status: int = 200, seconds: float = 0.0) -> None:
        """A request that reached ``endpoint`` (a route's path, e.g. ``/labels/{label_id}``) and was answered
        ``status`` after ``seconds``."""
        with self._lock:
            self._counts[endpoint] += 1
        children = self._children.get((endpoint, status))
        if children is None:  # routes and statuses are few: this dictionary stays small
            children = self._children[endpoint, status] = (self._requests.labels(endpoint, str(status)),
                                                           self._duration.labels(endpoint))
        children[0].inc()
        children[1].observe(seconds)

    def refuse(self, status: int) -> None:
        """A request answered ``status`` before it reached an endpoint (body too large, too slow, no token)."""
        with self._lock:
            self._refused[str(status)] += 1
        self._refusals.labels(str(status)).inc()

    def exposition(self) -> bytes:
        """The metrics in the Prometheus text format."""
        return prom.generate_latest(self.registry)

    def observe(self, seconds: float) -> None:
        """One ``/predict`` latency."""
        with self._lock:
            self._latencies.append(seconds * 1000.0)

    def snapshot(self) -> dict:
        with self._lock:
            counts, refused, latencies = dict(self._counts), dict(self._refused), np.array(self._latencies)
        percentiles = {f"p{q}": float(np.percentile(latencies, q)) for q in (50, 95, 99)} if len(latencies) else {}
        return {"requests": counts, "refused": refused, "predict_latency_ms": percentiles,
                "latency_window": len(latencies)}


def _safe(value: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``value`` as a bounded string that JSON can carry (a lone surrogate becomes ``\\udxxx``)."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def validation_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The errors of a 422 answer: where and what, never the input (it may be huge, or not even JSON-able)."""
    out = [{"loc": [part if isinstance(part, int) else _safe(part, 64) for part in error.get("loc", ())],
            "msg": _safe(error.get("msg", "")), "type": _safe(error.get("type", ""), 64)}
           for error in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        out.append({"loc": [], "msg": f"and {len(errors) - MAX_ERRORS} more errors", "type": "too_many_errors"})
    return out


async def _answer(send: Send, status: int, detail: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """A small JSON answer ``{"detail": ...}`` that closes the connection (the rest of the body is not read)."""
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})


class _Body:
    """The receive and send of one request, cut off with 413 when the body passes ``max_bytes`` and with 408 when
    it is not complete within ``timeout`` seconds; the app then sees a disconnected client."""

    def __init__(self, receive: Receive, send: Send, max_bytes: int, timeout: float):
        self._receive, self._send = receive, send
        self.max_bytes, self.timeout = max_bytes, timeout
        self.deadline = asyncio.get_running_loop().time() + timeout
        self.size = 0
        self.complete = False
        self.started = False
        self.status = 500  # the app's answer, once it starts one
        self.refused: int | None = None  # the status this wrapper answered with

    async def receive(self) -> Message:
        if self.refused is not None:
            return {"type": "http.disconnect"}
        if self.complete:  # e.g. listening for a disconnect while answering: no deadline
            return await self._receive()
        left = self.deadline - asyncio.get_running_loop().time()
        try:
            message = await asyncio.wait_for(self._receive(), timeout=max(left, 0.0))
        except asyncio.TimeoutError:
            await self._refuse(408, f"the request body did not arrive within {self.timeout:g} s")
            return {"type": "http.disconnect"}
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.max_bytes:
                await self._refuse(413, f"the request body is larger than {self.max_bytes} bytes")
                return {"type": "http.disconnect"}
            self.complete = not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if self.refused is not None:
            return  # the client has its answer
        if message["type"] == "http.response.start":
            self.started = True
            self.status = message["status"]
        await self._send(message)

    async def _refuse(self, status: int, detail: str) -> None:
        if self.started:  # too late to answer: only cut the body off
            self.complete = True
            return
        self.refused = status
        await _answer(self._send, status, detail)


def _route_path(scope: Scope) -> str:
    """The request's path as the app's routes see it (without the ``root_path`` a proxy serves the app under)."""
    return scope["path"].removeprefix(scope.get("root_path", ""))


class Guard:
    """ASGI middleware in front of the API: a token for the write endpoint, the body limits, and counts."""

    def __init__(self, app: ASGIApp, limits: Limits, token: str | None, stats: RequestStats):
        self.app, self.limits, self.stats = app, limits, stats
        self.token = None if token is None else token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            status, detail, headers = refusal
            self.stats.refuse(status)
            await _answer(send, status, detail, headers)
            return
        start = time.perf_counter()
        body = _Body(receive, send, self.limits.max_body_bytes, self.limits.timeout_read)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:  # answered 500 by the server (body.status stays 500 unless an answer had started)
            self._count(scope, body, start)
            raise
        self._count(scope, body, start)

    def _count(self, scope: Scope, body: _Body, start: float) -> None:
        if body.refused is not None:
            self.stats.refuse(body.refused)
        else:
            route = scope.get("route")  # e.g. "/labels/{label_id}"; "unknown" for a path no route takes
            self.stats.record(getattr(route, "path_format", "unknown"), body.status, time.perf_counter() - start)

    def _refusal(self, scope: Scope) -> tuple[int, str, tuple[tuple[bytes, bytes], ...]] | None:
        """The answer to a request that is refused on its head alone, if it is."""
        headers = Headers(scope=scope)
        path = _route_path(scope)
        if self.token is not None and scope["method"] not in ("GET", "HEAD", "OPTIONS") and path.startswith("/labels"):
            scheme, _, credentials = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer":
                return 401, "adding labels needs the header Authorization: Bearer <token>", \
                    ((b"www-authenticate", b'Bearer realm="xdex"'),)
            if not hmac.compare_digest(credentials.strip().encode("latin-1"), self.token):
                return 401, "the token is not this server's", \
                    ((b"www-authenticate", b'Bearer realm="xdex", error="invalid_token"'),)
        length = headers.get("content-length")
        if length is not None:
            if not (length.isascii() and length.isdigit()):
                return 400, "Content-Length is not a number of bytes", ()
            if int(length) > self.limits.max_body_bytes:
                return 413, f"the request body is larger than {self.limits.max_body_bytes} bytes", ()
        return None


class PredictFastPath:
    """ASGI middleware that answers a valid ``POST /predict`` itself, in front of FastAPI.

    Its body (JSON: no ``Content-Type``, or ``application/json``) is read and validated by the route's own request
    model in pydantic's JSON mode, one pass in compiled code; ``rank(texts, k)`` gives the answer's body, which is
    written as the route writes it, and the request is counted as the route's (``scope["route"]``). Under 16 clients
    the event loop held the interpreter three times as long as the model's thread, mostly in FastAPI's work around
    a request (routing, its dependency solving and body parsing, its middleware layers' wrappers of every message),
    and the model waited for it between calls (docs/benchmarks.md, "Serving"). Every other
    request, and a body that the model refuses, goes on to the app (the body replayed): the route answers it as
    before, so each error is the route's own. Pydantic's JSON mode accepts no body that the route would refuse
    (strict types; no NaN, lone surrogate or trailing data), tested."""

    def __init__(self, app: ASGIApp, path: str, request_model: type[BaseModel], route: object,
                 rank: Callable[[list[str], int], Awaitable[bytes]]):
        self.app, self.path, self.request_model, self.route, self.rank = app, path, request_model, route, rank

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._takes(scope):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left, or the guard refused the body
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        try:
            body = cast(_PredictBody, self.request_model.model_validate_json(raw))
        except ValidationError:
            await self.app(scope, _replay(raw, receive), send)
            return
        scope["route"] = self.route
        content = await self.rank(body.texts, body.k)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(content)).encode()),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": content})

    def _takes(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST":
            return False
        if _route_path(scope) != self.path:
            return False
        media_type = Headers(scope=scope).get("content-type")
        return media_type is None or media_type.partition(";")[0].strip().lower() == "application/json"


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body``, already read, given again first."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def create_app(
    predictor: Predictor, read_only: bool = False, limits: Limits | None = None, token: str | None = None,
    batch_wait: float = BATCH_WAIT,
) -> FastAPI:
    """The API over ``predictor`` (its model is loaded once and shared by all requests). ``read_only`` turns
    ``POST /labels`` off, for a model directory that must not change; otherwise the app claims the predictor's
    writer lock, and serves read-only with a warning when another process holds it. ``token``: the bearer token
    that ``POST /labels`` needs (none: any client may add labels). ``batch_wait``: seconds a model call waits for
    more requests when the server is busy (``MicroBatcher``'s ``busy_wait``; 0: never)."""
    limits = limits or Limits()
    if token is not None:
        check_token(token, "the token")
    if not read_only:
        try:
            predictor.claim_writer()
        except ReadOnlyError as e:  # tried again on every POST /labels
            logger.warning("%s; POST /labels answers 403 for now", e)
    PredictRequest, AddLabelsRequest = _request_models(limits)
    batcher = MicroBatcher(predictor.predict, busy_wait=batch_wait)  # concurrent requests share one model call

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        batcher.close()

    app = FastAPI(title="xdex", version=__version__, description="Extreme multi-label classification with label text",
                  lifespan=lifespan)
    stats = RequestStats()
    prom.Gauge("xdex_labels", "Labels the server ranks, trained and added", registry=stats.registry) \
        .set_function(lambda: predictor.n_labels)
    prom.Gauge("xdex_labels_added", "Labels added after training (POST /labels, or by another writer of the model "
          "directory)", registry=stats.registry).set_function(_added_labels(predictor))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": validation_errors(error.errors())})

    async def rank(texts: list[str], k: int) -> bytes:
        """The body of the answer to ``texts``: on the event loop, the request waits for the model's call without a
        thread of its own, and its answer is written as JSON directly (PredictResponse documents it); a large
        answer on a thread, so that writing it does not hold the other connections up."""
        start = time.perf_counter()
        ranked = await _result(batcher.submit(texts, k))
        stats.texts.inc(len(texts))
        if sum(len(labels) for labels in ranked) <= INLINE_LABELS:
            content = predictions_json(ranked)
        else:
            content = await run_in_threadpool(predictions_json, ranked)
        stats.observe(time.perf_counter() - start)
        return content

    @app.post("/predict", response_model=PredictResponse)
    async def predict(request: PredictRequest) -> Response:  # type: ignore[valid-type]  # built from the limits
        body = cast(_PredictBody, request)  # valid JSON requests are answered by PredictFastPath
        return Response(await rank(body.texts, body.k), media_type="application/json")

    @app.post("/labels", response_model=AddLabelsResponse, status_code=201)
    def add_labels(request: AddLabelsRequest) -> AddLabelsResponse:  # type: ignore[valid-type]  # as above
        if read_only:
            raise HTTPException(status_code=403, detail="this server is read-only (--read-only): it adds no labels")
        try:
            body = cast(_AddLabelsBody, request)
            ids = predictor.add_labels(body.texts, body.ids)
        except ReadOnlyError as e:
            raise HTTPException(status_code=403, detail=str(e)) from None
        except KeyConflict as e:
            raise HTTPException(status_code=409, detail=str(e)) from None
        except (TypeError, ValueError) as e:
            raise HTTPException(status_code=422, detail=str(e)) from None
        except OSError as e:
            logger.error("could not save new labels in %s: %s", predictor.model_dir, e)
            raise HTTPException(status_code=500, detail=f"the labels could not be saved, none was added ({e})") \
                from None
        logger.info("added %d labels (%s ...)", len(ids), shown(ids[0]))
        return AddLabelsResponse(ids=ids)

    @app.get("/labels/{label_id:path}", response_model=LabelOut)
    def label(label_id: str) -> LabelOut:
        try:
            _, text = predictor.label(label_id)
        except KeyError:
            raise HTTPException(status_code=404, detail=f"no label with id {shown(label_id)}") from None
        return LabelOut(id=label_id, text=text)

    @app.get("/health")
    def health() -> dict:
        model = predictor.model
        added = len(model.label_ids) - model.n_trained
        return {"status": "ok", "labels": len(model.label_ids), "added_labels": added,
                "read_only": read_only or not predictor.is_writer,
                "limits": {"max_texts": limits.max_texts, "max_k": MAX_K, "max_text_chars": limits.max_text_chars,
                           "max_body_bytes": limits.max_body_bytes},
                "version": __version__}

    @app.get("/metrics", response_class=Response,
             responses={200: {"content": {prom.CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}})
    def metrics() -> Response:
        return Response(stats.exposition(), media_type=prom.CONTENT_TYPE_LATEST)

    @app.get("/stats")
    def request_stats() -> dict:
        return stats.snapshot()

    route = next(route for route in app.routes if getattr(route, "path", None) == "/predict")
    app.add_middleware(PredictFastPath, path="/predict", request_model=PredictRequest, route=route, rank=rank)
    app.add_middleware(Guard, limits=limits, token=token, stats=stats)  # the outer one: limits first
    return app


def _added_labels(predictor: Predictor) -> Callable[[], int]:
    """How many of the labels that ``predictor`` serves were added after training."""

    def count() -> int:
        model = predictor.model
        return len(model.label_ids) - model.n_trained

    return count


def check_token(token: str, source: str) -> None:
    """Refuse (``ValueError``, naming ``source``, never the token) a token that a client could not send in an
    ``Authorization`` header; warn about a short one."""
    if not token:
        raise ValueError(f"{source} is empty")
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ValueError(f"{source} holds a character that is not printable ASCII (or a space); a token is sent in "
                         "an HTTP header")
    if len(token) < MIN_TOKEN_CHARS:
        logger.warning("%s has %d characters; use at least %d (e.g. `openssl rand -hex 32`)", source, len(token),
                       MIN_TOKEN_CHARS)


def read_token(path: str | Path) -> str:
    """The token in the file ``path`` (surrounding whitespace removed), checked (:func:`check_token`); a warning
    when other users may read the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as e:
        raise ValueError(f"{path}: cannot read the token file ({e.strerror})") from None
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: the token is not ASCII; a token is sent in an HTTP header") from None
    check_token(token, f"the token in {path}")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning("%s may be read by other users (mode %s); `chmod 600 %s`", path, stat.filemode(mode), path)
    return token


HTTP_IMPLEMENTATIONS = ("auto", "httptools", "h11")


def make_server(app: Any, host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None,
                log_level: str = "info", http: str = "auto", access_log: bool = False) -> "uvicorn.Server":
    """A uvicorn server of ``app`` with ``limits``' connection settings: at most ``limit_concurrency``
    connections and requests at once (503 beyond), an idle connection closed after ``timeout_keep_alive``
    seconds (a new one as well as one between requests), a request's head to be complete within
    ``timeout_read`` seconds of the connection opening or of the previous answer (else the connection is
    closed) and to hold at most ``MAX_HEAD_BYTES`` (else 400). ``http``: the HTTP parser, ``httptools`` (in C,
    the faster) or ``h11`` (pure Python); ``auto`` takes httptools when it is installed. The event loop is uvloop's
    when it is installed (uvicorn's ``auto``). ``access_log``: a log line per request (uvicorn's access log); off by
    default, as gunicorn has it: the line cost the event loop a sixth of its time under load (docs/benchmarks.md,
    "Serving"), and ``GET /metrics`` counts the requests by endpoint and status. ``server.run()`` serves."""
    import uvicorn

    limits = limits or Limits()
    config = uvicorn.Config(app, host=host, port=port, http=_deadline_protocol(limits.timeout_read, http),
                            # uvicorn annotates an int but waits a float (loop.call_later): fractions work
                            timeout_keep_alive=limits.timeout_keep_alive,  # type: ignore[arg-type]
                            limit_concurrency=limits.limit_concurrency,
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                            log_level=log_level, access_log=access_log)
    return uvicorn.Server(config)


def _deadline_protocol(timeout_read: float, http: str = "auto") -> type:
    """uvicorn's protocol for ``http`` (:func:`make_server`) with the two deadlines it lacks; for httptools, also
    the limit on a request head's size that h11 has of its own."""
    if http not in HTTP_IMPLEMENTATIONS:
        raise ValueError(f"http must be one of {', '.join(HTTP_IMPLEMENTATIONS)}, not {http!r}")
    base: Any
    if http == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    else:
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
        except ImportError:
            if http == "httptools":
                raise ValueError("http='httptools' needs the httptools package (the serve extra)") from None
            from uvicorn.protocols.http.h11_impl import H11Protocol as base
    head_parser = base.__name__ == "HttpToolsProtocol"

    class DeadlineProtocol(base):
        _head_timer: asyncio.TimerHandle | None = None
        _armed_for: object = None  # the request cycle answered when the timer was armed
        _head_bytes = 0  # received while a head was not complete (httptools)

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            # uvicorn arms its keep-alive timer only after an answer: a connection that never sends is idle too
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)
            self._arm()

        if head_parser:
            _in_head = True  # from the connection's start, or a request's end, to the next head's end

            def data_received(self, data: bytes) -> None:
                if self._in_head:
                    self._head_bytes += len(data)
                super().data_received(data)
                if self._in_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    self.send_400_response("Invalid HTTP request received.")  # as h11's limit answers

            def on_headers_complete(self) -> None:
                self._in_head, self._head_bytes = False, 0
                super().on_headers_complete()
                self._disarm()  # the head is in

            def on_message_complete(self) -> None:
                super().on_message_complete()
                self._in_head = True
        else:
            def handle_events(self) -> None:
                super().handle_events()
                if self._head_timer is not None and self.cycle is not self._armed_for:  # a new request's head is in
                    self._disarm()

        def on_response_complete(self) -> None:
            self._arm()  # before the next pipelined request is handled
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._armed_for = self.cycle
            self._head_timer = self.loop.call_later(timeout_read, self._head_too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                logger.debug("closing a connection whose request head did not arrive within %g s", timeout_read)
                self.transport.close()

    DeadlineProtocol.__name__ = DeadlineProtocol.__qualname__ = f"Deadline{base.__name__}"
    return DeadlineProtocol
