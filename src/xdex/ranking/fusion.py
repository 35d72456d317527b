"""Learned fusion: one score per (text, candidate label) from the features of every channel.

The candidates of a text are the union of the dense index's shortlist and the lexical model's shortlist
(:func:`candidates`). Each (text, candidate) gets the features of :data:`FEATURES`:

* the dense channel: the inner product of the text's and the label's search vectors (every candidate has one),
  its gap to the text's best dense score, and 1 / (1 + rank) in the dense shortlist (0 when not in it);
* the lexical channel: the lexical model's score (its estimate of P(label | text)), its gap to the text's best
  lexical score, the same two on a log scale (a tree's score is a product of node probabilities, so its log is
  their sum), and 1 / (1 + rank) in the lexical shortlist (all 0 when the label is not in it), and whether
  it is;
* the label's prior, log(1 + n_l) / log(1 + max n) with n_l its training documents;
* where the network's dense score sums two heads (UniDEC's DE head and classifiers Ψ, DEXA's and NGAME's label
  embeddings and per-label classifiers, OAK's embeddings and classifiers: ``Network.head_scores``), each head's
  score, so the fusion weighs them itself (0 for a network with one head).

Two logistic regressions over standardised features (L2, ``C``; every channel's weight kept >= 0) are fitted on
the held-out validation documents, never the test split: one on every feature, which scores the trained labels,
and one on the dense features alone, which scores labels added after training (they have no lexical weights and
no training documents: each label is ranked by what it has). Both give calibrated log-odds of relevance, so
their scores rank together. Weights are plain numbers in ``fusion.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xdex.jsonfile import read_json, write_json

log = logging.getLogger(__name__)

FEATURES = ("dense", "dense_gap", "dense_rrank", "lexical", "lexical_gap", "lexical_rrank", "in_lexical", "prior",
            "de", "clf", "log_lexical", "log_lexical_gap")
DENSE_FEATURES = ("dense", "dense_gap", "dense_rrank")  # what a label added after training has
MONOTONE = frozenset(FEATURES) - {"prior"}  # evidence of relevance: their weights are kept >= 0
LOG_FLOOR = 1e-6  # lexical scores below it count as it on the log scale
FORMAT = "xdex-fusion"
VERSION = 1


@dataclass
class Candidates:
    """The candidate labels of each text (rows of ``ids``, padded with -1) and their features ``[n, C, F]``."""

    ids: np.ndarray
    features: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        return self.ids >= 0


def candidates(dense_ids: np.ndarray, lexical_ids: np.ndarray, lexical_scores: np.ndarray,
               dense_score: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray | None]],
               prior: np.ndarray, n_known: int) -> Candidates:
    """The union of the dense shortlist ``dense_ids`` ``[n, Kd]`` and the lexical shortlist ``lexical_ids``
    ``[n, Kl]`` (both best first, -1 padded) with their features.

    ``dense_score(rows, ids)`` gives the dense inner products of texts ``rows`` with labels ``ids`` (same
    shape) and, for a network with two heads, each head's share (one more axis of 2), else None; ``prior``
    ``[n_known]`` the labels' priors; labels at rows >= ``n_known`` were added after training.
    """
    n, kd = dense_ids.shape
    kl = lexical_ids.shape[1]
    in_dense = (lexical_ids[:, :, None] == dense_ids[:, None, :]) & (lexical_ids[:, :, None] >= 0)  # [n, Kl, Kd]
    lexical_new = (lexical_ids >= 0) & ~in_dense.any(axis=2)
    ids = np.concatenate([dense_ids, np.where(lexical_new, lexical_ids, -1)], axis=1)  # [n, Kd + Kl]
    valid = ids >= 0
    rows = np.broadcast_to(np.arange(n)[:, None], ids.shape)
    safe = np.where(valid, ids, 0)

    total, heads = dense_score(rows, safe)
    dense = np.where(valid, total, 0.0).astype(np.float32)
    if heads is None:
        heads = np.zeros((*ids.shape, 2), np.float32)
    best_dense = np.where(valid, dense, -np.inf).max(axis=1, initial=-np.inf)[:, None]
    dense_rank = np.where(dense_ids >= 0, 1.0 / (2.0 + np.arange(kd, dtype=np.float32)), 0.0)
    dense_rrank = np.concatenate([dense_rank, np.zeros((n, kl), np.float32)], axis=1)

    lex_scores = np.where(lexical_ids >= 0, np.nan_to_num(lexical_scores, neginf=0.0), 0.0).astype(np.float32)
    lex_rank = np.where(lexical_ids >= 0, 1.0 / (2.0 + np.arange(kl, dtype=np.float32)), 0.0).astype(np.float32)
    # the lexical features of the dense candidates: from the matching lexical entry, if any
    match = in_dense.transpose(0, 2, 1)  # [n, Kd, Kl]
    lexical = np.concatenate([(match * lex_scores[:, None, :]).sum(axis=2), lex_scores], axis=1)
    lexical_rrank = np.concatenate([(match * lex_rank[:, None, :]).sum(axis=2), lex_rank], axis=1)
    in_lexical = np.concatenate([match.any(axis=2), lexical_ids >= 0], axis=1).astype(np.float32)
    best_lexical = lex_scores.max(axis=1, initial=0.0)[:, None]
    log_lexical = np.where(in_lexical > 0, np.log(np.maximum(lexical, LOG_FLOOR)), 0.0)
    log_best = np.log(np.maximum(best_lexical, LOG_FLOOR))

    known = valid & (ids < n_known)
    label_prior = np.where(known, prior[np.where(known, ids, 0)], 0.0)
    features = np.stack([
        dense, np.where(valid, dense - best_dense, 0.0), dense_rrank,
        lexical, np.where(in_lexical > 0, lexical - best_lexical, 0.0), lexical_rrank, in_lexical,
        label_prior, heads[..., 0], heads[..., 1],
        log_lexical, np.where(in_lexical > 0, log_lexical - log_best, 0.0),
    ], axis=2).astype(np.float32)
    features[~valid] = 0.0
    return Candidates(ids, features)


def label_prior(train_labels: sp.csr_matrix) -> np.ndarray:
    """log(1 + n_l) / log(1 + max n): the labels' training frequencies on a [0, 1] log scale."""
    counts = np.diff(sp.csc_matrix(train_labels).indptr).astype(np.float64)
    top = np.log1p(counts.max(initial=0.0))
    return (np.log1p(counts) / top if top > 0 else counts).astype(np.float32)


class LinearFusion:
    """Log-odds w·(f − μ)/σ + b of the named features f of a candidate: a logistic regression over standardised
    features (scikit-learn, L2 with inverse strength ``c``)."""

    def __init__(self, features: Sequence[str], weights: np.ndarray, bias: float, mean: np.ndarray,
                 scale: np.ndarray):
        self.features = tuple(features)
        unknown = sorted(set(self.features) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown fusion features: {', '.join(unknown)}")
        self.columns = [FEATURES.index(name) for name in self.features]
        self.weights = np.asarray(weights, np.float32)
        self.bias = float(bias)
        self.mean = np.asarray(mean, np.float32)
        self.scale = np.asarray(scale, np.float32)
        if not self.weights.shape == self.mean.shape == self.scale.shape == (len(self.features),):
            raise ValueError(f"a fusion of {len(self.features)} features needs as many weights, means and scales")

    @classmethod
    def fit(cls, features: Sequence[str], x: np.ndarray, y: np.ndarray, c: float) -> LinearFusion:
        """Fit on the rows ``x`` ``[n, F]`` (all of :data:`FEATURES`) with relevance ``y``: L2-regularised logistic
        loss, C·Σ log(1 + exp(−s·(w·x̂ + b))) + ½‖w‖² (scikit-learn's ``LogisticRegression`` objective), with the
        weights of :data:`MONOTONE` features kept ≥ 0 (scipy's L-BFGS-B), so that more evidence from a channel
        never lowers a score. The fit is deterministic."""
        from scipy.optimize import minimize
        from scipy.special import expit, log_expit

        if y.all() or not y.any():
            raise ValueError("the validation candidates hold no positive (or no negative) pair to fit a fusion on")
        x = x[:, [FEATURES.index(name) for name in features]].astype(np.float64)
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale[scale == 0] = 1.0
        z = (x - mean) / scale
        sign = np.where(y, 1.0, -1.0)

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            w, b = theta[:-1], theta[-1]
            margin = sign * (z @ w + b)
            value = -c * log_expit(margin).sum() + 0.5 * w @ w
            g = -c * sign * expit(-margin)
            return float(value), np.concatenate([z.T @ g + w, [g.sum()]])

        bounds = [(0.0, None) if name in MONOTONE else (None, None) for name in features] + [(None, None)]
        result = minimize(loss, np.zeros(len(features) + 1), jac=True, method="L-BFGS-B", bounds=bounds,
                          options={"maxiter": 1000})
        return cls(features, result.x[:-1], result.x[-1], mean, scale)

    def score(self, features: np.ndarray) -> np.ndarray:
        """The log-odds of each candidate, ``features`` ``[..., F]`` (all of :data:`FEATURES`)."""
        return ((features[..., self.columns] - self.mean) / self.scale) @ self.weights + self.bias

    def to_dict(self) -> dict:
        return {"features": list(self.features), "weights": self.weights.tolist(), "bias": self.bias,
                "mean": self.mean.tolist(), "scale": self.scale.tolist()}

    @classmethod
    def from_dict(cls, record: dict) -> LinearFusion:
        return cls(record["features"], np.array(record["weights"], np.float32), float(record["bias"]),
                   np.array(record["mean"], np.float32), np.array(record["scale"], np.float32))

    def describe(self) -> str:
        return ", ".join(f"{n} {w:+.2f}" for n, w in zip(self.features, self.weights, strict=True))


class LogisticFusion:
    """The fused score of a candidate (module docstring): a trained label's from every feature, a label added after
    training from its dense features alone; both are log-odds of relevance, so they rank together."""

    def __init__(self, trained: LinearFusion, added: LinearFusion):
        self.trained = trained
        self.added = added

    @classmethod
    def fit(cls, found: Candidates, labels: sp.csr_matrix, c: float = 1.0) -> LogisticFusion:
        """Fit on validation candidates ``found`` whose true labels are the rows of ``labels``."""
        mask = found.mask
        rows = np.broadcast_to(np.arange(len(found.ids))[:, None], found.ids.shape)[mask]
        y = np.asarray(sp.csr_matrix(labels)[rows, found.ids[mask]]).ravel() > 0
        x = found.features[mask]
        fusion = cls(LinearFusion.fit(FEATURES, x, y, c), LinearFusion.fit(DENSE_FEATURES, x, y, c))
        log.info("fusion weights: %s; labels added later: %s", fusion.trained.describe(), fusion.added.describe())
        return fusion

    def score(self, found: Candidates, n_known: int) -> np.ndarray:
        """The fused log-odds of each candidate of ``found``; labels at rows >= ``n_known`` were added later."""
        trained = self.trained.score(found.features)
        added = found.ids >= n_known
        if not added.any():
            return trained
        return np.where(added, self.added.score(found.features), trained)

    def save(self, path: str | Path) -> None:
        write_json(Path(path), {"format": FORMAT, "version": VERSION, "trained": self.trained.to_dict(),
                                "added": self.added.to_dict()})

    @classmethod
    def load(cls, path: str | Path) -> LogisticFusion:
        record = read_json(Path(path))
        if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("version") != VERSION:
            raise ValueError(f"{path}: not an xdex fusion of version {VERSION}")
        try:
            return cls(LinearFusion.from_dict(record["trained"]), LinearFusion.from_dict(record["added"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: damaged fusion weights ({e})") from None
