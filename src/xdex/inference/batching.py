"""Micro-batching: concurrent prediction requests answered by one call of the model.

A served model is fastest per text in batches (one encoder pass, one matrix product against the labels, the
lexical channel split over the cores), while clients send one text at a time. :class:`MicroBatcher` puts the
requests that arrive while the model is busy into one call: a worker thread takes every waiting request (up to
``max_texts`` texts) as soon as the previous call returns, so an idle server answers a lone request at once and a
busy one batches by itself; ``max_wait`` seconds of waiting for company can be added before every call (default
none), or ``busy_wait`` seconds after a call that answered several requests only (a busy server: the clients it
answered send their next requests while the requests that came meanwhile are ranked, so without a wait the calls
take turns between two halves of the clients; with it, a call takes most of them and the model ranks a text for
less, docs/benchmarks.md "Serving"; a lone client is never held). :meth:`MicroBatcher.submit` returns a request's
future at once, for callers that wait on an event loop rather than on a thread. Requests
with different ``k`` are never mixed (a ranking's candidates can depend on ``k``). A batch that fails is retried
request by request, so each request gets its own answer or its own error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass
class _Request(Generic[R]):
    texts: Sequence[str]
    k: int
    result: Future[list[R]] = field(default_factory=Future)


class MicroBatcher(Generic[R]):
    """``batcher(texts, k)`` answers as ``predict(texts, k)`` would, through shared calls (module docstring)."""

    def __init__(self, predict: Callable[[list[str], int], list[R]], max_texts: int = 512, max_wait: float = 0.0,
                 busy_wait: float = 0.0):
        if max_texts < 1 or max_wait < 0 or busy_wait < 0:
            raise ValueError(f"max_texts must be >= 1, max_wait and busy_wait >= 0, not {max_texts}, {max_wait} and "
                             f"{busy_wait}")
        self.predict, self.max_texts, self.max_wait, self.busy_wait = predict, max_texts, max_wait, busy_wait
        self._busy = False  # whether the last call answered several requests (read and set by the worker alone)
        self._waiting: deque[_Request[R]] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._worker = threading.Thread(target=self._serve, name="xdex-micro-batcher", daemon=True)
        self._worker.start()

    def __call__(self, texts: Sequence[str], k: int) -> list[R]:
        return self.submit(texts, k).result()

    def submit(self, texts: Sequence[str], k: int) -> Future[list[R]]:
        """The future of ``predict(texts, k)``, answered through a shared call; returns at once."""
        request: _Request[R] = _Request(list(texts), k)
        with self._ready:
            if self._closed:
                raise RuntimeError("the micro-batcher is closed")
            self._waiting.append(request)
            self._ready.notify()
        return request.result

    def close(self) -> None:
        """Answer what is waiting, then stop the worker."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._worker.join()

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if not self._waiting:  # closed and nothing left
                    return
            wait = max(self.max_wait, self.busy_wait if self._busy else 0.0)
            if wait:
                time.sleep(wait)  # let company arrive
            batch = self._take()
            self._busy = len(batch) > 1
            self._answer(batch)

    def _take(self) -> list[_Request[R]]:
        """The oldest waiting request and those after it with the same ``k``, up to ``max_texts`` texts (a larger
        request alone)."""
        with self._ready:
            first = self._waiting.popleft()
            batch, size = [first], len(first.texts)
            kept: deque[_Request[R]] = deque()
            while self._waiting:
                request = self._waiting.popleft()
                if request.k == first.k and size + len(request.texts) <= self.max_texts:
                    batch.append(request)
                    size += len(request.texts)
                else:
                    kept.append(request)
            self._waiting.extendleft(reversed(kept))
        return batch

    def _answer(self, batch: list[_Request[R]]) -> None:
        texts = [text for request in batch for text in request.texts]
        try:
            results = self.predict(texts, batch[0].k)
        except Exception:  # one request may be at fault: each is answered alone
            if len(batch) == 1:
                self._settle(batch[0])
                return
            log.warning("a batch of %d requests failed; answering them one by one", len(batch))
            for request in batch:
                self._settle(request)
            return
        start = 0
        for request in batch:
            request.result.set_result(results[start:start + len(request.texts)])
            start += len(request.texts)

    def _settle(self, request: _Request[R]) -> None:
        try:
            request.result.set_result(self.predict(list(request.texts), request.k))
        except Exception as e:  # the caller's thread raises it
            request.result.set_exception(e)
