"""Bag-of-embeddings encoder (the "Bag-of-embedding" backbone of DEXA Table 5, after Astec).

A text ``x`` with token ids ``t_1 .. t_n`` (repeats kept, so term frequency counts) is embedded as
the weighted mean of its token embeddings,

    e(x) = P · (sum_i w(t_i) E[t_i]) / (sum_i w(t_i)),

with ``E`` the ``V x e`` embedding table, ``P`` an ``e -> d`` projection present only when the table
width ``e`` differs from ``d`` (started as a random semi-orthogonal matrix), and the token weights

* ``"idf"``: fixed inverse document frequencies, ``w(t) = ln((1 + N) / (1 + df(t))) + 1`` (smoothed IDF
  over the ``N`` texts of the training corpus, ``df(t)`` = texts containing ``t``), i.e. a TF-IDF
  weighted mean;
* ``"learned"``: ``w(t) = exp(u_t)``, one trainable scalar per token (started at ``ln idf`` when IDF
  weights are given, else at 0);
* ``"none"``: ``w(t) = 1``, the plain mean.

The output is not normalised (heads normalise). A text without tokens embeds to the zero vector.
With ``sparse=True`` the table (and the learned weights) get sparse gradients, for SparseAdam: a pass with
gradients looks up the batch's distinct tokens once, so those gradients hold one row per distinct token, not one
per token occurrence (docs/benchmarks.md, "Steps over large label pools, after").
Its operations are small: on a few cores one intra-op thread (``torch.set_num_threads(1)``) runs it
fastest (docs/benchmarks.md, "Encoders").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from xdex.atomic import atomic_path
from xdex.encoders.base import Encoder, read_config
from xdex.encoders.pretrained import read_embedding_matrix
from xdex.hardware import in_parts
from xdex.text.collate import bag_inputs
from xdex.text.tokenizer import Tokenizer
from xdex.text.tokens import TokenizedTexts

WEIGHTINGS = ("idf", "learned", "none")
WEIGHTS_FILE = "model.safetensors"


@numba.njit(cache=True, nogil=True, fastmath=True)
def _weighted_means(table: np.ndarray, weights: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
                    out: np.ndarray) -> None:
    """``out[i] = Σ w_t E[ids[t]] / Σ w_t`` over the tokens ``t`` of text ``i`` (``offsets[i] .. offsets[i + 1] - 1``;
    ``weights``: one per token occurrence), in float32; 0 for a text without tokens (its weights' sum is taken as
    float32's smallest normal, as in :meth:`BagOfEmbeddings.forward`)."""
    tiny = np.float32(1.1754944e-38)
    for i in range(len(offsets) - 1):
        out[i] = 0.0
        total = np.float32(0.0)
        for t in range(offsets[i], offsets[i + 1]):
            w = weights[t]
            total += w
            row = table[ids[t]]
            for j in range(table.shape[1]):
                out[i, j] += w * row[j]
        total = max(total, tiny)
        for j in range(table.shape[1]):
            out[i, j] /= total


TOKENS_PER_THREAD = 1 << 16  # fewer tokens a thread: handing texts to another thread costs more than it saves


def _weighted_means_in_parts(table: np.ndarray, weights: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
                             threads: int) -> np.ndarray:
    """:func:`_weighted_means` of every text, the texts split between ``threads`` threads for a large pass (each
    text's mean is computed alone, so the split changes no bit)."""
    n = len(offsets) - 1
    out = np.empty((n, table.shape[1]), np.float32)
    in_parts("bag", lambda a, b: _weighted_means(table, weights, ids, offsets[a : b + 1], out[a:b]), n,
             min(threads, len(ids) // TOKENS_PER_THREAD, n))
    return out


def check_ids(ids: np.ndarray, vocab_size: int) -> None:
    """Refuse token ids outside ``0 .. vocab_size - 1`` before numpy indexes a table with them (a negative id would
    index from the end, silently)."""
    if len(ids) and not (0 <= int(ids.min()) and int(ids.max()) < vocab_size):
        raise IndexError(f"token ids must lie in 0..{vocab_size - 1}, got {int(ids.min())}..{int(ids.max())}")


def distinct_ids(ids: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.unique(ids, sorted=True, return_inverse=True)`` for ids in ``0 .. vocab_size - 1``: the distinct ids
    in increasing order and each id's position among them. On the CPU the ids are marked in a table of the
    vocabulary instead of sorted: the same tensors, about six times faster for a training batch (36,600 ids over a
    vocabulary of 30,000: 0.3 ms against 2 ms on one thread)."""
    if ids.device.type != "cpu":
        distinct, position = torch.unique(ids, sorted=True, return_inverse=True)
        return distinct, position
    x = ids.numpy()
    check_ids(x, vocab_size)
    seen = np.zeros(vocab_size, np.bool_)
    seen[x] = True
    found = np.flatnonzero(seen)
    slot = np.empty(vocab_size, np.int64)  # read only at the ids found
    slot[found] = np.arange(len(found))
    return torch.from_numpy(found), torch.from_numpy(slot[x])


def idf_weights(tokens: TokenizedTexts, vocab_size: int) -> np.ndarray:
    """Smoothed inverse document frequency of every token id: ``ln((1 + N) / (1 + df)) + 1`` (float32)."""
    counts = sp.csr_matrix(
        (np.ones(len(tokens.ids), dtype=np.int32), np.asarray(tokens.ids), np.asarray(tokens.offsets)),
        shape=(len(tokens), vocab_size),
    )
    counts.sum_duplicates()  # one entry per (text, token): column counts are document frequencies
    df = np.bincount(counts.indices, minlength=vocab_size)
    return (np.log((1.0 + len(tokens)) / (1.0 + df)) + 1.0).astype(np.float32)


class BagOfEmbeddings(Encoder):
    """Weighted mean of token embeddings (see the module docstring for the formula)."""

    kind = "bag"
    idf: torch.Tensor  # a buffer, with weighting "idf"
    special_tokens = False
    joint_pass = True  # one lookup of the distinct tokens and one sparse gradient for all the texts of a step

    def __init__(
        self,
        tokenizer: Tokenizer,
        dim: int,
        *,
        weighting: str = "idf",
        idf: np.ndarray | torch.Tensor | None = None,
        max_length: int = 32,
        sparse: bool = False,
        embeddings: np.ndarray | torch.Tensor | None = None,
        seed: int = 0,
    ):
        """``embeddings``: an initial ``V x e`` table (e.g. from a pre-trained model; a projection to ``dim``
        is added when ``e != dim``); by default a ``vocab_size x dim`` table drawn from ``N(0, 1/dim)``.
        ``idf``: per-token IDF weights (:func:`idf_weights`), required for ``weighting="idf"``."""
        super().__init__()
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
        if dim < 1 or max_length < 1:
            raise ValueError(f"dim and max_length must be positive, got {dim} and {max_length}")
        generator = torch.Generator().manual_seed(seed)
        if embeddings is None:
            table = torch.randn(tokenizer.vocab_size, dim, generator=generator) / dim**0.5
        else:
            table = torch.as_tensor(embeddings, dtype=torch.float32).clone()
            if table.ndim != 2 or table.shape[0] < tokenizer.vocab_size:
                raise ValueError(
                    f"the embedding table has shape {tuple(table.shape)}; "
                    f"it needs {tokenizer.vocab_size} rows for the tokenizer's vocabulary"
                )
        rows, width = table.shape
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.weighting = weighting
        self.sparse = sparse
        self._dim = dim
        self.embedding = nn.EmbeddingBag(rows, width, mode="sum", sparse=sparse, include_last_offset=True)
        self.embedding.weight.data.copy_(table)
        self.projection: nn.Linear | None = None
        if width != dim:
            self.projection = nn.Linear(width, dim, bias=False)
            nn.init.orthogonal_(self.projection.weight, generator=generator)

        idf_tensor = None if idf is None else torch.as_tensor(idf, dtype=torch.float32).flatten()
        if idf_tensor is not None and idf_tensor.shape[0] != rows:
            raise ValueError(f"idf must hold one weight per table row ({rows}), got {idf_tensor.shape[0]}")
        if idf_tensor is not None and not bool((idf_tensor > 0).all()):
            raise ValueError("idf weights must be positive")
        self.log_weight: nn.Embedding | None = None
        if weighting == "idf":
            if idf_tensor is None:
                raise ValueError("weighting='idf' needs IDF weights; compute them with idf_weights(tokens, vocab_size)")
            self.register_buffer("idf", idf_tensor)
        elif weighting == "learned":
            self.log_weight = nn.Embedding(rows, 1, sparse=sparse)
            start = torch.zeros(rows) if idf_tensor is None else idf_tensor.log()
            self.log_weight.weight.data.copy_(start.unsqueeze(1))

    @classmethod
    def from_pretrained(
        cls, model_dir: str | Path, dim: int | None = None, *, tensor_name: str | None = None, **kwargs: Any
    ) -> BagOfEmbeddings:
        """Start from the token-embedding matrix and tokenizer of a local model folder (``dim`` defaults
        to the matrix width; other keyword arguments as for the constructor)."""
        tokenizer = Tokenizer.from_pretrained_dir(model_dir)
        matrix = read_embedding_matrix(model_dir, tensor_name)
        return cls(tokenizer, dim or matrix.shape[1], embeddings=matrix, **kwargs)

    @property
    def dim(self) -> int:
        return self._dim

    def token_weights(self, ids: torch.Tensor) -> torch.Tensor | None:
        """``w(t)`` for each id (None for the unweighted mean)."""
        if self.weighting == "idf":
            return self.idf[ids]
        if self.log_weight is not None:
            return self.log_weight(ids).squeeze(1).exp()
        return None

    def forward(self, batch: TokenizedTexts) -> torch.Tensor:
        ids, offsets = bag_inputs(batch, self.device)
        lengths = offsets[1:] - offsets[:-1]
        if self.sparse and torch.is_grad_enabled():
            summed, weights = self._distinct_bag(ids, offsets)
        else:
            weights = self.token_weights(ids)
            summed = self.embedding(ids, offsets, per_sample_weights=weights)
        if weights is None:
            total = lengths.to(summed.dtype)
        else:
            total = torch.segment_reduce(weights, "sum", offsets=offsets, unsafe=True)
        mean = summed / total.clamp_min(torch.finfo(summed.dtype).tiny).unsqueeze(1)
        return (mean if self.projection is None else self.projection(mean)).float()

    @torch.no_grad()
    def embed(self, tokens: TokenizedTexts, batch_size: int = 256) -> torch.Tensor:
        """:meth:`Encoder.embed` on the CPU in one compiled pass over the texts' tokens (:func:`_weighted_means`),
        the same weighted means as :meth:`forward` up to float32 rounding: torch's operations cost more than their
        work on the few tokens of a served text (one title: 0.17 ms against 0.035 ms, tokenizing included). Every
        text's mean is computed alone, so a text embeds to the same bits in any batch. Elsewhere (a GPU), torch's
        pass."""
        table = self.embedding.weight
        if table.device.type != "cpu" or table.dtype != torch.float32:
            return super().embed(tokens, batch_size)
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        ids = tokens.ids
        check_ids(ids, len(table))
        if self.weighting == "idf":
            weights = self.idf.numpy()[ids]
        elif self.log_weight is not None:
            weights = np.exp(self.log_weight.weight.detach().numpy()[ids, 0])
        else:
            weights = np.ones(len(ids), np.float32)
        means = torch.from_numpy(_weighted_means_in_parts(table.detach().numpy(), weights, ids, tokens.offsets,
                                                          torch.get_num_threads()))
        return means if self.projection is None else self.projection(means)

    def _distinct_bag(self, ids: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weighted sums and per-token weights of :meth:`forward`, computed over the batch's distinct tokens.

        The table rows (and learned weights) of the distinct ids are looked up once, and the bag runs over that
        small matrix with each token's position in it. The sums are those of the table's own bag; the sparse
        gradients that reach the optimiser hold one row per distinct token, in increasing id order, instead of
        one per token occurrence (~1,000 label texts of 16 random words: ~32,000 occurrences of ~12,000
        distinct tokens), so the optimiser has fewer rows to merge and update.
        """
        distinct, position = distinct_ids(ids, self.embedding.weight.shape[0])
        rows = F.embedding(distinct, self.embedding.weight, sparse=True)
        weights: torch.Tensor | None
        if self.log_weight is not None:
            # index_select, not [position]: indexing's backward adds repeated positions with atomic adds in a
            # racing order on several threads, so the gradient would depend on the thread count
            learned = F.embedding(distinct, self.log_weight.weight, sparse=True).squeeze(1).exp()
            weights = learned.index_select(0, position)
        else:
            weights = self.token_weights(ids)
        summed = F.embedding_bag(position, rows, offsets, mode="sum", per_sample_weights=weights,
                                 include_last_offset=True)
        return summed, weights

    def config(self) -> dict[str, Any]:
        return {"dim": self.dim, "weighting": self.weighting, "max_length": self.max_length, "sparse": self.sparse}

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        with atomic_path(folder / WEIGHTS_FILE) as tmp:
            save_file(state, str(tmp))
        self.tokenizer.save(folder)
        self._write_config(folder)

    @classmethod
    def load(cls, folder: str | Path) -> BagOfEmbeddings:
        config = read_config(folder, cls.kind)
        path = Path(folder) / WEIGHTS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{folder}: no {WEIGHTS_FILE}")
        try:
            state = load_file(str(path))
        except SafetensorError as e:
            raise ValueError(f"{path}: damaged weights file ({e})") from None
        try:
            encoder = cls(
                Tokenizer.load(folder),
                int(config["dim"]),
                weighting=str(config["weighting"]),
                idf=state.get("idf"),
                max_length=int(config["max_length"]),
                sparse=bool(config["sparse"]),
                embeddings=state["embedding.weight"],
            )
            encoder.load_state_dict(state, strict=True)
        except (KeyError, RuntimeError) as e:
            raise ValueError(f"{folder}: the saved bag-of-embeddings encoder is inconsistent ({e})") from None
        return encoder
