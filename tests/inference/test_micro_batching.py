"""Micro-batching: each request gets its own answer, requests waiting together share one call, a failing request
fails alone."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

import xdex.inference.batching as batching
from xdex.inference.batching import MicroBatcher


class GatedModel:
    """A model whose first call waits for ``release``, so that requests pile up behind it; records every call."""

    def __init__(self):
        self.calls: list[tuple[list[str], int]] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, texts: list[str], k: int) -> list[str]:
        self.calls.append((list(texts), k))
        if len(self.calls) == 1:
            self.entered.set()
            self.release.wait(timeout=30)
        if "bad" in texts:
            raise ValueError("a bad text")
        return [f"{text}@{k}" for text in texts]


def pile_up(model: GatedModel, batcher: MicroBatcher, requests: list[tuple[list[str], int]]) -> list:
    """Send a first request that holds the model, then ``requests`` while it waits; the answers, in order."""
    with ThreadPoolExecutor(len(requests) + 1) as pool:
        first = pool.submit(batcher, ["first"], 1)
        assert model.entered.wait(timeout=30)
        futures = []
        for texts, k in requests:  # one at a time, so that they wait in this order
            futures.append(pool.submit(batcher, texts, k))
            while len(batcher._waiting) < len(futures):
                threading.Event().wait(0.001)
        model.release.set()
        assert first.result() == ["first@1"]
        return [f.exception() or f.result() for f in futures]


def test_requests_waiting_together_are_answered_by_one_call_each_with_its_own_result():
    model = GatedModel()
    batcher = MicroBatcher(model)
    requests = [([f"t{i}", f"u{i}"], 5) for i in range(12)]
    answers = pile_up(model, batcher, requests)
    assert answers == [[f"t{i}@5", f"u{i}@5"] for i in range(12)]
    assert len(model.calls) == 2 and len(model.calls[1][0]) == 24  # the twelve requests in one call
    batcher.close()


def test_requests_with_another_k_or_past_the_size_cap_go_in_later_calls():
    model = GatedModel()
    batcher = MicroBatcher(model, max_texts=4)
    requests = [(["a"], 3), (["b"], 7), (["c", "d"], 3), (["e", "f"], 3), (["g"], 7)]
    answers = pile_up(model, batcher, requests)
    assert answers == [["a@3"], ["b@7"], ["c@3", "d@3"], ["e@3", "f@3"], ["g@7"]]
    assert model.calls[1:] == [(["a", "c", "d"], 3), (["b", "g"], 7), (["e", "f"], 3)]
    batcher.close()


def test_a_failing_request_fails_alone():
    model = GatedModel()
    batcher = MicroBatcher(model)
    answers = pile_up(model, batcher, [(["x"], 2), (["bad"], 2), (["y"], 2)])
    assert answers[0] == ["x@2"] and answers[2] == ["y@2"]
    assert isinstance(answers[1], ValueError)
    batcher.close()


def test_a_lone_request_is_answered_at_once_and_a_closed_batcher_refuses():
    batcher = MicroBatcher(lambda texts, k: [t.upper() for t in texts])
    assert batcher(["a", "b"], 1) == ["A", "B"]
    batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher(["a"], 1)
    with pytest.raises(ValueError, match="max_texts"):
        MicroBatcher(lambda texts, k: texts, max_texts=0)


def test_a_call_waits_for_company_only_after_one_that_had_some(monkeypatch):
    """Requests that came during a call are answered by the next one; only after a call of several requests does
    the next call wait (``busy_wait``)."""
    calls: list[list[str]] = []
    started, release = threading.Event(), threading.Event()

    def predict(texts: list[str], k: int) -> list[list[str]]:
        calls.append(list(texts))
        if texts == ["first"]:
            started.set()
            release.wait(30)
        return [[text] for text in texts]

    waits: list[float] = []
    monkeypatch.setattr(batching, "time", SimpleNamespace(sleep=waits.append))  # the waits the worker asks for
    batcher = MicroBatcher(predict, busy_wait=0.25)
    try:
        first = batcher.submit(["first"], 1)
        assert started.wait(30)
        during = [batcher.submit([text], 1) for text in ("second", "third")]
        release.set()
        assert [f.result(30) for f in (first, *during)] == [[["first"]], [["second"]], [["third"]]]
        assert batcher.submit(["alone"], 1).result(30) == [["alone"]]
        assert batcher.submit(["after the lone one"], 1).result(30) == [["after the lone one"]]
    finally:
        release.set()
        batcher.close()
    assert calls == [["first"], ["second", "third"], ["alone"], ["after the lone one"]]
    assert waits == [0.25]  # only the call after the one of two requests waited


def test_the_waits_are_not_negative():
    with pytest.raises(ValueError, match="busy_wait"):
        MicroBatcher(lambda texts, k: [[text] for text in texts], busy_wait=-1.0)
