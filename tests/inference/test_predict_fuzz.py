"""Property: whatever the lines of an input file, `xdex predict` writes one row per input line, in order, and
exits 0 or 3, never with a traceback."""

from __future__ import annotations

import json

from cli_runner import xdex_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xdex.cli.predict import count_lines

TEXTS = st.text(st.one_of(st.characters(), st.sampled_from(["\ud800", "\udc80"])), max_size=20)
LINES = st.one_of(
    st.builds(lambda t: json.dumps({"text": t}).encode(), TEXTS),  # as escapes: lone surrogates are valid JSON
    st.builds(lambda t: json.dumps({"text": t}, ensure_ascii=False).encode("utf-8", "surrogatepass"),
              TEXTS),  # surrogates as bytes: invalid UTF-8
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b" ")),
    st.sampled_from([b"[" * 100000, b'{"text": ' + b"[" * 100000, b'{"text": 1}', b"{}", b"", b'{"text": "\\ud800"}',
                     b'{"text": "x"', b'{"text": "' + b"9" * 5000 + b'"}', b'{"n": ' + b"9" * 5000 + b"}"]),
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINES, min_size=1, max_size=8), suffix=st.sampled_from([".jsonl", ".txt"]),
       newline=st.sampled_from([b"\n", b"\r\n"]), last=st.booleans(), batch=st.integers(1, 4))
def test_every_input_line_gets_its_row(trained, tmp_path_factory, monkeypatch, capsys, lines, suffix, newline, last,
                                       batch):
    folder = tmp_path_factory.getbasetemp() / "fuzz-predict"
    folder.mkdir(exist_ok=True)
    source, out = folder / f"in{suffix}", folder / "out.jsonl"
    source.write_bytes(newline.join(lines) + (newline if last else b""))
    code, _, stderr = xdex_cli(monkeypatch, capsys, "predict", trained["ngame"], "--input", source, "--output",
                                    out, "--batch-size", batch, "--k", 2, "--overwrite")
    assert code in (0, 3) and "Traceback" not in stderr, stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["id"] for row in rows] == list(range(count_lines(source)))
    assert (code == 3) == any("error" in row for row in rows)
    assert all(row["line"] == row["id"] + 1 and row["labels"] == [] for row in rows if "error" in row)
