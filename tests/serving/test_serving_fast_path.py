"""`PredictFastPath`: a valid JSON `POST /predict` is answered in front of FastAPI, every other request by the route,
and both answer every body alike."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from pydantic import BaseModel, ConfigDict

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from test_serving_fuzz import FUZZ, LIMITS, predict_bodies

from xdex.serving import PredictFastPath, create_app

ROUTE_ONLY = "application/x-route+json"  # FastAPI parses it as JSON; the fast path leaves it to the route


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    texts: list[str]
    k: int = 10


class Recorder:
    """An inner app that records what reached it and answers 299."""

    def __init__(self):
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send):
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        self.bodies.append(b"".join(chunks))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def call(path_app: PredictFastPath, body: bytes, method: str = "POST", path: str = "/predict",
         content_type: bytes | None = b"application/json", parts: int = 1) -> tuple[int, bytes, dict]:
    """``body`` sent to ``path_app`` in ``parts`` messages: the status, the answer's body and the scope."""
    size = -(-len(body) // parts) if body else 1
    messages = [{"type": "http.request", "body": body[i:i + size], "more_body": i + size < len(body)}
                for i in range(0, max(len(body), 1), size)]
    sent: list[dict] = []
    headers = [] if content_type is None else [(b"content-type", content_type)]
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": headers}

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(path_app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), scope


def fast_path() -> tuple[PredictFastPath, Recorder, list[tuple[list[str], int]]]:
    ranked: list[tuple[list[str], int]] = []

    async def rank(texts: list[str], k: int) -> bytes:
        ranked.append((texts, k))
        return json.dumps({"texts": texts, "k": k}).encode()

    inner = Recorder()
    return PredictFastPath(inner, "/predict", Body, route="the route", rank=rank), inner, ranked


@pytest.mark.parametrize("content_type", [None, b"application/json", b"Application/JSON; charset=utf-8"])
def test_a_valid_json_request_is_ranked_without_the_app(content_type):
    path_app, inner, ranked = fast_path()
    status, body, scope = call(path_app, b'{"texts": ["a b", "c"], "k": 3}', content_type=content_type, parts=3)
    assert status == 200 and json.loads(body) == {"texts": ["a b", "c"], "k": 3}
    assert ranked == [(["a b", "c"], 3)] and inner.bodies == [] and scope["route"] == "the route"


@pytest.mark.parametrize("body", [b'{"texts": ["a"], "k": 5.0}', b'{"texts": ["a"], "k": NaN}', b'{"texts": [1]}',
                                  b'{"texts": ["a\\ud800"]}', b'{"texts": ["a"]} x', b'{"texts": ["a"], "K": 1}',
                                  b"\xef\xbb\xbf" + b'{"texts": ["a"]}', '{"texts": ["a"]}'.encode("utf-16"), b""])
def test_a_body_the_model_refuses_goes_to_the_app_whole(body):
    path_app, inner, ranked = fast_path()
    status, _, scope = call(path_app, body, parts=2)
    assert status == 299 and inner.bodies == [body] and ranked == [] and "route" not in scope


@pytest.mark.parametrize(("method", "path", "content_type"), [
    ("GET", "/predict", b"application/json"), ("POST", "/labels", b"application/json"),
    ("POST", "/predict/x", b"application/json"), ("POST", "/predict", b"text/plain"),
    ("POST", "/predict", ROUTE_ONLY.encode()),
])
def test_other_requests_go_to_the_app(method, path, content_type):
    path_app, inner, ranked = fast_path()
    status, _, _ = call(path_app, b'{"texts": ["a"]}', method=method, path=path, content_type=content_type)
    assert status == 299 and inner.bodies == [b'{"texts": ["a"]}'] and ranked == []


def test_a_client_that_leaves_gets_nothing():
    path_app, inner, ranked = fast_path()
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": b'{"texts"', "more_body": True}, {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/predict", "root_path": "", "headers": []}
    asyncio.run(path_app(scope, receive, send))
    assert sent == [] and inner.bodies == [] and ranked == []


@pytest.fixture(scope="module")
def served(predictor):
    return TestClient(create_app(predictor, read_only=True, limits=LIMITS), raise_server_exceptions=False)


@FUZZ
@given(body=predict_bodies)
def test_the_fast_path_answers_every_body_as_the_route(served, body):
    fast = served.post("/predict", content=body, headers={"content-type": "application/json"})
    route = served.post("/predict", content=body, headers={"content-type": ROUTE_ONLY})
    assert (fast.status_code, fast.headers["content-type"]) == (route.status_code, route.headers["content-type"])
    assert fast.content == route.content


def test_the_fast_path_answers_duplicate_keys_and_spaces_as_the_route(served):
    body = b'{"texts": ["  x  "], "k": 2, "texts": [" ab ", "c"]}'
    fast = served.post("/predict", content=body, headers={"content-type": "application/json"})
    route = served.post("/predict", content=body, headers={"content-type": ROUTE_ONLY})
    assert fast.status_code == route.status_code == 200 and fast.content == route.content
    assert [len(labels) for labels in fast.json()["predictions"]] == [2, 2]


def test_requests_of_the_fast_path_are_counted_as_the_routes(predictor):
    client = TestClient(create_app(predictor, read_only=True, limits=LIMITS))
    for content_type in ("application/json", ROUTE_ONLY):
        assert client.post("/predict", json={"texts": ["a"]}, headers={"content-type": content_type}).is_success
    assert client.get("/stats").json()["requests"] == {"/predict": 2}
    metrics = client.get("/metrics").text
    assert 'xdex_requests_total{endpoint="/predict",status="200"} 2.0' in metrics
    assert "xdex_predict_texts_total 2.0" in metrics
