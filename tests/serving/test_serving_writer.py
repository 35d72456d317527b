"""One writer per model directory: a second server (or predictor), in this process or another, serves
read-only until it can add labels without losing the first one's; no acknowledged label is lost."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from xdex.inference import Predictor
from xdex.inference.predictor import ReadOnlyError

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from xdex.serving import create_app

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no file locks on Windows")

CHILD = """
import sys
from xdex.inference import Predictor
predictor = Predictor(sys.argv[1])
print(predictor.add_labels(["first child label"], ["child-1"])[0], flush=True)
sys.stdin.read()  # holds the writer lock until the parent closes stdin
"""


def test_a_second_process_cannot_add_and_no_acknowledged_label_is_lost(model_dir, caplog):
    early = Predictor(model_dir)  # loaded before the other process adds its label
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(model_dir)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert child.stdout.readline().strip() == "child-1"  # acknowledged
        with pytest.raises(ReadOnlyError, match=f"process {child.pid}"):
            early.add_labels(["a parent label"], ["parent-1"])
        with caplog.at_level(logging.WARNING, logger="xdex.serving"):
            server = Predictor(model_dir)
            client = TestClient(create_app(server))
        assert f"process {child.pid}" in caplog.text and server.label("child-1")[1] == "first child label"
        assert client.get("/health").json()["read_only"] is True
        response = client.post("/labels", json={"texts": ["a server label"]})
        assert response.status_code == 403 and f"process {child.pid}" in response.json()["detail"]
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert child.returncode == 0
    # the lock is free, but this predictor never saw child-1: writing now would drop it
    with pytest.raises(ReadOnlyError, match="changed by another process since this predictor loaded it"):
        early.add_labels(["a parent label"], ["parent-1"])
    # the server loaded child-1, so it may write now
    response = client.post("/labels", json={"texts": ["a server label"]})
    assert response.status_code == 201 and response.json() == {"ids": ["added-65"]}
    assert client.get("/health").json()["read_only"] is False
    assert Predictor(model_dir).model.label_ids[64:] == ["child-1", "added-65"]


def test_two_servers_in_one_process_take_turns(model_dir):
    first = Predictor(model_dir)
    first_client = TestClient(create_app(first))
    second_client = TestClient(create_app(Predictor(model_dir)))
    assert first_client.post("/labels", json={"texts": ["one"]}).status_code == 201
    response = second_client.post("/labels", json={"texts": ["two"]})
    assert response.status_code == 403 and "this process (another predictor)" in response.json()["detail"]
    first.close()  # as if the first server stopped: the second has not seen "one", so it must not write
    assert second_client.post("/labels", json={"texts": ["two"]}).status_code == 403
    assert Predictor(model_dir).model.label_texts[64:] == ["one"]
