"""Line-oriented text files, plain or gzip-compressed: checked reading and atomic writing.

Reading returns the decoded lines of a file and records what can be wrong with a file as a
whole or with one of its lines (an empty file, truncated or corrupt gzip data, invalid UTF-8)
in a :class:`~xdex.data.errors.ProblemLog`. Lines end in ``\\n`` or ``\\r\\n``; a file name
ending in ``.gz`` means gzip. Writing goes to a temporary file in the target's folder that is
then renamed over the target, so an interrupted write never leaves a half-written file.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from pathlib import Path

from xdex.atomic import atomic_path
from xdex.data.errors import ProblemLog

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 16


def read_lines(path: Path, log: ProblemLog, *, allow_empty: bool = False) -> list[str]:
    """The lines of ``path`` without their line ends; problems go to ``log``.

    A line that is not valid UTF-8 is reported and decoded with replacement characters, so
    the lines after it keep their numbers. Of a truncated gzip file the complete lines are
    returned. An empty file is a problem unless ``allow_empty``.
    """
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        if raw and not raw.startswith(GZIP_MAGIC):
            log.add(path, None, "the file name ends in .gz but the file is not gzip-compressed")
            return []
        raw, complete = _gunzip(raw, path, log)
        allow_empty = allow_empty or not complete
    elif raw.startswith(GZIP_MAGIC):
        log.add(path, None, "the file is gzip-compressed but its name does not end in .gz")
        return []
    if not raw:
        if not allow_empty:
            log.add(path, None, "the file is empty")
        return []
    try:
        lines = raw.decode("utf-8").replace("\r\n", "\n").split("\n")
    except UnicodeDecodeError:
        lines = [_decode_line(line, path, number, log) for number, line in enumerate(raw.split(b"\n"), 1)]
    if raw.endswith(b"\n"):
        lines.pop()  # the empty string after the last line end
    return lines


def _decode_line(line: bytes, path: Path, number: int, log: ProblemLog) -> str:
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        log.add(path, number, f"invalid UTF-8 at byte {e.start + 1} of the line ({line[e.start : e.end]!r})")
        return line.decode("utf-8", errors="replace")


def _gunzip(raw: bytes, path: Path, log: ProblemLog) -> tuple[bytes, bool]:
    """The decompressed data and whether it is complete; of broken data, the lines before the break."""
    try:
        return gzip.decompress(raw), True
    except (OSError, EOFError, zlib.error) as e:
        prefix = _gunzip_prefix(raw)
        whole_lines = prefix[: prefix.rfind(b"\n") + 1]
        n = whole_lines.count(b"\n")
        log.add(path, n + 1, f"the gzip data is truncated or corrupt after line {n} ({e})")
        return whole_lines, False


def _gunzip_prefix(raw: bytes) -> bytes:
    """As much of the first gzip member as decompresses before the data breaks."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    parts = []
    try:
        for start in range(0, len(raw), _CHUNK):
            parts.append(inflater.decompress(raw[start : start + _CHUNK]))
    except zlib.error:
        pass
    return b"".join(parts)


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` (each followed by ``\\n``, UTF-8) to ``path`` atomically; gzip if it ends in ``.gz``.

    Compressed output is reproducible: no file name or time stamp goes into the gzip header.
    """
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        out = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if path.name.endswith(".gz") else raw
        for line in lines:
            out.write((line + "\n").encode("utf-8"))
        if out is not raw:
            out.close()
