"""Labels added to a trained model after training, known by their texts alone (zero-shot).

The trained files of a model directory are never rewritten: the added labels live in one file,
``added_labels.npz``, replaced atomically on every addition. It holds two arrays:

* ``labels``: UTF-8 JSON (as bytes) of ``{"keys": [...], "texts": [...], "search": ..., "n_trained": ...,
  "model": ...}``: the added labels in the order added (they take the catalogue rows after the trained
  labels), the search mode their vectors are for (a model loaded in another mode recomputes them), and the
  number of trained labels and a fingerprint of the trained model (SHA-256 of its training metadata and
  trained label keys), which the model directory must still match;
* ``vectors``: their search vectors ``[A, d]`` (float32), from the network's ``new_label_vectors``.

Keys are given by the caller or generated as ``added-<row>`` (the label's row in the catalogue), with
``-2``, ``-3``, ... appended in the rare case that this key is taken; a generated key never equals an
existing one. A key is a non-empty string without surrounding whitespace; texts must not be blank or hold
a lone surrogate (text that is not valid Unicode). A label added from now on (:func:`check_new_labels`) also
has a printable key of at most ``MAX_KEY_CHARS`` characters (no newline or other control character, and no
path segment ``.`` or ``..``, so that it can be fetched back by URL and logged) and a text of at most
``MAX_LABEL_TEXT_CHARS`` characters; files written before these rules are still read.

Added labels are searched exactly, apart from the trained index, and the two top-k lists merged; ties
go to the lower row, so over an exact index the result is that of one exact search over all labels.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xdex.atomic import atomic_path
from xdex.data.errors import UNREADABLE_NPZ

ADDED_LABELS = "added_labels.npz"
KEY_PREFIX = "added-"
MAX_KEY_CHARS = 256  # characters of a new label's key
MAX_LABEL_TEXT_CHARS = 10_000  # characters of a new label's text; encoders read far fewer (their max_length)


class KeyConflict(ValueError):
    """A label key that is given twice, or that the model already has."""


@dataclass(frozen=True)
class AddedLabels:
    """The contents of ``added_labels.npz``; ``vectors`` is None when they were for another search mode."""

    keys: list[str]
    texts: list[str]
    vectors: np.ndarray | None


def shown(value: str, limit: int = 60) -> str:
    """``value`` quoted for a message or a log line: ``repr`` (control characters and lone surrogates escaped, so
    a line cannot be forged) of at most its first ``limit`` characters."""
    return repr(value[:limit]) + (f" ... ({len(value)} characters)" if len(value) > limit else "")


def check_texts(texts: Sequence[str], blank_ok: bool = False) -> list[str]:
    """``texts`` as a list, refused when one is not a string, holds a lone surrogate or (unless ``blank_ok``) is
    blank."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string (wrap it in a list)")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"text {i} is a {type(text).__name__}, not a string")
        if not blank_ok and not text.strip():
            raise ValueError(f"text {i} is blank")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"text {i} is not valid Unicode: a lone surrogate at character {e.start}") from None
    return out


def check_new_key(key: str) -> None:
    """Refuse (``ValueError``) a key that a new label may not have (module docstring)."""
    if not key or key != key.strip():
        raise ValueError(f"label id {shown(key)} must be a non-empty string without surrounding whitespace")
    if len(key) > MAX_KEY_CHARS:
        raise ValueError(f"label id {shown(key)} is longer than {MAX_KEY_CHARS} characters")
    if not key.isprintable():
        raise ValueError(f"label id {shown(key)} holds a character that is not printable (a control character, "
                         "a line break or a lone surrogate)")
    if {".", ".."} & set(key.split("/")):
        raise ValueError(f"label id {shown(key)} has a path segment '.' or '..', which URLs drop (GET /labels/{{id}} "
                         "could not find it)")


def check_new_labels(texts: Sequence[str], keys: Sequence[str] | None) -> tuple[list[str], list[str] | None]:
    """``texts`` and ``keys`` of labels to add as lists, refused (``TypeError``/``ValueError``, :class:`KeyConflict`
    for a repeated key) when they break the rules of new labels (module docstring); taken keys are
    :func:`new_keys`'s to find."""
    texts = check_texts(texts)
    for i, text in enumerate(texts):
        if len(text) > MAX_LABEL_TEXT_CHARS:
            raise ValueError(f"text {i} has {len(text)} characters; a label's text may have at most "
                             f"{MAX_LABEL_TEXT_CHARS}")
    if keys is None:
        return texts, None
    if isinstance(keys, str):
        raise TypeError("keys must be a sequence of strings, not one string (wrap it in a list)")
    keys = list(keys)
    if len(keys) != len(texts):
        raise ValueError(f"{len(keys)} keys for {len(texts)} texts; give one key per text, or none")
    seen: set[str] = set()
    for i, key in enumerate(keys):
        if not isinstance(key, str):
            raise TypeError(f"key {i} is a {type(key).__name__}, not a string")
        try:
            check_new_key(key)
        except ValueError as e:
            raise ValueError(f"key {i}: {e}") from None
        if key in seen:
            raise KeyConflict(f"label id {shown(key)} is given twice")
        seen.add(key)
    return texts, keys


def new_keys(count: int, first_row: int, taken: Collection[str], keys: Sequence[str] | None = None) -> list[str]:
    """Keys of ``count`` new labels at rows ``first_row``, ...: ``keys`` checked against ``taken`` and each other
    (:class:`KeyConflict` for a repeat), or generated (module docstring) when None."""
    if keys is None:
        out = []
        for row in range(first_row, first_row + count):
            key, suffix = f"{KEY_PREFIX}{row}", 1
            while key in taken:
                suffix += 1
                key = f"{KEY_PREFIX}{row}-{suffix}"
            out.append(key)
        return out
    if isinstance(keys, str):
        raise TypeError("keys must be a sequence of strings, not one string (wrap it in a list)")
    out = list(keys)
    if len(out) != count:
        raise ValueError(f"{len(out)} keys for {count} texts; give one key per text, or none")
    seen: set[str] = set()
    for i, key in enumerate(out):
        if not isinstance(key, str):
            raise TypeError(f"key {i} is a {type(key).__name__}, not a string")
        if not key or key != key.strip():
            raise ValueError(f"key {i} ({shown(key)}) must be a non-empty string without surrounding whitespace")
        if key in taken:
            raise KeyConflict(f"label id {shown(key)} already exists")
        if key in seen:
            raise KeyConflict(f"label id {shown(key)} is given twice")
        seen.add(key)
    return out


def fingerprint(meta: dict, config: dict, trained_keys: Sequence[str]) -> str:
    """SHA-256 of a model's training metadata, recipe and trained label keys: the model a file of added labels
    is for."""
    payload = json.dumps([meta, config, list(trained_keys)], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def write_added(
    folder: str | Path, keys: Sequence[str], texts: Sequence[str], vectors: np.ndarray, search: str, n_trained: int,
    model: str,
) -> None:
    """Replace ``folder/added_labels.npz`` by these labels of the model with :func:`fingerprint` ``model``,
    atomically; with no labels, remove it."""
    path = Path(folder) / ADDED_LABELS
    if not keys:
        path.unlink(missing_ok=True)
        return
    header = {"keys": list(keys), "texts": list(texts), "search": search, "n_trained": n_trained, "model": model}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, labels=np.frombuffer(json.dumps(header, ensure_ascii=False).encode("utf-8"), np.uint8),
                 vectors=np.ascontiguousarray(vectors, dtype=np.float32))


def read_added_labels(folder: str | Path) -> tuple[list[str], list[str]]:
    """Keys and texts of the labels in ``folder/added_labels.npz`` as written (empty lists when there is none),
    without their vectors or any check against a model."""
    path = Path(folder) / ADDED_LABELS
    if not path.is_file():
        return [], []
    header, _ = _read_file(path, vectors=False)
    return header["keys"], header["texts"]


def _read_file(path: Path, vectors: bool = True) -> tuple[dict, np.ndarray | None]:
    """The header and (when ``vectors``) the vectors of a file of added labels; ``ValueError`` when unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(data["labels"].tobytes().decode("utf-8"))
            array = data["vectors"] if vectors else None
    except UNREADABLE_NPZ as e:
        raise ValueError(f"{path}: not a readable file of added labels ({type(e).__name__}: {e})") from None
    fields = {"keys", "texts", "n_trained", "search", "model"}
    if not isinstance(header, dict) or not fields <= header.keys():
        raise ValueError(f"{path}: not a readable file of added labels (its header lacks one of "
                         f"{', '.join(sorted(fields))})")
    return header, array


def read_added(
    folder: str | Path, trained_keys: Sequence[str], model: str, search: str, dim: int
) -> AddedLabels | None:
    """The labels added to the model directory ``folder`` (None when there are none), checked against its
    ``trained_keys`` and :func:`fingerprint` ``model``; their vectors are kept when they are ``dim``-wide
    vectors for ``search``."""
    path = Path(folder) / ADDED_LABELS
    if not path.is_file():
        return None
    header, vectors = _read_file(path)
    keys, texts, n_trained = header["keys"], header["texts"], header["n_trained"]
    mode, owner = header["search"], header["model"]
    if n_trained != len(trained_keys):
        raise ValueError(f"{path}: written for a model of {n_trained} trained labels, but this model has "
                         f"{len(trained_keys)}; the file belongs to another model")
    if owner != model:
        raise ValueError(f"{path}: written for another model (its training metadata or label keys differ)")
    try:
        texts = check_texts(texts)
        keys = new_keys(len(texts), len(trained_keys), set(trained_keys), keys)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: damaged: {e}") from None
    if mode != search:
        return AddedLabels(keys, texts, None)
    assert vectors is not None  # _read_file reads them unless told not to
    if vectors.dtype != np.float32 or vectors.shape != (len(keys), dim) or not np.isfinite(vectors).all():
        raise ValueError(f"{path}: damaged: expected finite float32 vectors of shape {(len(keys), dim)}, "
                         f"got {vectors.dtype} {vectors.shape}")
    return AddedLabels(keys, texts, vectors)
