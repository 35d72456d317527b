"""Dataset statistics as XMC papers report them, and their rounding for display.

They are the columns of the papers' dataset tables (UniDEC Table 4: APpL, ALpP, AWpP; DEXA
Table 1; OAK Table 2, with auxiliary knowledge pieces). With ``Y`` the ``N x L`` label matrix of
a split, ``nnz`` its number of (document, label) pairs and ``n_l`` the number of training
documents of label ``l``:

* ``avg_labels_per_point = nnz(Y_train) / N_train``, ``avg_points_per_label = nnz(Y_train) / L``
  (over all ``L`` labels), ``avg_words_per_point`` = the mean of ``len(text.split())`` over the
  training documents; the same with ``_test`` for the test split.
* Label bins by training frequency, a partition of the labels: no training point
  (``n_l = 0``), tail (``1 <= n_l <= 9``), torso (``10 <= n_l <= 100``), head (``n_l > 100``).
* Auxiliary items (OAK): ``avg_aux_per_point`` = links per document, ``frac_points_with_aux``
  = share of documents with at least one link, ``avg_points_per_aux`` = training links per
  item over the items linked from at least one training document.

An average over no documents or labels is 0. :func:`rounded` rounds averages of counts to 3
decimals, word averages to 2 and fractions to 4 (Python's ``round``); printed without
trailing zeros, this reproduces the figures the dataset READMEs print (e.g. 2.17, 4.625,
138.68 points per label).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xdex.data.dataset import Dataset, Split

TAIL_MAX = 9
TORSO_MAX = 100

CAPTIONS = {
    "n_train": "N train",
    "n_test": "N test",
    "n_labels": "L (labels)",
    "avg_labels_per_point": "avg labels/point",
    "avg_points_per_label": "avg points/label",
    "avg_words_per_point": "avg words/point",
    "avg_labels_per_point_test": "avg labels/point (test)",
    "avg_words_per_point_test": "avg words/point (test)",
    "n_train_points_without_label": "train points without label",
    "n_test_points_without_label": "test points without label",
    "n_labels_without_train_point": "labels without train point",
    "n_tail_labels": f"tail labels (1-{TAIL_MAX} train points)",
    "n_torso_labels": f"torso labels ({TAIL_MAX + 1}-{TORSO_MAX} train points)",
    "n_head_labels": f"head labels (>{TORSO_MAX} train points)",
    "n_labels_in_test": "labels seen in test",
    "n_test_labels_without_train_point": "test labels without train point",
    "avg_words_per_label_text": "avg words/label text",
    "avg_words_per_label_desc": "avg words/label desc",
    "n_filter_pairs_train": "filter pairs (train)",
    "n_filter_pairs_test": "filter pairs (test)",
    "n_aux": "M (auxiliary items)",
    "n_aux_seen_in_train": "auxiliary items seen in train",
    "avg_aux_per_point": "avg aux/point",
    "avg_aux_per_point_test": "avg aux/point (test)",
    "frac_points_with_aux": "points with aux",
    "frac_points_with_aux_test": "points with aux (test)",
    "avg_points_per_aux": "avg train points/aux item",
    "n_features": "D (features)",
    "avg_features_per_point": "avg features/point",
    "avg_features_per_point_test": "avg features/point (test)",
}
"""Every statistic :func:`compute_stats` may return, in display order, with its table caption."""


def _mean(total: float, count: int) -> float:
    return float(total) / count if count else 0.0


def _words(texts: list[str]) -> float:
    return _mean(sum(len(t.split()) for t in texts), len(texts))


def _row_counts(matrix: sp.csr_matrix) -> np.ndarray:
    return np.diff(matrix.indptr)


def _split_stats(split: Split, name: str) -> dict[str, float | int]:
    """The per-document statistics of the split ``name`` (keys of the test split end in ``_test``)."""
    n = len(split)
    suffix = "" if name == "train" else f"_{name}"
    out: dict[str, float | int] = {
        f"avg_labels_per_point{suffix}": _mean(split.labels.nnz, n),
        f"avg_words_per_point{suffix}": _words(split.texts),
        f"n_{name}_points_without_label": int(np.sum(_row_counts(split.labels) == 0)),
    }
    if split.akp is not None:
        out[f"avg_aux_per_point{suffix}"] = _mean(split.akp.nnz, n)
        out[f"frac_points_with_aux{suffix}"] = _mean(int(np.sum(_row_counts(split.akp) > 0)), n)
    if split.features is not None:
        out[f"avg_features_per_point{suffix}"] = _mean(split.features.nnz, n)
    return out


def compute_stats(dataset: Dataset) -> dict[str, float | int | str]:
    """The statistics of ``dataset`` at full precision (the module docstring defines them)."""
    train, test, L = dataset.train, dataset.test, dataset.n_labels
    per_label = np.bincount(train.labels.indices, minlength=L)
    stats: dict[str, float | int] = {
        "n_train": len(train),
        "n_test": len(test) if test is not None else 0,
        "n_labels": L,
        "avg_points_per_label": _mean(train.labels.nnz, L),
        **_split_stats(train, "train"),
        "n_labels_without_train_point": int(np.sum(per_label == 0)),
        "n_tail_labels": int(np.sum((per_label >= 1) & (per_label <= TAIL_MAX))),
        "n_torso_labels": int(np.sum((per_label > TAIL_MAX) & (per_label <= TORSO_MAX))),
        "n_head_labels": int(np.sum(per_label > TORSO_MAX)),
        "avg_words_per_label_text": _words(dataset.labels.texts),
    }
    if dataset.labels.descs is not None:
        stats["avg_words_per_label_desc"] = _words(dataset.labels.descs)
    if test is not None:
        stats.update(_split_stats(test, "test"))
        in_test = np.bincount(test.labels.indices, minlength=L) > 0
        stats["n_labels_in_test"] = int(np.sum(in_test))
        stats["n_test_labels_without_train_point"] = int(np.sum(in_test & (per_label == 0)))
    for name, split in dataset.splits().items():
        if split.filter is not None:
            stats[f"n_filter_pairs_{name}"] = int(split.filter.nnz)
    if dataset.akp_items is not None:
        stats["n_aux"] = len(dataset.akp_items)
        if train.akp is not None:
            per_aux = np.bincount(train.akp.indices, minlength=len(dataset.akp_items))
            seen = int(np.sum(per_aux > 0))
            stats["n_aux_seen_in_train"] = seen
            stats["avg_points_per_aux"] = _mean(train.akp.nnz, seen)
    if train.features is not None:
        stats["n_features"] = train.features.shape[1]
    ordered = {key: stats[key] for key in CAPTIONS if key in stats}
    return {"name": dataset.name, **ordered}


def _decimals(key: str) -> int:
    if key.startswith("avg_words"):
        return 2
    if key.startswith("frac_"):
        return 4
    return 3


def rounded(stats: dict) -> dict:
    """``stats`` with every float rounded for display (see the module docstring)."""
    return {k: round(v, _decimals(k)) if isinstance(v, float) else v for k, v in stats.items()}


def format_table(stats: dict) -> str:
    """A two-column text table of the rounded statistics."""
    values = rounded(stats)
    rows = [(CAPTIONS[k], _show(k, v)) for k, v in values.items() if k in CAPTIONS]
    width = max(len(caption) for caption, _ in rows)
    lines = [f"dataset: {stats['name']}"] if "name" in stats else []
    lines += [f"{caption:<{width}}  {value:>12}" for caption, value in rows]
    return "\n".join(lines)


def _show(key: str, value: float | int) -> str:
    if key.startswith("frac_"):
        return f"{value * 100:.2f}%"
    return str(value)
