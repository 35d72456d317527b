"""Fuzz tests of every endpoint: random JSON bodies (schema-shaped or not, with NaN, huge numbers, lone
surrogates, control characters) and random bytes never give a 500, a traceback or a partial answer; every error
is a small JSON answer."""

from __future__ import annotations

import json
import logging
import shutil
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from xdex.inference import Predictor
from xdex.serving import MAX_K, Limits, create_app

LIMITS = Limits(max_texts=8, max_text_chars=200, max_body_bytes=20_000)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

characters = st.one_of(st.characters(), st.characters(), st.characters(categories=["Cs", "Cc", "Zl", "Zp"]))
texts = st.text(characters, max_size=30)  # anything, lone surrogates and control characters included
plain = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=40)
served = plain.filter(str.strip)  # texts that a valid request may hold
ids = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S"], include_characters=" /"), min_size=1,
              max_size=30).map(str.strip).filter(lambda key: key and not {".", ".."} & set(key.split("/")))
numbers = st.one_of(st.integers(), st.integers(-(10**30), 10**30), st.floats(), st.sampled_from([0, 1, 5, 1000, 1001]))
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(texts, inner, max_size=4)), max_leaves=12)
good_lists = st.lists(plain, min_size=1, max_size=LIMITS.max_texts + 1)  # mostly lists that may be served
text_lists = st.one_of(good_lists, good_lists, good_lists, st.lists(texts, max_size=4), st.lists(values, max_size=3),
                       values)


def requests(fields: dict) -> st.SearchStrategy[dict]:
    """Request-shaped JSON objects: every field of ``fields`` with its value, or some fields left out, sometimes
    with an extra key."""
    whole = st.fixed_dictionaries(fields)
    partial = st.fixed_dictionaries({}, optional=fields)
    extra = st.dictionaries(texts, values, min_size=1, max_size=2)
    with_extra = st.tuples(whole, extra).map(lambda both: {**both[1], **both[0]})
    return st.one_of(whole, whole, whole, whole, whole, partial, with_extra)


def bodies(shaped: st.SearchStrategy[dict]) -> st.SearchStrategy[bytes]:
    """``shaped`` requests, any JSON value, or random bytes."""
    as_json = st.one_of(shaped, shaped, shaped, values).map(lambda value: json.dumps(value, allow_nan=True).encode())
    return st.one_of(as_json, as_json, as_json, st.binary(max_size=200))


def with_ids(request: dict) -> st.SearchStrategy[dict]:
    """``request`` with no ids, one id per text, or any ``ids``."""
    n = len(request["texts"]) if isinstance(request.get("texts"), list) else 1
    good = st.lists(ids, min_size=n, max_size=n)
    anything = st.one_of(good, good, st.lists(st.one_of(plain, texts), min_size=n, max_size=n), values)
    return st.one_of(st.just(request), anything.map(lambda value: {**request, "ids": value}))


ks = st.integers(-1, MAX_K + 1)
predict_bodies = bodies(requests({"texts": text_lists, "k": st.one_of(ks, ks, ks, values)}))
label_bodies = bodies(requests({"texts": text_lists}).flatmap(with_ids))


@pytest.fixture(scope="module")
def writable(trained, tmp_path_factory):
    """A server that adds labels to its own copy of the model."""
    folder = shutil.copytree(trained, tmp_path_factory.mktemp("fuzz") / "model")
    predictor = Predictor(folder)
    return predictor, TestClient(create_app(predictor, limits=LIMITS), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def reader(predictor):
    return TestClient(create_app(predictor, read_only=True, limits=LIMITS), raise_server_exceptions=False)


def check_error(response) -> None:
    """A refusal: 4xx (never 5xx), a small JSON body with a ``detail``."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert len(response.content) < 8000 and "detail" in response.json()


def post(client: TestClient, path: str, body: bytes, caplog):
    """``client``'s answer to ``body``, checked to have logged no error (and no traceback)."""
    with caplog.at_level(logging.ERROR):
        response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert not caplog.records, caplog.text
    return response


@FUZZ
@given(body=predict_bodies)
def test_predict_never_fails(reader, caplog, body):
    response = post(reader, "/predict", body, caplog)
    if response.status_code == 200:
        request, predictions = json.loads(body), response.json()["predictions"]
        assert len(predictions) == len(request["texts"])
        assert all(len(labels) == min(request.get("k", 10), 64) for labels in predictions)
    else:
        check_error(response)


@FUZZ
@given(texts=st.lists(served, min_size=1, max_size=LIMITS.max_texts), k=st.integers(1, MAX_K))
def test_predict_answers_every_valid_request_in_full(reader, caplog, texts, k):
    response = post(reader, "/predict", json.dumps({"texts": texts, "k": k}).encode(), caplog)
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == len(texts) and all(len(labels) == min(k, 64) for labels in predictions)
    assert all(set(label) == {"id", "text", "score"} for labels in predictions for label in labels)


def check_added(predictor, client, body: bytes, response, before: int) -> None:
    """An addition is all or nothing: 201 with one id per text, each served, or an error and no label added."""
    if response.status_code != 201:
        check_error(response)
        assert predictor.n_labels == before
        return
    request, ids = json.loads(body), response.json()["ids"]
    assert len(ids) == len(request["texts"]) and predictor.n_labels == before + len(ids)
    for label_id, text in zip(ids, request["texts"], strict=False):
        label = client.get(f"/labels/{quote(label_id, safe='')}").json()
        assert label["id"] == label_id and label["text"].strip() == text.strip()  # as sent, up to surrounding space


@FUZZ
@given(body=label_bodies)
def test_add_labels_never_fails(writable, caplog, body):
    predictor, client = writable
    before = predictor.n_labels
    check_added(predictor, client, body, post(client, "/labels", body, caplog), before)


@FUZZ
@given(request=st.lists(served, min_size=1, max_size=LIMITS.max_texts).flatmap(
    lambda texts: st.one_of(st.just({"texts": texts}), st.lists(ids, min_size=len(texts), max_size=len(texts)).map(
        lambda keys: {"texts": texts, "ids": keys}))))
def test_add_labels_adds_every_valid_request_in_full(writable, caplog, request):
    predictor, client = writable
    before, body = predictor.n_labels, json.dumps(request).encode()
    response = post(client, "/labels", body, caplog)
    assert response.status_code in (201, 409), response.text  # 409: an id that exists, or one given twice
    check_added(predictor, client, body, response, before)


@FUZZ
@given(path=st.one_of(texts.map(lambda text: quote(text.encode("utf-8", "surrogatepass"), safe="")),
                      st.binary(max_size=40).map(lambda raw: quote(raw, safe="")),
                      st.text(st.sampled_from("%/.afAF09?#"), max_size=12)))
def test_get_label_never_fails(reader, caplog, path):
    with caplog.at_level(logging.ERROR):
        response = reader.get(f"/labels/{path}")
    assert not caplog.records, caplog.text
    if response.status_code != 200:
        check_error(response)
    else:
        assert set(response.json()) == {"id", "text"}


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
       path=st.sampled_from(["/predict", "/labels", "/labels/l3", "/health", "/metrics", "/stats", "/nowhere"]),
       body=st.binary(max_size=300))
def test_any_method_and_bytes_on_any_path_never_fail(reader, method, path, body):
    response = reader.request(method, path, content=body)
    kind = "text/plain" if (method, path, response.status_code) == ("GET", "/metrics", 200) else "application/json"
    assert response.status_code < 500 and response.headers["content-type"].startswith(kind)
