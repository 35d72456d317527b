"""`xdex predict`: the top-k labels of every line of a file, streamed, resumable.

The output has one JSON row per input line, in input order (``id`` = 0-based row = line number - 1)::

    {"id": 0, "labels": [3, 17], "scores": [0.91, 0.88], "keys": ["l3", "l17"]}
    {"id": 1, "line": 2, "error": "malformed JSON (...)", "labels": [], "scores": [], "keys": []}

``labels`` are catalogue rows and ``keys`` the labels' ids. A bad line (invalid UTF-8, malformed or too deeply
nested JSON, no string "text", a text with a lone surrogate, a blank text, a text the model fails on) gets an
empty row with its error, so rows line up with input lines and ``xdex evaluate --pred`` reads the file as it is.

Rows are appended and flushed a batch at a time, so a run that is stopped leaves its finished rows, and
running the same command again continues after the last complete row (a partial last line is cut off
and redone). The settings of the run (input, model, k, search mode, number of labels) are kept next to the
output in ``OUTPUT.run.json``; a run with other settings is refused rather than mixed into the same file. The
sidecar also holds a fingerprint of the input lines read so far (their count and SHA-256), written before each
batch's rows, and a resume refuses an input whose first lines are no longer those.
Memory is bounded by the batch size.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np
import typer

from xdex.cli.common import loaded_objects_frozen
from xdex.cli.evaluate import DEVICE_HELP, SEARCH_HELP
from xdex.data.errors import Problem
from xdex.jsonfile import parse_json_line, read_json, write_json

if TYPE_CHECKING:
    from xdex.inference.model import DualEncoderModel

logger = logging.getLogger(__name__)

EXIT_BAD_LINES = 3
LISTED = 20  # bad lines listed on stderr; the others are counted


@dataclass
class BadLines:
    """The bad input lines of a run: the first ``LISTED`` kept for the report, all counted."""

    listed: list[Problem] = field(default_factory=list)
    count: int = 0

    def add(self, problem: Problem) -> None:
        self.count += 1
        if len(self.listed) < LISTED:
            self.listed.append(problem)


def read_lines(path: Path, skip: int = 0, digest: hashlib._Hash | None = None
               ) -> Iterator[tuple[int, str | Problem]]:
    """(line number, text or what is wrong) of every line after the first ``skip`` of a JSONL file with a
    "text" field per line (``.jsonl``) or of a file of one text per line, streamed. ``digest`` is fed the
    bytes of every line read, the skipped ones included (:func:`input_fingerprint`)."""
    as_json = path.suffix == ".jsonl"
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            if digest is not None:
                digest.update(raw)
            if line_no <= skip:
                continue
            try:
                yield line_no, _text(raw, as_json)
            except ValueError as e:
                yield line_no, Problem(str(path), line_no, str(e))


def _text(raw: bytes, as_json: bool) -> str:
    """The text of one line; a ``ValueError`` says what is wrong with it."""
    try:
        line = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise ValueError(f"invalid UTF-8 at byte {e.start + 1}") from None
    if as_json:
        try:
            row = parse_json_line(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"malformed JSON ({e})") from None
        except ValueError as e:  # nested too deeply, a lone surrogate, a number Python refuses
            message = str(e)
            raise ValueError(message if "surrogate" in message else f"malformed JSON ({message})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise ValueError('expected an object with a string "text" field')
        line = row["text"]
    if not line.strip():
        raise ValueError("blank text")
    return line


def input_fingerprint(path: Path, lines: int) -> tuple[int, str]:
    """(lines read, SHA-256 of their bytes) of the first ``lines`` lines of ``path`` (fewer if it is shorter)."""
    digest, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for raw in f:
            if n == lines:
                break
            digest.update(raw)
            n += 1
    return n, digest.hexdigest()


def count_lines(path: Path) -> int:
    """The number of lines of a file (a last line without a newline counts)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def settings_path(output: Path) -> Path:
    return output.with_name(output.name + ".run.json")


def resume(output: Path, settings: dict, input: Path, bad: BadLines) -> int:
    """The number of rows a previous run with the same ``settings`` finished in ``output`` (0 when there is no
    output), after checking them and cutting off a partial last line; its error rows go to ``bad``."""
    if not output.exists():
        return 0
    marker = settings_path(output)
    if not marker.is_file():
        raise FileExistsError(f"{output} exists and was not written by `xdex predict` (no {marker.name}); "
                              "choose another --output, or add --overwrite to replace it")
    saved = read_json(marker)
    saved = saved if isinstance(saved, dict) else {}
    if any(saved.get(name) != value for name, value in settings.items()):
        changed = [f"{name} {saved.get(name)!r} now {value!r}" for name, value in settings.items()
                   if saved.get(name) != value]
        raise ValueError(f"{output} holds the predictions of another run ({'; '.join(changed)}); choose another "
                         "--output, or add --overwrite to start afresh")
    rows = complete = 0
    with open(output, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # the partial last line of a stopped run
            try:
                record = json.loads(raw)
                if not isinstance(record, dict) or record.get("id") != rows:
                    raise ValueError(f'expected a row with "id": {rows}')
            except ValueError as e:
                raise ValueError(f"{output}:{rows + 1}: damaged row ({e}); add --overwrite to start afresh") from None
            if "error" in record:
                bad.add(Problem(str(input), rows + 1, str(record["error"])))
            rows += 1
            complete += len(raw)
    if rows:
        check_input(input, output, saved, rows)
    if complete < output.stat().st_size:
        with open(output, "r+b") as f:
            f.truncate(complete)
    return rows


def check_input(input: Path, output: Path, saved: dict, rows: int) -> None:
    """Refuse to continue ``output`` when the input lines its rows were predicted from have changed since: the
    sidecar ``saved`` holds the fingerprint of the input lines read so far (a batch ahead of the rows)."""
    lines, digest = saved.get("input_lines"), saved.get("input_sha256")
    if not isinstance(lines, int) or not isinstance(digest, str):
        raise ValueError(f"{settings_path(output)} has no fingerprint of the input, so it cannot be checked that "
                         f"{input} is the file {output} was predicted from; add --overwrite to start afresh")
    found, now = input_fingerprint(input, lines)
    if found < lines:
        raise ValueError(f"{output} has {rows} rows but {input} has only {found} lines; the input changed since: "
                         "add --overwrite to start afresh")
    if now != digest:
        raise ValueError(f"the first {lines} lines of {input} are not those {output} was predicted from (their "
                         "SHA-256 differs): the input changed since; add --overwrite to start afresh, or write to "
                         "another --output")


def register(app: typer.Typer) -> None:
    @app.command("predict")
    def predict_cmd(
        model_dir: Path = typer.Argument(..., help="Model directory written by `xdex train`."),
        input: Path = typer.Option(..., "--input", help="Texts: JSONL with a 'text' field, or one text per line."),
        output: Path = typer.Option(..., "--output", help="JSONL, one row per input line (see `xdex predict`)."),
        k: int = typer.Option(10, "--k", min=1, help="Labels per text."),
        batch_size: int = typer.Option(4096, "--batch-size", min=1, help="Texts encoded and written at a time."),
        search: str | None = typer.Option(None, "--search", help=SEARCH_HELP),
        overwrite: bool = typer.Option(False, "--overwrite", help="Start afresh instead of continuing OUTPUT."),
        device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    ) -> None:
        """Predict the top-k labels of every input line: one JSON row per line, in input order, with "id" (the
        0-based row), "labels" (catalogue rows), "scores" and "keys" (label ids).

        Rows are written a batch at a time; running the same command again after a stop continues after the
        last finished row (refused if the input's contents changed). A bad line (invalid UTF-8, malformed JSON, no
        "text", a lone surrogate, blank text, a text the model fails on) is listed on stderr
        as FILE:LINE: problem and gets a row with "error" and no labels; the other lines go on. Exit code 0 when
        every line was predicted, 3 when some lines were bad, 1 when the run could not be done.
        """
        from tqdm.auto import tqdm

        from xdex.inference.model import DualEncoderModel

        if not input.is_file():
            raise FileNotFoundError(f"input file not found: {input}")
        if output.resolve() == input.resolve():
            raise ValueError(f"--output {output} is the input file; choose another --output")
        model = DualEncoderModel.load(model_dir).to(device)
        model = model if search is None else model.with_search(search)
        settings = {"input": str(input.resolve()), "model": str(model_dir.resolve()), "k": k,
                    "search": model.search, "labels": len(model.label_ids)}
        bad = BadLines()
        done = 0 if overwrite else resume(output, settings, input, bad)
        total = count_lines(input)
        if done > total:
            raise ValueError(f"{output} has {done} rows but {input} has only {total} lines; the input changed "
                             "since: add --overwrite to start afresh")
        digest = hashlib.sha256()
        if done == 0:
            write_json(settings_path(output), {**settings, "input_lines": 0, "input_sha256": digest.hexdigest()})
            output.write_bytes(b"")
        with open(output, "a", encoding="utf-8") as out, loaded_objects_frozen(), \
                tqdm(total=total, initial=done, desc="predict", unit="line", disable=None) as progress:
            batch: list[tuple[int, str | Problem]] = []
            for line in read_lines(input, skip=done, digest=digest):
                batch.append(line)
                if len(batch) == batch_size:
                    _write_batch(model, batch, k, out, bad, input, {**settings, **_fingerprint(batch, digest)},
                                 settings_path(output))
                    progress.update(len(batch))
                    batch = []
            if batch:
                _write_batch(model, batch, k, out, bad, input, {**settings, **_fingerprint(batch, digest)},
                             settings_path(output))
                progress.update(len(batch))
        for problem in bad.listed:
            typer.echo(str(problem), err=True)
        if bad.count > len(bad.listed):
            typer.echo(f"... and {bad.count - len(bad.listed)} more bad lines (their rows in {output} say why)",
                       err=True)
        typer.echo(f"{total} rows in {output} ({total - done} predicted now, {done} from before); "
                   f"{bad.count} bad lines")
        if bad.count:
            raise typer.Exit(EXIT_BAD_LINES)


def _fingerprint(batch: list[tuple[int, str | Problem]], digest: hashlib._Hash) -> dict:
    """The sidecar's fingerprint of the input read through the end of ``batch``."""
    return {"input_lines": batch[-1][0], "input_sha256": digest.hexdigest()}


def _write_batch(model: DualEncoderModel, batch: list[tuple[int, str | Problem]], k: int, out: TextIO,
                 bad: BadLines, input: Path, sidecar: dict, sidecar_path: Path) -> None:
    """Predict the good lines of ``batch``, append one row per line to ``out`` and flush it.

    The sidecar, with the fingerprint of the input through this batch, is written first, so that it always
    covers every row of the output."""
    texts = [item for _, item in batch if isinstance(item, str)]
    results = iter(_rank(model, texts, k))
    write_json(sidecar_path, sidecar)
    rows = []
    for line_no, item in batch:
        result = item if isinstance(item, Problem) else next(results)
        if isinstance(result, str):
            result = Problem(str(input), line_no, result)
        if isinstance(result, Problem):
            bad.add(result)
            rows.append({"id": line_no - 1, "line": line_no, "error": _printable(result.message), "labels": [],
                         "scores": [], "keys": []})
            continue
        ids, scores = result
        keep = ids >= 0
        rows.append({"id": line_no - 1, "labels": ids[keep].tolist(),
                     "scores": [round(float(s), 6) for s in scores[keep]],
                     "keys": [model.label_ids[j] for j in ids[keep]]})
    out.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    out.flush()


PER_TEXT_ERRORS = (ValueError, TypeError, RecursionError)


def _rank(model: DualEncoderModel, texts: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray] | str]:
    """(label rows, scores) of each text, or what went wrong with it: when a batch fails, its texts are
    predicted one by one, so that one text the model cannot take costs only its own row."""
    if not texts:
        return []
    try:
        ranking = model.predict(texts, k)
        return list(zip(ranking.indices, ranking.scores, strict=True))
    except PER_TEXT_ERRORS as e:
        if len(texts) == 1:
            logger.debug("line not predicted", exc_info=True)
            return [f"cannot be predicted ({type(e).__name__}: {e})"]
    return [result for text in texts for result in _rank(model, [text], k)]


def _printable(message: str) -> str:
    """``message`` with anything that cannot be written as UTF-8 (a lone surrogate) escaped."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")
