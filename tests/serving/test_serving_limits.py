"""What one client may ask of `xdex serve`: bounded bodies and texts, strict types, 422 answers that never echo
the request, a token for the write endpoint, printable label ids (docs/serving.md, "Security")."""

from __future__ import annotations

import json
import logging
import os

import pytest

from xdex.inference import Predictor

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from xdex.cli import serve as serve_cli
from xdex.inference.added_labels import MAX_KEY_CHARS
from xdex.serving import BATCH_WAIT, MAX_ERRORS, MAX_TEXT_CHARS, Limits, create_app, read_token, validation_errors

TOKEN = "s3cret-token-of-32-characters-xx"


def post(client: TestClient, path: str, body: str | bytes, **headers: str):
    return client.post(path, content=body, headers={"content-type": "application/json", **headers})


def test_a_text_over_the_limit_gets_a_small_422_that_names_the_field_and_the_limit(client):
    long = "word " * (MAX_TEXT_CHARS // 5) + "tail"
    response = client.post("/predict", json={"texts": ["ok", long]})
    assert response.status_code == 422 and len(response.content) < 1000
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "texts", 1] and str(MAX_TEXT_CHARS) in error["msg"]
    assert "word word" not in response.text and set(error) == {"loc", "msg", "type"}
    assert client.post("/predict", json={"texts": [long[:MAX_TEXT_CHARS]]}).status_code == 200  # truncated to
    # the encoder's max_length tokens, as any text


@pytest.mark.parametrize("body", [
    '{"texts": ["a"], "k": 1e400}', '{"texts": ["a"], "k": NaN}', '{"texts": ["a"], "k": -Infinity}',
    '{"texts": ["a"], "k": "5"}', '{"texts": ["a"], "k": true}', '{"texts": ["a"], "k": 5.0}',
    '{"texts": ["a\\ud800b"]}', '{"texts": ["\\udfff"]}', '{"texts": [1e400]}', '{"texts": [true]}',
    '{"texts": ["a"], "K": 5}', '{"texts": ["a"], "\\ud800": 1}', '[1, 2]', '"texts"', 'null',
    '{"texts": ["a"]', '{"texts": ["a"]}\\u0000',
])
def test_bad_bodies_get_422_without_their_input(client, body):
    response = post(client, "/predict", body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail and all(set(error) == {"loc", "msg", "type"} for error in detail)
    assert len(response.content) < 1000


def test_validation_errors_keep_where_and_what_bounded_and_encodable():
    errors = [{"loc": ("body", "x\ud800" * 100, 3), "msg": "m" * 5000, "type": "t", "input": "y" * 10**6,
               "ctx": {"le": float("nan")}}]
    (error,) = validation_errors(errors)
    assert error["loc"][0] == "body" and error["loc"][1].startswith("x\\ud800x") and len(error["loc"][1]) < 500
    assert error["loc"][2] == 3 and len(error["msg"]) < 400 and set(error) == {"loc", "msg", "type"}
    json.dumps(error, allow_nan=False).encode("utf-8")


def test_a_422_lists_a_bounded_number_of_errors(client):
    response = client.post("/predict", json={"texts": list(range(1000))})
    detail = response.json()["detail"]
    assert response.status_code == 422 and len(detail) == MAX_ERRORS + 1
    assert detail[-1] == {"loc": [], "msg": f"and {1000 - MAX_ERRORS} more errors", "type": "too_many_errors"}


def test_a_body_over_the_limit_gets_413_before_the_app(predictor):
    client = TestClient(create_app(predictor, read_only=True, limits=Limits(max_body_bytes=1000)))
    body = json.dumps({"texts": ["x " * 600]})
    response = post(client, "/predict", body)
    assert response.status_code == 413 and response.json() == {"detail": "the request body is larger than 1000 bytes"}
    assert response.headers["connection"] == "close"
    assert post(client, "/predict", json.dumps({"texts": ["x " * 400]})).status_code == 200
    metrics = client.get("/stats").json()
    assert metrics["refused"] == {"413": 1} and metrics["requests"]["/predict"] == 1


def test_a_body_without_content_length_is_counted(predictor):
    client = TestClient(create_app(predictor, read_only=True, limits=Limits(max_body_bytes=1000)))

    def chunks(n: int):
        yield b'{"texts": ["'
        for _ in range(n):
            yield b"x " * 50
        yield b'"]}'

    response = client.post("/predict", content=chunks(30), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers and response.status_code == 413
    assert client.post("/predict", content=chunks(5), headers={"content-type": "application/json"}).status_code == 200


def test_a_malformed_content_length_gets_400(client):
    response = post(client, "/predict", '{"texts": ["a"]}', **{"content-length": "1e3"})
    assert response.status_code == 400


def test_texts_per_request_follow_the_limits(predictor):
    client = TestClient(create_app(predictor, read_only=True, limits=Limits(max_texts=3, max_text_chars=10)))
    assert client.post("/predict", json={"texts": ["a"] * 3}).status_code == 200
    assert client.post("/predict", json={"texts": ["a"] * 4}).status_code == 422
    assert client.post("/predict", json={"texts": ["a" * 11]}).status_code == 422
    assert client.get("/health").json()["limits"] == {"max_texts": 3, "max_k": 1000, "max_text_chars": 10,
                                                      "max_body_bytes": Limits().max_body_bytes}


@pytest.mark.parametrize("bad", [{"max_body_bytes": 0}, {"max_texts": -1}, {"timeout_read": 0}])
def test_limits_must_be_positive(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        Limits(**bad)


def test_the_cli_defaults_are_the_limits_defaults():
    limits = Limits()
    assert (serve_cli.MAX_BODY_BYTES, serve_cli.MAX_TEXT_CHARS, serve_cli.MAX_TEXTS, serve_cli.TIMEOUT_READ,
            serve_cli.TIMEOUT_KEEP_ALIVE, serve_cli.LIMIT_CONCURRENCY, serve_cli.BATCH_WAIT) == \
        (limits.max_body_bytes, limits.max_text_chars, limits.max_texts, limits.timeout_read,
         limits.timeout_keep_alive, limits.limit_concurrency, BATCH_WAIT)


@pytest.mark.parametrize("label_id", [
    "a\nb", "line\r", "nul\x00", "tab\tid", "\u2028", "x" * (MAX_KEY_CHARS + 1), " x", "x ", "\ud800",
])
def test_label_ids_must_be_printable_and_short(model_dir, label_id):
    predictor = Predictor(model_dir)
    response = TestClient(create_app(predictor)).post(
        "/labels", content=json.dumps({"texts": ["a new label"], "ids": [label_id]}),
        headers={"content-type": "application/json"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "ids", 0]
    assert len(response.content) < 1000 and predictor.n_labels == 64
    with pytest.raises(ValueError, match="key 0: label id"):
        predictor.add_labels(["a new label"], [label_id])


def test_an_unknown_id_is_named_briefly(client):
    response = client.get("/labels/" + "x" * 5000)
    assert response.status_code == 404 and len(response.content) < 300 and "5000 characters" in response.text


def test_the_write_endpoint_needs_the_token(model_dir):
    predictor = Predictor(model_dir)
    client = TestClient(create_app(predictor, token=TOKEN))
    body = {"texts": ["a new label"]}
    for headers in ({}, {"authorization": "Basic abc"}, {"authorization": "Bearer wrong"},
                    {"authorization": f"Bearer {TOKEN}x"}, {"authorization": TOKEN}):
        response = client.post("/labels", json=body, headers=headers)
        assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in response.text
    # refused on its head alone: a malformed or oversized body without the token is not read
    assert post(client, "/labels", "not json").status_code == 401
    assert post(client, "/labels", "x" * (Limits().max_body_bytes + 1)).status_code == 401
    assert predictor.n_labels == 64
    response = client.post("/labels", json=body, headers={"authorization": f"bearer {TOKEN}"})
    assert response.status_code == 201 and predictor.n_labels == 65
    # reading needs no token
    assert client.post("/predict", json={"texts": ["a new label"], "k": 1}).json()["predictions"][0][0]["id"] == \
        "added-64"
    assert client.get("/labels/added-64").status_code == 200
    assert client.get("/stats").json()["refused"] == {"401": 7}


def write_token(path, text: str, mode: int = 0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_token_files(tmp_path, caplog):
    assert read_token(write_token(tmp_path / "t", TOKEN + "\n")) == TOKEN
    for text, message in [("", "is empty"), ("  \n", "is empty"), ("two words-and-more-characters", "printable"),
                          ("tökenwithumlautandmore", "not ASCII"), ("a\nb-0123456789abcdef", "printable")]:
        with pytest.raises(ValueError, match=message) as error:
            read_token(write_token(tmp_path / "t", text))
        assert text.strip() == "" or text not in str(error.value)
    with pytest.raises(ValueError, match="cannot read the token file"):
        read_token(tmp_path / "missing")
    with caplog.at_level(logging.WARNING, logger="xdex.serving"):
        read_token(write_token(tmp_path / "t", TOKEN, 0o644))
        read_token(write_token(tmp_path / "t", "short", 0o600))
    assert "may be read by other users" in caplog.text and "has 5 characters" in caplog.text
    assert TOKEN not in caplog.text and "short" not in caplog.text
