"""`xdex predict`: the top-k labels of every line of a file, streamed, resumable.

The output has one JSON row per input line, in input order (``id`` = 0-based row = line number - 1)::

    {"id": 0, "labels": [3, 17], "scores": [0.91, 0.88], "keys": ["l3", "l17"]}
    {"id": 1, "line": 2, "error": "malformed JSON (...)", "labels": [], "scores": [], "keys": []}

``labels`` are catalogue rows and ``keys`` the labels' ids. A bad line (invalid UTF-8, malformed JSON, no
string "text", a blank text) gets an empty row with its error, so rows line up with input lines and
``xdex evaluate --pred`` reads the file as it is.

Rows are appended and flushed a batch at a time, so a run that is stopped leaves its finished rows, and
running the same command again continues after the last complete row (a partial last line is cut off
and redone). The settings of the run (input, model, k, search mode, number of labels) are kept next to the
output in ``OUTPUT.run.json``; a run with other settings is refused rather than mixed into the same file.
Memory is bounded by the batch size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TextIO

import typer

from xdex.cli.evaluate import SEARCH_HELP
from xdex.data.errors import Problem
from xdex.text.jsonfile import read_json, write_json

if TYPE_CHECKING:
    from xdex.inference.model import DualEncoderModel

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


def read_lines(path: Path, skip: int = 0) -> Iterator[tuple[int, str | Problem]]:
    """(line number, text or what is wrong) of every line after the first ``skip`` of a JSONL file with a
    "text" field per line (``.jsonl``) or of a file of one text per line, streamed."""
    as_json = path.suffix == ".jsonl"
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
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
            row = json.loads(line)
        except ValueError as e:
            raise ValueError(f"malformed JSON ({e})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise ValueError('expected an object with a string "text" field')
        line = row["text"]
    if not line.strip():
        raise ValueError("blank text")
    return line


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
    if saved != settings:
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
    if complete < output.stat().st_size:
        with open(output, "r+b") as f:
            f.truncate(complete)
    return rows


def register(app: typer.Typer) -> None:
    @app.command("predict")
    def predict_cmd(
        model_dir: Path = typer.Argument(..., help="Model directory written by `xdex train`."),
        input: Path = typer.Option(..., "--input", help="Texts: JSONL with a 'text' field, or one text per line."),
        output: Path = typer.Option(..., "--output", help="JSONL, one row per input line (see `xdex predict`)."),
        k: int = typer.Option(10, "--k", min=1, help="Labels per text."),
        batch_size: int = typer.Option(4096, "--batch-size", min=1, help="Texts encoded and written at a time."),
        search: Optional[str] = typer.Option(None, "--search", help=SEARCH_HELP),
        overwrite: bool = typer.Option(False, "--overwrite", help="Start afresh instead of continuing OUTPUT."),
    ) -> None:
        """Predict the top-k labels of every input line: one JSON row per line, in input order, with "id" (the
        0-based row), "labels" (catalogue rows), "scores" and "keys" (label ids).

        Rows are written a batch at a time; running the same command again after a stop continues after the
        last finished row. A bad line (invalid UTF-8, malformed JSON, no "text", blank text) is listed on stderr
        as FILE:LINE: problem and gets a row with "error" and no labels; the other lines go on. Exit code 0 when
        every line was predicted, 3 when some lines were bad, 1 when the run could not be done.
        """
        from tqdm.auto import tqdm

        from xdex.inference.model import DualEncoderModel

        if not input.is_file():
            raise FileNotFoundError(f"input file not found: {input}")
        if output.resolve() == input.resolve():
            raise ValueError(f"--output {output} is the input file; choose another --output")
        model = DualEncoderModel.load(model_dir)
        model = model if search is None else model.with_search(search)
        settings = {"input": str(input.resolve()), "model": str(model_dir.resolve()), "k": k,
                    "search": model.search, "labels": len(model.label_ids)}
        bad = BadLines()
        done = 0 if overwrite else resume(output, settings, input, bad)
        total = count_lines(input)
        if done > total:
            raise ValueError(f"{output} has {done} rows but {input} has only {total} lines; the input changed "
                             "since: add --overwrite to start afresh")
        if done == 0:
            write_json(settings_path(output), settings)
            output.write_bytes(b"")
        with open(output, "a", encoding="utf-8") as out, \
                tqdm(total=total, initial=done, desc="predict", unit="line") as progress:
            batch: list[tuple[int, str | Problem]] = []
            for line in read_lines(input, skip=done):
                batch.append(line)
                if len(batch) == batch_size:
                    _write_batch(model, batch, k, out, bad)
                    progress.update(len(batch))
                    batch = []
            if batch:
                _write_batch(model, batch, k, out, bad)
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


def _write_batch(
    model: DualEncoderModel, batch: list[tuple[int, str | Problem]], k: int, out: TextIO, bad: BadLines
) -> None:
    """Predict the good lines of ``batch``, append one row per line to ``out`` and flush it."""
    texts = [item for _, item in batch if isinstance(item, str)]
    ranking = model.predict(texts, k) if texts else None
    rows, good = [], iter(zip(ranking.indices, ranking.scores) if ranking is not None else ())
    for line_no, item in batch:
        if isinstance(item, Problem):
            bad.add(item)
            rows.append({"id": line_no - 1, "line": line_no, "error": item.message, "labels": [], "scores": [],
                         "keys": []})
            continue
        ids, scores = next(good)
        keep = ids >= 0
        rows.append({"id": line_no - 1, "labels": ids[keep].tolist(),
                     "scores": [round(float(s), 6) for s in scores[keep]],
                     "keys": [model.label_ids[j] for j in ids[keep]]})
    out.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    out.flush()
