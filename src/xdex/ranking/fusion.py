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
  score, so the fusion weighs them itself (0 for a network with one head);
* the mention channel (:mod:`xdex.ranking.mentions`): whether, how often, how specifically and how early the
  text names the label word for word, and a pre-trained sentence encoder's cosine, its gap and rank
  (:mod:`xdex.ranking.encoder_channel`); 0 without the channel, filled in by the ranker.

Two models are fitted on the held-out validation documents, never the test split: one on every feature, which
scores the trained labels: gradient-boosted trees (:class:`TreeFusion`, the default; NGAME fuses its scores with a
small non-linear model too) or a logistic regression (:class:`LinearFusion`); and a logistic regression on the
dense features alone, which scores labels added after training (they have no lexical weights and no training
documents: each label is ranked by what it has). In both, more evidence from a channel never lowers a score
(monotone trees, weights >= 0). Both give log-odds of relevance fitted by the log loss, so their scores rank
together. ``fusion.json`` holds them as plain numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from xdex.jsonfile import read_json, write_json
from xdex.ranking.encoder_channel import ENCODER_FEATURES
from xdex.ranking.mentions import MENTION_FEATURES
from xdex.ranking.quickscorer import FeatureOrderedNodes

log = logging.getLogger(__name__)

FEATURES = ("dense", "dense_gap", "dense_rrank", "lexical", "lexical_gap", "lexical_rrank", "in_lexical", "prior",
            "de", "clf", "log_lexical", "log_lexical_gap", *MENTION_FEATURES, *ENCODER_FEATURES)
DENSE_FEATURES = ("dense", "dense_gap", "dense_rrank")
ADDED_FEATURES = (*DENSE_FEATURES, *MENTION_FEATURES, *ENCODER_FEATURES)  # what a label added after training has
# evidence of relevance, whose weights are kept >= 0; a mention's position, length and sharing may weigh either way
MONOTONE = frozenset(FEATURES) - {"prior", "mention_words", "mention_first", "mention_labels"}
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
               prior: np.ndarray, n_known: int, more_ids: np.ndarray | None = None) -> Candidates:
    """The union of the dense shortlist ``dense_ids`` ``[n, Kd]`` and the lexical shortlist ``lexical_ids``
    ``[n, Kl]`` (both best first, -1 padded) with their features; ``more_ids`` ``[n, Km]``: a shortlist of another
    channel, whose labels not already candidates are added after them with the dense features and prior alone
    (the other channel's own features are left at 0 for its caller to fill in).

    ``dense_score(rows, ids)`` gives the dense inner products of texts ``rows`` with labels ``ids`` (same
    shape) and, for a network with two heads, each head's share (one more axis of 2), else None; ``prior``
    ``[n_known]`` the labels' priors; labels at rows >= ``n_known`` were added after training.

    The union and the features are assembled per text by compiled loops (numba), in the float32 arithmetic of
    the array expressions they replace (the same values; tested against them); the logarithms are numpy's.
    """
    dense_ids = np.ascontiguousarray(dense_ids, np.int64)
    lexical_ids = np.ascontiguousarray(lexical_ids, np.int64)
    more = np.full((len(dense_ids), 0), -1, np.int64) if more_ids is None else np.ascontiguousarray(more_ids, np.int64)
    ids, match = _union(dense_ids, lexical_ids, more)
    rows = np.repeat(np.arange(len(ids)), ids.shape[1]).reshape(ids.shape)
    total, heads = dense_score(rows, np.where(ids >= 0, ids, 0))
    lex_scores, best_lexical = _lexical_scores(lexical_ids, np.ascontiguousarray(lexical_scores, np.float32))
    features = _features(
        ids, match, dense_ids.shape[1], lexical_ids.shape[1], np.ascontiguousarray(total, np.float32),
        None if heads is None else np.ascontiguousarray(heads, np.float32), lex_scores, best_lexical,
        np.log(np.maximum(lex_scores, LOG_FLOOR)), np.log(np.maximum(best_lexical, LOG_FLOOR)),
        np.ascontiguousarray(prior, np.float32), n_known, len(FEATURES))
    return Candidates(ids, features)


@numba.njit(cache=True, nogil=True)
def _union(dense_ids: np.ndarray, lexical_ids: np.ndarray, more_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidate ids ``[n, Kd + Kl + Km]``: the dense shortlist, then the lexical labels not in it, then the
    labels of ``more_ids`` in neither, each once (-1 in the place of a label already there), and for each dense
    candidate the position of its label in the lexical shortlist (-1: not in it)."""
    n, kd = dense_ids.shape
    kl, km = lexical_ids.shape[1], more_ids.shape[1]
    ids = np.full((n, kd + kl + km), -1, np.int64)
    match = np.full((n, kd), -1, np.int64)
    for i in range(n):
        for c in range(kd):
            ids[i, c] = dense_ids[i, c]
        for j in range(kl):
            label = lexical_ids[i, j]
            if label < 0:
                continue
            seen = False
            for c in range(kd):
                if dense_ids[i, c] == label:
                    if match[i, c] < 0:  # a shortlist holds a label once
                        match[i, c] = j
                    seen = True
            if not seen:
                ids[i, kd + j] = label
        for j in range(km):
            label = more_ids[i, j]
            seen = label < 0
            for c in range(kd + kl + j):  # the other shortlists, and this one's earlier labels
                if ids[i, c] == label:
                    seen = True
            if not seen:
                ids[i, kd + kl + j] = label
    return ids, match


@numba.njit(cache=True, nogil=True)
def _lexical_scores(lexical_ids: np.ndarray, lexical_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lexical shortlist's float32 scores as features (0 for padding, NaN and -inf; +inf as the largest float32)
    and each row's best of them (0 at least)."""
    n, kl = lexical_ids.shape
    out = np.zeros((n, kl), np.float32)
    best = np.zeros(n, np.float32)
    largest = np.finfo(np.float32).max
    for i in range(n):
        for j in range(kl):
            score = lexical_scores[i, j]
            if lexical_ids[i, j] < 0 or np.isnan(score) or score == -np.inf:
                continue
            out[i, j] = largest if score == np.inf else score
            best[i] = max(best[i], out[i, j])
    return out, best


@numba.njit(cache=True, nogil=True)
def _features(ids: np.ndarray, match: np.ndarray, kd: int, kl: int, total: np.ndarray, heads: np.ndarray | None,
              lex_scores: np.ndarray, best_lexical: np.ndarray, log_lex: np.ndarray, log_best: np.ndarray,
              prior: np.ndarray, n_known: int, n_features: int) -> np.ndarray:
    """The features of :data:`FEATURES` of each candidate (module docstring), float32 ``[n, C, F]``; 0 for an
    empty candidate slot."""
    n, width = ids.shape
    out = np.zeros((n, width, n_features), np.float32)
    one, two, zero = np.float32(1.0), np.float32(2.0), np.float32(0.0)
    for i in range(n):
        best = -np.inf
        for c in range(width):
            if ids[i, c] >= 0 and total[i, c] > best:
                best = total[i, c]
        best_dense = np.float32(best)
        for c in range(width):
            label = ids[i, c]
            if label < 0:
                continue
            f = out[i, c]
            f[0] = total[i, c]
            f[1] = total[i, c] - best_dense
            j = -1  # the candidate's place in the lexical shortlist
            if c < kd:
                f[2] = one / (two + np.float32(c))
                j = match[i, c]
            elif c < kd + kl:
                j = c - kd
            if j >= 0:
                f[3] = lex_scores[i, j]
                f[4] = lex_scores[i, j] - best_lexical[i]
                f[5] = one / (two + np.float32(j))
                f[6] = one
                f[10] = log_lex[i, j]
                f[11] = log_lex[i, j] - log_best[i]
            f[7] = prior[label] if label < n_known else zero
            if heads is not None:
                f[8] = heads[i, c, 0]
                f[9] = heads[i, c, 1]
    return out


def label_prior(train_labels: sp.csr_matrix) -> np.ndarray:
    """log(1 + n_l) / log(1 + max n): the labels' training frequencies on a [0, 1] log scale."""
    counts = np.diff(sp.csc_matrix(train_labels).indptr).astype(np.float64)
    top = np.log1p(counts.max(initial=0.0))
    return (np.log1p(counts) / top if top > 0 else counts).astype(np.float32)


def feature_columns(features: Sequence[str]) -> tuple[tuple[str, ...], list[int]]:
    """The named features and their columns in :data:`FEATURES` (an unknown name is refused)."""
    unknown = sorted(set(features) - set(FEATURES))
    if unknown:
        raise ValueError(f"unknown fusion features: {', '.join(unknown)}")
    return tuple(features), [FEATURES.index(name) for name in features]


class LinearFusion:
    """Log-odds w·(f − μ)/σ + b of the named features f of a candidate: a logistic regression over standardised
    features (scikit-learn, L2 with inverse strength ``c``)."""

    def __init__(self, features: Sequence[str], weights: np.ndarray, bias: float, mean: np.ndarray,
                 scale: np.ndarray):
        self.features, self.columns = feature_columns(features)
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
        return {"form": "linear", "features": list(self.features), "weights": self.weights.tolist(), "bias": self.bias,
                "mean": self.mean.tolist(), "scale": self.scale.tolist()}

    @classmethod
    def from_dict(cls, record: dict) -> LinearFusion:
        return cls(record["features"], np.array(record["weights"], np.float32), float(record["bias"]),
                   np.array(record["mean"], np.float32), np.array(record["scale"], np.float32))

    def describe(self) -> str:
        return ", ".join(f"{n} {w:+.2f}" for n, w in zip(self.features, self.weights, strict=True))


class TreeFusion:
    """Log-odds of relevance from gradient-boosted regression trees over the named features f of a candidate:
    ``b + Σ_t tree_t(f)``, fitted by scikit-learn's ``HistGradientBoostingClassifier`` (binary log loss) with
    the scores of :data:`MONOTONE` features constrained to never lower the log-odds, as the linear form's
    weights are. The trees are kept as plain arrays (one row per tree, one column per node; a leaf's children
    are itself), so they are written to ``fusion.json`` without pickle and scored here, the same sums as
    scikit-learn's (tested): scikit-learn saves a fitted model by pickle alone."""

    def __init__(self, features: Sequence[str], feature: np.ndarray, threshold: np.ndarray, left: np.ndarray,
                 right: np.ndarray, value: np.ndarray, bias: float):
        self.features, self.columns = feature_columns(features)
        self.feature, self.threshold = np.asarray(feature, np.int64), np.asarray(threshold, np.float64)
        self.left, self.right = np.asarray(left, np.int64), np.asarray(right, np.int64)
        self.value, self.bias = np.asarray(value, np.float64), float(bias)
        if not self._well_formed():
            raise ValueError("the trees' arrays do not describe trees over the named features")
        self._scorer: Callable[[np.ndarray], np.ndarray] | None = None  # score()'s sums of leaves, made at first use

    def _well_formed(self) -> bool:
        """Equal [trees, nodes] arrays; children in range, a leaf its own child and an inner node's children after
        it (so every walk ends at a leaf); feature columns in range."""
        shape = self.feature.shape
        if len(shape) != 2 or any(a.shape != shape for a in (self.threshold, self.left, self.right, self.value)):
            return False
        own = np.arange(shape[1])
        inner = self.left != own
        in_range = all(0 <= a.min(initial=0) and a.max(initial=0) < shape[1] for a in (self.left, self.right))
        forward = bool(((self.left > own) & (self.right > own))[inner].all())
        columns = not self.feature.size or (0 <= self.feature.min() and self.feature.max() < len(self.features))
        return bool(in_range and forward and columns)

    @classmethod
    def fit(cls, features: Sequence[str], x: np.ndarray, y: np.ndarray, trees: int = 100) -> TreeFusion:
        """Fit on the rows ``x`` ``[n, F]`` (all of :data:`FEATURES`) with relevance ``y``: ``trees`` boosting rounds
        of trees with at most 15 leaves, learning rate 0.1, L2 strength 1 on the leaf values, no early stopping
        (so the fit is deterministic)."""
        from sklearn.ensemble import HistGradientBoostingClassifier

        if y.all() or not y.any():
            raise ValueError("the validation candidates hold no positive (or no negative) pair to fit a fusion on")
        model = HistGradientBoostingClassifier(
            max_iter=trees, learning_rate=0.1, max_leaf_nodes=15, l2_regularization=1.0, early_stopping=False,
            monotonic_cst=[1 if name in MONOTONE else 0 for name in features])
        model.fit(x[:, [FEATURES.index(name) for name in features]].astype(np.float64), y)
        return cls.from_sklearn(features, model)

    @classmethod
    def from_sklearn(cls, features: Sequence[str], model: Any) -> TreeFusion:
        """The trees of a fitted binary ``HistGradientBoostingClassifier`` over the columns ``features``."""
        nodes = [predictors[0].nodes for predictors in model._predictors]  # one tree per round (binary loss)
        width = max(len(tree) for tree in nodes)

        def table(field: str, fill: float = 0) -> np.ndarray:
            out = np.full((len(nodes), width), fill, np.float64)
            for t, tree in enumerate(nodes):
                out[t, :len(tree)] = tree[field]
            return out

        own = np.broadcast_to(np.arange(width), (len(nodes), width))
        leaf = table("is_leaf", 1) > 0  # padding nodes are leaves of value 0, never reached
        left = np.where(leaf, own, table("left")).astype(np.int64)
        right = np.where(leaf, own, table("right")).astype(np.int64)
        value = np.where(leaf, table("value"), 0.0)
        return cls(features, np.where(leaf, 0, table("feature_idx")).astype(np.int64), table("num_threshold"), left,
                   right, value, float(np.ravel(model._baseline_prediction)[0]))

    def score(self, features: np.ndarray) -> np.ndarray:
        """The log-odds of each candidate, ``features`` ``[..., F]`` (all of :data:`FEATURES`): the leaf each tree
        leads it to (a value at a threshold goes left, as in scikit-learn), the leaves' values summed in tree order.
        The leaves are found feature by feature (:mod:`xdex.ranking.quickscorer`), or, for trees it cannot take, by
        walking each tree from its root: the same leaves either way."""
        if self._scorer is None:
            column = np.asarray(self.columns, np.int32)[self.feature]  # each node's column of FEATURES
            quick = FeatureOrderedNodes.of(column, self.threshold, self.left, self.right, self.value, len(FEATURES))
            self._scorer = quick.score if quick is not None else self._walker(column)
        x = np.ascontiguousarray(features.reshape(-1, features.shape[-1]))
        return (self._scorer(x) + self.bias).reshape(features.shape[:-1])

    def _walker(self, column: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """Scores by :func:`_walk_trees` (the children as int32, each tree's depth)."""
        depth = np.array([_depth(left, right) for left, right in zip(self.left, self.right, strict=True)], np.int64)
        left, right = self.left.astype(np.int32), self.right.astype(np.int32)
        return lambda x: _walk_trees(x, column, self.threshold, left, right, self.value, depth)

    def to_dict(self) -> dict:
        return {"form": "trees", "features": list(self.features), "feature": self.feature.tolist(),
                "threshold": self.threshold.tolist(), "left": self.left.tolist(), "right": self.right.tolist(),
                "value": self.value.tolist(), "bias": self.bias}

    @classmethod
    def from_dict(cls, record: dict) -> TreeFusion:
        return cls(record["features"], np.array(record["feature"]), np.array(record["threshold"]),
                   np.array(record["left"]), np.array(record["right"]), np.array(record["value"]),
                   float(record["bias"]))

    def describe(self) -> str:
        return f"{self.feature.shape[0]} trees over {', '.join(self.features)}"


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """The number of steps from the root of a tree (``left`` / ``right``: its nodes' children; a leaf is its own
    child) to its deepest leaf."""
    level, steps = [0], 0
    while True:
        inner = [node for node in level if left[node] != node]
        if not inner:
            return steps
        level, steps = [int(child) for node in inner for child in (left[node], right[node])], steps + 1


WALK_ROWS = 8  # rows walked down a tree together by _walk_trees


@numba.njit(cache=True, nogil=True)
def _walk_trees(x: np.ndarray, column: np.ndarray, threshold: np.ndarray, left: np.ndarray, right: np.ndarray,
                value: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Σ_t value[t, leaf_t(x_i)] for each row x_i, summed in tree order (:class:`TreeFusion`'s arrays as int32;
    ``column``: the node's column of ``x``; a leaf is its own child; ``depth[t]``: tree t's deepest leaf).

    :data:`WALK_ROWS` rows go down a tree together, ``depth[t]`` steps each (a row at a leaf steps to the leaf
    again), each step chosen without a branch: their walks do not wait on each other, so the processor overlaps
    them (and can gather them into vector lanes), about twice as fast as walking one row at a time down each tree
    to its leaf on the fusion's trees of 15 leaves."""
    n = x.shape[0]
    out = np.zeros(n)
    nodes = np.zeros(WALK_ROWS, np.int32)
    for start in range(0, n, WALK_ROWS):
        rows = min(WALK_ROWS, n - start)
        for t in range(column.shape[0]):
            col, thr, lo, hi = column[t], threshold[t], left[t], right[t]
            nodes[:] = 0
            for _ in range(depth[t]):
                for r in range(rows):
                    node = nodes[r]
                    go_left = np.int32(np.float64(x[start + r, col[node]]) <= thr[node])  # NaN: right
                    nodes[r] = hi[node] + go_left * (lo[node] - hi[node])
            for r in range(rows):
                out[start + r] += value[t, nodes[r]]
    return out


FORMS = ("trees", "linear")  # how a trained label's features are combined: TreeFusion, LinearFusion


class LogisticFusion:
    """The fused score of a candidate (module docstring): a trained label's from every feature (boosted trees or a
    linear model), a label added after training from its dense, mention and encoder features (linear); both are
    log-odds of relevance, so they rank together."""

    def __init__(self, trained: TreeFusion | LinearFusion, added: LinearFusion):
        self.trained = trained
        self.added = added

    @classmethod
    def fit(cls, found: Candidates, labels: sp.csr_matrix, c: float = 1.0, form: str = "trees") -> LogisticFusion:
        """Fit on validation candidates ``found`` whose true labels are the rows of ``labels``; ``form`` (one of
        :data:`FORMS`) combines a trained label's features, ``c`` is the linear fits' inverse L2 strength."""
        if form not in FORMS:
            raise ValueError(f"the fusion's form is one of {', '.join(FORMS)}, not {form!r}")
        mask = found.mask
        rows = np.broadcast_to(np.arange(len(found.ids))[:, None], found.ids.shape)[mask]
        y = np.asarray(sp.csr_matrix(labels)[rows, found.ids[mask]]).ravel() > 0
        x = found.features[mask]
        trained = TreeFusion.fit(FEATURES, x, y) if form == "trees" else LinearFusion.fit(FEATURES, x, y, c)
        fusion = cls(trained, LinearFusion.fit(ADDED_FEATURES, x, y, c))
        log.info("fusion weights: %s; labels added later: %s", fusion.trained.describe(), fusion.added.describe())
        return fusion

    def score(self, found: Candidates, n_known: int) -> np.ndarray:
        """The fused log-odds of each candidate of ``found``; labels at rows >= ``n_known`` were added later. An
        empty slot (id -1) is not scored: it gets 0."""
        out = np.zeros(found.ids.shape, np.float64)
        trained = (found.ids >= 0) & (found.ids < n_known)
        out[trained] = self.trained.score(found.features[trained])
        added = found.ids >= n_known
        if added.any():
            out[added] = self.added.score(found.features[added])
        return out

    def save(self, path: str | Path) -> None:
        write_json(Path(path), {"format": FORMAT, "version": VERSION, "trained": self.trained.to_dict(),
                                "added": self.added.to_dict()})

    @classmethod
    def load(cls, path: str | Path) -> LogisticFusion:
        record = read_json(Path(path))
        if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("version") != VERSION:
            raise ValueError(f"{path}: not an xdex fusion of version {VERSION}")
        try:
            trained = record["trained"]
            form = trained.get("form", "linear") if isinstance(trained, dict) else None  # files before trees: linear
            if form not in FORMS:
                raise ValueError(f"unknown form {form!r}")
            scorer = TreeFusion.from_dict(trained) if form == "trees" else LinearFusion.from_dict(trained)
            return cls(scorer, LinearFusion.from_dict(record["added"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: damaged fusion weights ({e})") from None
