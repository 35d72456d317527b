"""The HTTP API of `xdex serve`, through FastAPI's test client."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from xdex.inference import DualEncoderModel, Predictor

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from ranking_asserts import assert_same_ranking

from xdex.serving import MAX_K, MAX_TEXTS, create_app


def test_predict_returns_the_predictor_ranking_in_the_wire_format(client, predictor, toy):
    texts = toy.test.texts[:2]
    response = client.post("/predict", json={"texts": texts, "k": 3})
    assert response.status_code == 200
    body = response.json()
    assert list(body) == ["predictions"] and len(body["predictions"]) == 2
    for got, expected in zip(body["predictions"], predictor.predict(texts, 3), strict=False):
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
    assert health["status"] == "ok" and health["labels"] == predictor.n_labels and health["added_labels"] == 0
    before = client.get("/stats").json()["requests"].get("/predict", 0)
    for _ in range(3):
        client.post("/predict", json={"texts": ["parser"], "k": 2})
    client.get("/labels/l3")
    metrics = client.get("/stats").json()
    assert metrics["requests"]["/predict"] == before + 3 and metrics["requests"]["/labels/{label_id}"] >= 1
    latency = metrics["predict_latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"]
    schema = client.get("/openapi.json").json()
    assert {"/predict", "/labels", "/labels/{label_id}", "/health", "/metrics", "/stats"} <= set(schema["paths"])


def test_a_read_only_server_adds_no_label(client, predictor):
    response = client.post("/labels", json={"texts": ["a new label"]})
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    assert client.get("/health").json()["labels"] == 64 == predictor.n_labels


def test_an_added_label_is_found_by_its_text_and_kept_on_restart(model_dir, new_text):
    client = TestClient(create_app(Predictor(model_dir)))
    response = client.post("/labels", json={"texts": [new_text]})
    assert response.status_code == 201 and response.json() == {"ids": ["added-64"]}
    (best, *_), = client.post("/predict", json={"texts": [new_text], "k": 3}).json()["predictions"]
    assert (best["id"], best["text"]) == ("added-64", new_text)
    assert client.get("/labels/added-64").json() == {"id": "added-64", "text": new_text}
    health = client.get("/health").json()
    assert {key: health[key] for key in ("status", "labels", "added_labels", "read_only")} == \
        {"status": "ok", "labels": 65, "added_labels": 1, "read_only": False}
    restarted = TestClient(create_app(Predictor(model_dir, read_only=True), read_only=True))
    assert restarted.get("/labels/added-64").json()["text"] == new_text
    assert restarted.post("/predict", json={"texts": [new_text], "k": 1}).json()["predictions"][0][0]["id"] == \
        "added-64"


def test_given_ids_and_ids_with_slashes(model_dir):
    client = TestClient(create_app(Predictor(model_dir)))
    response = client.post("/labels", json={"texts": ["one new", "two new"], "ids": ["new/1", "new 2"]})
    assert response.status_code == 201 and response.json() == {"ids": ["new/1", "new 2"]}
    assert client.get("/labels/new/1").json() == {"id": "new/1", "text": "one new"}
    assert client.get("/labels/new%202").json() == {"id": "new 2", "text": "two new"}


@pytest.mark.parametrize(("payload", "status", "message"), [
    ({"texts": ["x"], "ids": ["l3"]}, 409, "'l3' already exists"),  # a trained label's id
    ({"texts": ["x", "y"], "ids": ["n", "n"]}, 409, "'n' is given twice"),
    ({"texts": ["x"], "ids": [" n"]}, 422, "without surrounding whitespace"),
    ({"texts": ["x", "y"], "ids": ["n"]}, 422, "1 ids for 2 texts"),
    ({"texts": ["x"], "ids": [""]}, 422, "ids"),
    ({"texts": ["x"], "ids": [3]}, 422, "ids"),
    ({"texts": ["  "]}, 422, "texts"),
    ({"texts": []}, 422, "texts"),
    ({"texts": ["x"] * (MAX_TEXTS + 1)}, 422, "texts"),
    ({"ids": ["n"]}, 422, "texts"),
])
def test_bad_additions_are_refused_and_add_nothing(model_dir, payload, status, message):
    predictor = Predictor(model_dir)
    response = TestClient(create_app(predictor)).post("/labels", json=payload)
    assert response.status_code == status and message in str(response.json()["detail"])
    assert predictor.n_labels == 64 and Predictor(model_dir).n_labels == 64


def test_a_label_that_cannot_be_saved_is_not_added(model_dir, monkeypatch):
    predictor = Predictor(model_dir)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(DualEncoderModel, "save_added", full_disk)
    response = TestClient(create_app(predictor)).post("/labels", json={"texts": ["x y"]})
    assert response.status_code == 500 and "none was added" in response.json()["detail"]
    assert predictor.n_labels == 64


def test_concurrent_additions_and_predictions(model_dir, toy):
    """Clients add labels while others predict: every addition survives a restart, and every predicted id is
    one that GET /labels/{id} knows."""
    client = TestClient(create_app(Predictor(model_dir)))
    words = " ".join(toy.labels.texts[:3]).split()
    done = threading.Event()
    predicted: list[dict] = []
    failures: list[int] = []

    def add(i: int) -> list[str]:
        response = client.post("/labels", json={"texts": [f"{words[i]} {words[i + 1]}", f"{words[i + 2]} new"]})
        failures.extend([response.status_code] if response.status_code != 201 else [])
        return response.json().get("ids", [])

    def predict() -> None:
        while not done.is_set():
            response = client.post("/predict", json={"texts": [f"{words[1]} {words[2]}", toy.test.texts[0]], "k": 4})
            if response.status_code != 200:
                failures.append(response.status_code)
                return
            predicted.extend(label for labels in response.json()["predictions"] for label in labels)

    readers = [threading.Thread(target=predict) for _ in range(3)]
    for reader in readers:
        reader.start()
    with ThreadPoolExecutor(max_workers=4) as pool:
        added = [key for keys in pool.map(add, range(8)) for key in keys]
    done.set()
    for reader in readers:
        reader.join()
    assert not failures and len(set(added)) == 16
    assert client.get("/health").json()["labels"] == 80
    assert all(client.get(f"/labels/{label['id']}").json() == {"id": label["id"], "text": label["text"]}
               for label in predicted)
    restarted = Predictor(model_dir)
    assert set(restarted.model.label_ids[64:]) == set(added)


def test_concurrent_requests_each_get_their_own_ranking(client, predictor, toy):
    """Requests answered together (micro-batching) get what each would get alone."""
    texts = toy.labels.texts[:24] + toy.test.texts[:24]

    row = {key: i for i, key in enumerate(predictor.model.label_ids)}

    def ask(i: int) -> list[dict]:
        response = client.post("/predict", json={"texts": [texts[i]], "k": 3 + i % 2})
        assert response.status_code == 200
        return response.json()["predictions"][0]

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(ask, range(len(texts))))
    for i, served in enumerate(answers):
        alone = predictor.predict([texts[i]], 3 + i % 2)[0]
        assert_same_ranking([[row[label["id"]] for label in served]], [[label["score"] for label in served]],
                            [[label.index for label in alone]], [[label.score for label in alone]])
