"""Checked line reading (plain, gzip, CRLF, bad UTF-8, truncation) and atomic line writing."""

from __future__ import annotations

import gzip

import pytest

from xdex.data import ProblemLog
from xdex.data.textfile import read_lines, write_lines


def _read(path, **kwargs):
    log = ProblemLog()
    return read_lines(path, log, **kwargs), [(p.line, p.message) for p in log.problems]


@pytest.mark.parametrize(
    "data, lines",
    [
        (b"a\nb\n", ["a", "b"]),
        (b"a\nb", ["a", "b"]),
        (b"a\r\nb\r\n", ["a", "b"]),
        (b"a\n\n", ["a", ""]),
        (b"\n", [""]),
        ("x\x0by\x85z\u2028w\n".encode(), ["x\x0by\x85z\u2028w"]),  # only \n ends a line
    ],
)
def test_line_ends(tmp_path, data, lines):
    (tmp_path / "f.txt").write_bytes(data)
    assert _read(tmp_path / "f.txt") == (lines, [])


def test_empty_file(tmp_path):
    (tmp_path / "f.txt").write_bytes(b"")
    assert _read(tmp_path / "f.txt") == ([], [(None, "the file is empty")])
    assert _read(tmp_path / "f.txt", allow_empty=True) == ([], [])


def test_invalid_utf8_is_reported_per_line_and_keeps_numbering(tmp_path):
    (tmp_path / "f.txt").write_bytes(b"ok\r\nbad \xff here\r\nfine\n")
    lines, problems = _read(tmp_path / "f.txt")
    assert lines == ["ok", "bad \ufffd here", "fine"]
    assert problems == [(2, "invalid UTF-8 at byte 5 of the line (b'\\xff')")]


def test_gzip_files(tmp_path):
    (tmp_path / "f.txt.gz").write_bytes(gzip.compress(b"a\nb\n"))
    assert _read(tmp_path / "f.txt.gz") == (["a", "b"], [])
    (tmp_path / "g.txt").write_bytes(gzip.compress(b"a\n"))
    assert _read(tmp_path / "g.txt") == ([], [(None, "the file is gzip-compressed but its name does not end in .gz")])
    (tmp_path / "h.txt.gz").write_bytes(b"a\n")
    assert _read(tmp_path / "h.txt.gz") == (
        [],
        [(None, "the file name ends in .gz but the file is not gzip-compressed")],
    )


def test_truncated_gzip_keeps_whole_lines(tmp_path):
    data = gzip.compress(b"".join(b"line %d\n" % i for i in range(50000)))
    (tmp_path / "f.gz").write_bytes(data[: len(data) // 2])
    lines, problems = _read(tmp_path / "f.gz")
    assert lines == [f"line {i}" for i in range(len(lines))]
    assert 0 < len(lines) < 50000
    assert problems[0][0] == len(lines) + 1
    assert problems[0][1].startswith(f"the gzip data is truncated or corrupt after line {len(lines)} ")


def test_corrupt_gzip_checksum(tmp_path):
    data = bytearray(gzip.compress(b"a\nb\n"))
    data[-8] ^= 0xFF  # the CRC-32 of the trailer
    (tmp_path / "f.gz").write_bytes(bytes(data))
    lines, problems = _read(tmp_path / "f.gz")
    assert lines == ["a", "b"][: len(lines)]  # what decompressed before the check failed
    assert problems == [(len(lines) + 1, problems[0][1])] and "corrupt" in problems[0][1]


def test_write_lines_is_atomic_and_reproducible(tmp_path):
    write_lines(tmp_path / "f.txt", ["é", ""])
    assert (tmp_path / "f.txt").read_bytes() == "é\n\n".encode()
    write_lines(tmp_path / "f.txt.gz", ["x"])
    first = (tmp_path / "f.txt.gz").read_bytes()
    write_lines(tmp_path / "f.txt.gz", ["x"])
    assert (tmp_path / "f.txt.gz").read_bytes() == first and gzip.decompress(first) == b"x\n"

    def failing():
        yield "new"
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_lines(tmp_path / "f.txt", failing())
    assert (tmp_path / "f.txt").read_bytes() == "é\n\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt", "f.txt.gz"]
