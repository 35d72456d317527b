"""``POST /predict`` on the event loop: its answer is the JSON that FastAPI wrote from the response model, and a
request whose wait is cancelled leaves the micro-batcher serving the others."""

from __future__ import annotations

import asyncio
import json
import math
import threading

import pytest

pytest.importorskip("fastapi")
from xdex.inference.batching import MicroBatcher
from xdex.inference.predictor import ScoredLabel
from xdex.serving import PredictResponse, ScoredLabelOut, _result, predictions_json


def test_the_answer_is_the_response_model_as_fastapi_wrote_it(predictor, toy):
    ranked = predictor.predict(toy.test.texts[:3], 4)
    ranked[0][0] = ScoredLabel(ranked[0][0].index, "ü/ø \"id\"", "a text\nwith ✓", math.inf)  # escapes, non-finite
    ranked[1][0] = ScoredLabel(ranked[1][0].index, ranked[1][0].key, ranked[1][0].text, math.nan)
    model = PredictResponse(predictions=[[ScoredLabelOut(id=label.key, text=label.text, score=label.score)
                                          for label in labels] for labels in ranked])
    written = predictions_json(ranked)
    assert json.loads(written) == json.loads(model.model_dump_json())  # FastAPI's writer (pydantic's)
    assert json.loads(written)["predictions"][0][0] == {"id": "ü/ø \"id\"", "text": "a text\nwith ✓", "score": None}
    assert json.loads(written)["predictions"][1][0]["score"] is None and "✓".encode() in written


def test_a_cancelled_wait_leaves_the_batcher_serving():
    started, release = threading.Event(), threading.Event()

    def predict(texts: list[str], k: int) -> list[list[str]]:
        started.set()
        release.wait(30)
        return [[f"{text}:{k}"] for text in texts]

    batcher = MicroBatcher(predict)

    async def scenario() -> list[list[str]]:
        waiting = asyncio.ensure_future(_result(batcher.submit(["first"], 1)))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
        waiting.cancel()  # e.g. the server shuts down while the model runs
        with pytest.raises(asyncio.CancelledError):
            await waiting
        later = _result(batcher.submit(["second", "third"], 2))
        release.set()
        return await asyncio.wait_for(later, 30)

    try:
        assert asyncio.run(scenario()) == [["second:2"], ["third:2"]]
    finally:
        release.set()
        batcher.close()


def test_a_failed_prediction_is_raised_to_its_request_only():
    def predict(texts: list[str], k: int) -> list[list[str]]:
        if "bad" in texts:
            raise ValueError("a text the model cannot read")
        return [[text] for text in texts]

    batcher = MicroBatcher(predict)

    async def scenario() -> list[object]:
        futures = [_result(batcher.submit([text], 1)) for text in ("good", "bad", "fine")]
        return await asyncio.gather(*futures, return_exceptions=True)

    try:
        good, bad, fine = asyncio.run(scenario())
    finally:
        batcher.close()
    assert good == [["good"]] and fine == [["fine"]]
    assert isinstance(bad, ValueError) and "cannot read" in str(bad)


def test_a_closed_batcher_refuses_new_requests():
    batcher = MicroBatcher(lambda texts, k: [[text] for text in texts])
    batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(["late"], 1)


def test_a_bag_model_is_served_on_one_thread_unless_omp_num_threads_is_set(predictor, monkeypatch):
    import torch

    from xdex.cli.serve import _serving_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        _serving_threads(predictor)
        assert torch.get_num_threads() == 2  # the user's choice stands
        monkeypatch.delenv("OMP_NUM_THREADS")
        _serving_threads(predictor)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_bag_model_over_a_large_exact_index_is_served_on_every_thread(predictor, monkeypatch):
    """From SPLIT_FROM_ITEMS labels on, one text's scan of an exact index is split between threads: the server
    leaves torch's count as it is (here the toy model's labels count as many)."""
    import torch

    import xdex.index.quantized as quantized
    from xdex.cli.serve import _serving_threads
    from xdex.index.exact import ExactIndex

    index = predictor.model.index
    assert isinstance(index, ExactIndex)
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(quantized, "SPLIT_FROM_ITEMS", len(index))
        _serving_threads(predictor)
        assert torch.get_num_threads() == 2
        monkeypatch.setattr(quantized, "SPLIT_FROM_ITEMS", len(index) + 1)
        _serving_threads(predictor)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_small_and_large_answers_are_the_predictor_rankings(client, predictor, toy):
    """An answer of up to INLINE_LABELS labels is written on the event loop, a larger one on a thread: the same
    rankings either way."""
    from xdex.serving import INLINE_LABELS

    for texts, k in ((toy.test.texts[:2], 5), (toy.test.texts[:40], 60)):
        response = client.post("/predict", json={"texts": texts, "k": k})
        assert response.status_code == 200 and response.headers["content-type"] == "application/json"
        served = [[label["id"] for label in labels] for labels in response.json()["predictions"]]
        alone = [[label.key for label in labels] for labels in predictor.predict(texts, k)]
        assert served == alone
    assert 2 * 5 <= INLINE_LABELS < 40 * 60


def test_the_loaded_objects_are_left_out_of_full_collections():
    import gc

    from xdex.cli.common import loaded_objects_frozen

    assert gc.get_freeze_count() == 0
    with loaded_objects_frozen():
        assert gc.get_freeze_count() > 0 and gc.isenabled()
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    try:  # objects a program froze before stay frozen
        gc.freeze()
        with loaded_objects_frozen():
            pass
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
