"""`GET /metrics` in the Prometheus text format: counts, latency histograms and label gauges of one app."""

from __future__ import annotations

import json

import pytest

from xdex.inference import Predictor

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
from fastapi.testclient import TestClient
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from xdex.serving import LATENCY_BUCKETS, Limits, create_app


def scrape(client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of ``GET /metrics`` by name and labels."""
    response = client.get("/metrics")
    assert response.status_code == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def test_the_exposition_counts_requests_by_endpoint_and_status(predictor):
    client = TestClient(create_app(predictor, read_only=True))
    for _ in range(3):
        assert client.post("/predict", json={"texts": ["parser", "compiler"], "k": 2}).status_code == 200
    assert client.post("/predict", json={"texts": []}).status_code == 422
    assert client.get("/labels/l3").status_code == 200
    assert client.get("/labels/no-such-label").status_code == 404
    assert client.get("/nowhere").status_code == 404
    response = client.get("/metrics")
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    samples = scrape(client)  # the first scrape is counted too, once it is answered
    requests = {labels: value for (name, labels), value in samples.items() if name == "xdex_requests_total"}
    assert requests == {
        (("endpoint", "/predict"), ("status", "200")): 3,
        (("endpoint", "/predict"), ("status", "422")): 1,
        (("endpoint", "/labels/{label_id}"), ("status", "200")): 1,
        (("endpoint", "/labels/{label_id}"), ("status", "404")): 1,
        (("endpoint", "unknown"), ("status", "404")): 1,
        (("endpoint", "/metrics"), ("status", "200")): 1,
    }
    assert samples["xdex_predict_texts_total", ()] == 6  # two texts in each of the three answered requests
    assert samples["xdex_labels", ()] == predictor.n_labels == 64
    assert samples["xdex_labels_added", ()] == 0
    assert any(name.startswith("process_") for name, _ in samples)  # CPU time and memory of the server


def test_latency_histograms_per_endpoint(predictor):
    client = TestClient(create_app(predictor, read_only=True))
    for _ in range(4):
        client.post("/predict", json={"texts": ["parser"], "k": 2})
    client.get("/health")
    samples = scrape(client)
    predict = (("endpoint", "/predict"),)
    assert samples["xdex_request_duration_seconds_count", predict] == 4
    assert samples["xdex_request_duration_seconds_sum", predict] > 0
    assert samples["xdex_request_duration_seconds_count", (("endpoint", "/health"),)] == 1
    buckets = [(float(dict(labels)["le"]), value) for (name, labels), value in samples.items()
               if name == "xdex_request_duration_seconds_bucket" and ("endpoint", "/predict") in labels]
    assert sorted(bound for bound, _ in buckets) == [*LATENCY_BUCKETS, float("inf")]
    counts = [value for _, value in sorted(buckets)]
    assert counts == sorted(counts) and counts[-1] == 4  # cumulative, every request under +Inf


def test_refused_requests_are_counted_by_status_and_not_as_answers(predictor):
    client = TestClient(create_app(predictor, read_only=True, limits=Limits(max_body_bytes=1000)))
    for _ in range(2):
        response = client.post("/predict", content=json.dumps({"texts": ["x " * 600]}),
                               headers={"content-type": "application/json"})
        assert response.status_code == 413
    samples = scrape(client)
    assert samples["xdex_requests_refused_total", (("status", "413"),)] == 2
    assert not any(name == "xdex_requests_total" and ("endpoint", "/predict") in labels for name, labels in samples)


def test_the_added_labels_gauge_follows_post_labels(model_dir):
    client = TestClient(create_app(Predictor(model_dir)))
    assert scrape(client)["xdex_labels_added", ()] == 0
    response = client.post("/labels", json={"texts": ["a first new label", "a second new label"]})
    assert response.status_code == 201
    samples = scrape(client)
    assert samples["xdex_labels_added", ()] == 2 and samples["xdex_labels", ()] == 66
    assert samples["xdex_requests_total", (("endpoint", "/labels"), ("status", "201"))] == 1


def test_each_app_has_its_own_registry(predictor):
    first, second = (TestClient(create_app(predictor, read_only=True)) for _ in range(2))
    first.post("/predict", json={"texts": ["parser"], "k": 2})
    assert ("xdex_requests_total", (("endpoint", "/predict"), ("status", "200"))) not in scrape(second)
    assert scrape(first)["xdex_requests_total", (("endpoint", "/predict"), ("status", "200"))] == 1
    # the JSON view keeps its fields
    stats = first.get("/stats").json()
    assert set(stats) == {"requests", "refused", "predict_latency_ms", "latency_window"}
    assert stats["requests"]["/predict"] == 1


def test_an_error_in_an_endpoint_is_counted_as_500(predictor, monkeypatch):
    def broken(texts, k):
        raise RuntimeError("the model failed")

    monkeypatch.setattr(predictor, "predict", broken)  # before the app binds it
    client = TestClient(create_app(predictor, read_only=True), raise_server_exceptions=False)
    assert client.post("/predict", json={"texts": ["parser"], "k": 2}).status_code == 500
    samples = scrape(client)
    assert samples["xdex_requests_total", (("endpoint", "/predict"), ("status", "500"))] == 1
    assert samples["xdex_request_duration_seconds_count", (("endpoint", "/predict"),)] == 1
