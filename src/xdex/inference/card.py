"""The model card: ``MODEL_DIR/README.md``, what a model is and how it was made, for people.

Training writes it with the model (:func:`write_card`, from the metadata of ``meta.json``): the recipe, the
dataset and its fingerprint, label and document counts, the training time, the validation metrics of the
selected epoch, the ranking stage served, and the command that made the model (``xdex train ...``; a model
trained from Python says so). ``xdex evaluate MODEL --data DATA --record`` adds the test metrics
(:func:`record_evaluation`): one block per dataset and search mode, replaced when that evaluation is recorded
again; the rest of the file, user edits included, is kept.

The card is documentation, deliberately outside the file list of ``meta.json``: loading never reads it, so
recording an evaluation or editing the card leaves the model's checksums valid. Every write is atomic.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from xdex.atomic import atomic_write_text

CARD = "README.md"
TEST_BEGIN, TEST_END = "<!-- xdex:test-metrics -->", "<!-- /xdex:test-metrics -->"
EVAL_END = "<!-- /xdex:evaluation -->"
NO_TEST = "No evaluation recorded yet: `xdex evaluate MODEL_DIR --data DATA --record` adds one here."


def command_line(argv: Sequence[str] | None) -> str | None:
    """A command as a shell would take it back, or None when there was none (the Python API)."""
    return shlex.join(argv) if argv else None


def render_card(meta: Mapping, served: str | None = None) -> str:
    """The card of a model with training metadata ``meta`` (``meta.json`` without its file list); ``served``:
    the ranking the model's ranking stage serves (None: the model has none)."""
    method, dataset = meta.get("method", "?"), meta.get("dataset", "?")
    rows = [
        ("recipe", f"`{method}`"),
        ("dataset", f"`{dataset}`"),
        ("data fingerprint", f"`{meta.get('data_fingerprint', '?')}` (training texts, label sets and label texts)"),
        ("labels", _count(meta.get("n_labels"))),
        ("training documents", _count(meta.get("n_train"))),
        ("validation documents", _count(meta.get("n_validation"))),
        ("training time", f"{meta['train_seconds']:.1f} s" if isinstance(meta.get("train_seconds"), int | float)
         else "?"),
        ("selected epoch", str(meta.get("best_epoch", "?"))),
        ("ranking served", _served(served)),
        ("xdex / torch / python", " / ".join(str(meta.get(k, "?")) for k in ("xdex_version", "torch_version",
                                                                          "python"))),
    ]
    lines = [f"# {method} model trained on {dataset}", "",
             "An xdex model directory: it ranks labels for texts without the training data (`xdex predict`, "
             "`xdex serve`, `xdex.Model.load`).", "",
             "## Training", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    lines += ["## Validation metrics of the selected epoch", ""]
    valid = meta.get("validation")
    lines += _metric_table(valid) if valid else ["None: the model was trained without a validation split."]
    ranker = meta.get("ranker")
    if isinstance(ranker, Mapping) and ranker:
        lines += ["", "Each ranking of the ranking stage on validation (cross-fitted):", ""]
        lines += _metric_table({f"{ranking} {k}": v for ranking, figures in ranker.items()
                                if isinstance(figures, Mapping) for k, v in figures.items()})
    command = command_line(meta.get("command"))
    lines += ["", "## Command", ""]
    lines += (["```sh", command, "```"] if command is not None
              else ["Trained from Python (the xdex API), not from the command line: no command was recorded."])
    lines += ["", "## Test metrics", "", TEST_BEGIN, NO_TEST, TEST_END, "",
              "## Files", "",
              "`meta.json` lists every file of the model with its size and SHA-256, checked when the model loads. "
              "This card is not among them: it is documentation, and editing it does not affect the model.", ""]
    return "\n".join(lines)


def write_card(folder: str | Path, meta: Mapping, served: str | None = None) -> Path:
    """Write the card of ``meta`` (see :func:`render_card`) to ``folder/README.md`` atomically; its path."""
    path = Path(folder) / CARD
    atomic_write_text(path, render_card(meta, served))
    return path


def record_evaluation(
    folder: str | Path, meta: Mapping, *, dataset: str, fingerprint: str, n_test: int, search: str,
    metrics: Mapping[str, float], argv: Sequence[str] | None = None, served: str | None = None,
) -> Path:
    """Add the test ``metrics`` of an evaluation on ``dataset`` (ranking with ``search``) to the card of the
    model in ``folder`` (training metadata ``meta``), atomically; the path of the card.

    A block recorded before for the same dataset and search mode is replaced; other blocks and the rest of the
    card stay as they are. A card without a test-metrics section (edited by hand) gets one at its end; a model
    without a card gets one written from ``meta``.
    """
    path = Path(folder) / CARD
    text = path.read_text(encoding="utf-8") if path.is_file() else render_card(meta, served)
    key = f"<!-- xdex:evaluation dataset={_attribute(dataset)} search={_attribute(search)} -->"
    block = "\n".join([key, *_evaluation(meta, dataset, fingerprint, n_test, search, metrics, argv), EVAL_END])
    section = re.compile(re.escape(TEST_BEGIN) + r"\n(.*?)" + re.escape(TEST_END), re.DOTALL)
    found = section.search(text)
    if found is None:
        text = text.rstrip("\n") + "\n\n## Test metrics\n\n" + f"{TEST_BEGIN}\n{block}\n{TEST_END}\n"
    else:
        blocks = re.findall(r"<!-- xdex:evaluation .*? -->\n.*?" + re.escape(EVAL_END), found.group(1), re.DOTALL)
        blocks = [b for b in blocks if not b.startswith(key + "\n")] + [block]
        text = text[: found.start()] + f"{TEST_BEGIN}\n" + "\n\n".join(blocks) + f"\n{TEST_END}" + text[found.end():]
    atomic_write_text(path, text)
    return path


def _evaluation(
    meta: Mapping, dataset: str, fingerprint: str, n_test: int, search: str, metrics: Mapping[str, float],
    argv: Sequence[str] | None,
) -> list[str]:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    same = ("the training data's" if fingerprint == meta.get("data_fingerprint")
            else "not the training data's")
    command = command_line(argv)
    lines = [f"### `{dataset}`, {search} ranking", "",
             f"{_count(n_test)} test documents, filter pairs removed; data fingerprint `{fingerprint}` ({same}); "
             f"recorded {when}.", ""]
    if command is not None:
        lines += ["```sh", command, "```", ""]
    return lines + _metric_table(metrics)


def _metric_table(metrics: Mapping) -> list[str]:
    """A table of ``metrics`` (name -> percent): one row per measure (``P``, ``nDCG``, ``dense_P`` ...), one
    column per k (``P@5`` is row ``P``, column ``@5``); a name without ``@k`` gets a row of its own."""
    rows: dict[str, dict[str, str]] = {}
    columns: dict[str, None] = {}
    for name, value in metrics.items():
        measure, at, k = str(name).rpartition("@")
        measure, column = (measure, f"@{k}") if at and k.isdecimal() else (str(name), "value")
        rows.setdefault(measure, {})[column] = f"{value:.2f}" if isinstance(value, int | float) else str(value)
        columns[column] = None
    order = sorted(columns, key=lambda c: (c == "value", int(c[1:]) if c != "value" else 0))
    lines = ["| metric | " + " | ".join(order) + " |", "|---|" + "---:|" * len(order)]
    return lines + [f"| {m} | " + " | ".join(row.get(c, "") for c in order) + " |" for m, row in rows.items()]


def _served(served: str | None) -> str:
    if served is None:
        return "none: the network's own ranking (no ranking stage)"
    return {"dense": "dense: the network's own ranking, chosen over the ranking stage's on validation",
            "lexical": "lexical: the ranking stage's lexical channel alone, chosen on validation",
            "fused": "fused: the ranking stage's fusion of every channel, chosen on validation"}.get(served, served)


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _attribute(value: str) -> str:
    """``value`` quoted for a marker line: no ``--`` or ``>`` that would end the HTML comment, no line break."""
    cleaned = re.sub(r"[\s>]+", " ", value).replace("--", "-").replace('"', "'")
    return f'"{cleaned}"'
