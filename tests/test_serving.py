"""The HTTP API of `xdex serve`, through FastAPI's test client."""

from __future__ import annotations

import pytest

import xdex.data
from xdex.inference import Predictor
from xdex.methods.recipe import load_recipe, train

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from xdex.serving import MAX_K, MAX_TEXTS, create_app  # noqa: E402


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve") / "model"
    overrides = ["trainer.epochs=2", "trainer.eval_every=2", "trainer.progress=false", "encoder.dim=64"]
    train(xdex.data.load("demo"), load_recipe("ngame", overrides=overrides), out)
    return Predictor(out)


@pytest.fixture(scope="module")
def client(predictor):
    return TestClient(create_app(predictor))


def test_predict_returns_the_predictor_ranking_in_the_wire_format(client, predictor):
    texts = ["lexical analyser generator", "ethernet frame"]
    response = client.post("/predict", json={"texts": texts, "k": 3})
    assert response.status_code == 200
    body = response.json()
    assert list(body) == ["predictions"] and len(body["predictions"]) == 2
    for got, expected in zip(body["predictions"], predictor.predict(texts, 3)):
        assert [set(item) for item in got] == [{"id", "text", "score"}] * 3
        assert [item["id"] for item in got] == [label.key for label in expected]
        assert [item["text"] for item in got] == [label.text for label in expected]
        assert got[0]["score"] >= got[1]["score"] >= got[2]["score"]


def test_k_defaults_to_ten(client):
    (labels,) = client.post("/predict", json={"texts": ["compiler"]}).json()["predictions"]
    assert len(labels) == 10


@pytest.mark.parametrize("payload", [
    {"texts": []},  # no text
    {"texts": ["ok", "   "]},  # a blank text
    {"texts": ["ok"], "k": 0},
    {"texts": ["ok"], "k": MAX_K + 1},
    {"texts": ["x"] * (MAX_TEXTS + 1)},  # oversized batch
    {"texts": "not a list"},
    {"texts": [3]},
    {"k": 3},  # no texts
])
def test_bad_requests_get_a_422_naming_the_field(client, payload):
    response = client.post("/predict", json=payload)
    assert response.status_code == 422
    fields = {str(part) for error in response.json()["detail"] for part in error["loc"]}
    assert fields & {"texts", "k"}


def test_labels_by_id(client, predictor):
    key, text = predictor.model.label_ids[5], predictor.model.label_texts[5]
    assert client.get(f"/labels/{key}").json() == {"id": key, "text": text}
    response = client.get("/labels/no-such-label")
    assert response.status_code == 404 and "no-such-label" in response.json()["detail"]


def test_health_metrics_and_openapi(client, predictor):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["labels"] == predictor.n_labels
    before = client.get("/metrics").json()["requests"].get("/predict", 0)
    for _ in range(3):
        client.post("/predict", json={"texts": ["parser"], "k": 2})
    metrics = client.get("/metrics").json()
    assert metrics["requests"]["/predict"] == before + 3
    latency = metrics["predict_latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"]
    schema = client.get("/openapi.json").json()
    assert {"/predict", "/labels/{label_id}", "/health", "/metrics"} <= set(schema["paths"])
