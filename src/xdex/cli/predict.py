"""`xdex predict`: top-k labels for the texts of a file, with a trained model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import typer

from xdex.atomic import atomic_path
from xdex.cli.evaluate import SEARCH_HELP
from xdex.data.errors import DataFormatError, Problem


def read_texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a JSONL file with a "text" field per line (``.jsonl``) or of plain lines.

    The file is streamed; the first bad line stops the run with its file and line number.
    """
    as_json = path.suffix == ".jsonl"
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise DataFormatError([Problem(str(path), line_no, f"invalid UTF-8 at byte {e.start + 1}")]) from None
            if not as_json:
                yield line_no, line
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DataFormatError([Problem(str(path), line_no, f"malformed JSON ({e})")]) from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise DataFormatError([Problem(str(path), line_no, 'expected an object with a string "text" field')])
            yield line_no, row["text"]


def register(app: typer.Typer) -> None:
    @app.command("predict")
    def predict_cmd(
        model_dir: Path = typer.Argument(..., help="Model directory written by `xdex train`."),
        input: Path = typer.Option(..., "--input", help="Texts: JSONL with a 'text' field, or one text per line."),
        output: Path = typer.Option(..., "--output", help='JSONL out: {"id": row, "labels": [...], "scores": [...]}'),
        k: int = typer.Option(10, "--k", min=1, help="Labels per text."),
        batch_size: int = typer.Option(4096, "--batch-size", min=1, help="Texts encoded at a time."),
        search: Optional[str] = typer.Option(None, "--search", help=SEARCH_HELP),
    ) -> None:
        """Predict the top-k labels of every input text; rows keep the input order (id = 0-based row)."""
        from tqdm.auto import tqdm

        from xdex.inference.model import DualEncoderModel

        if output.exists():
            raise FileExistsError(f"{output} exists; choose another --output")
        model = DualEncoderModel.load(model_dir)
        if search is not None:
            model = model.with_search(search)
        row = 0
        with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as out:
            chunk: list[str] = []

            def flush() -> None:
                nonlocal row
                ranking = model.predict(chunk, k)
                for ids, scores in zip(ranking.indices, ranking.scores):
                    keep = ids >= 0
                    out.write(json.dumps({"id": row, "labels": ids[keep].tolist(),
                                          "scores": [round(float(s), 6) for s in scores[keep]]}) + "\n")
                    row += 1
                chunk.clear()

            for _, text in tqdm(read_texts(input), desc="predict", unit="text"):
                chunk.append(text)
                if len(chunk) == batch_size:
                    flush()
            if chunk:
                flush()
        typer.echo(f"{row} predictions written to {output}")
