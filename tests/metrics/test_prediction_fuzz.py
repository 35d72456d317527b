"""Property: whatever happens to a prediction file, `xdex evaluate --pred` prints metrics or a one-paragraph
error naming the file (exit 0 or 1), never a traceback."""

from __future__ import annotations

import gzip
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xdex.cli import main
from xdex.metrics import Ranking, write_predictions

RANKING = Ranking.from_lists([[1, 0], [], [3, 2, 0]], [[0.9, 0.5], [], [0.7, 0.25, 0.125]])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """3 test documents over 4 labels."""
    data = tmp_path_factory.mktemp("fuzz") / "tiny"
    data.mkdir()
    (data / "labels.jsonl").write_text("".join(f'{{"text": "label {i}"}}\n' for i in range(4)))
    (data / "train.jsonl").write_text('{"text": "a", "labels": [0]}\n{"text": "b", "labels": [1, 2]}\n')
    (data / "test.jsonl").write_text('{"text": "c", "labels": [1]}\n{"text": "d", "labels": [0]}\n'
                                     '{"text": "e", "labels": [3]}\n')
    return data


def corrupt(data: bytes, how: str, at: float, noise: bytes) -> bytes:
    cut = int(len(data) * at)
    return {
        "truncate": data[:cut],
        "overwrite": data[:cut] + noise + data[cut + len(noise):],
        "insert": data[:cut] + noise + data[cut:],
        "deep": data[:cut] + b"[" * 100000 + data[cut:],
        "surrogate": data[:cut] + b'"\\udc80"' + data[cut:],
        "line": data[:cut] + b'\n{"id": 1, "labels": [' + b"[" * 5000 + b"]\n" + data[cut:],
        "digits": data[:cut] + b"1" + b"0" * 400 + data[cut:],  # beyond the range of a float
        "many_digits": data[:cut] + b"9" * 5000 + data[cut:],  # beyond the digits Python converts to an int
        "empty": b"",
    }[how]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["p.jsonl", "p.jsonl.gz", "p.txt", "p.npz"]),
       how=st.sampled_from(["truncate", "overwrite", "insert", "deep", "surrogate", "line", "digits", "many_digits",
                            "empty"]),
       at=st.floats(0, 1), noise=st.binary(min_size=1, max_size=8), inside=st.booleans())
def test_a_corrupted_prediction_file_gives_metrics_or_a_clear_error(folder, tmp_path_factory, monkeypatch, capsys,
                                                                    name, how, at, noise, inside):
    path = tmp_path_factory.getbasetemp() / "fuzz-pred" / name
    path.parent.mkdir(exist_ok=True)
    write_predictions(path, RANKING, n_labels=4)
    raw = path.read_bytes()
    if inside and name.endswith(".gz"):  # damage the text inside the compression, not only the gzip stream
        path.write_bytes(gzip.compress(corrupt(gzip.decompress(raw), how, at, noise)))
    else:
        path.write_bytes(corrupt(raw, how, at, noise))
    monkeypatch.setattr(sys, "argv", ["xdex", "evaluate", "--pred", str(path), "--data", str(folder), "--json"])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code in (0, 1) and "Traceback" not in err
    if code:
        assert str(path) in err and out == ""
    else:
        assert out.startswith("{")
