"""Decile analysis of P@k (DEXML, Appendix C.6 and Fig. 7): how much each label frequency band contributes.

Labels are sorted by their number of training documents, most frequent first (ties by lower id),
and cut into bins; bin 1 holds the head labels, the last bin the tail. ``by="volume"`` (default)
makes bins of roughly equal total training frequency, each holding about 1/n of all training
(document, label) pairs ("equi-voluminous" bins; DEXML does not say which kind it uses); a label
more frequent than that leaves the following bins empty. ``by="count"`` makes bins of equal
numbers of labels. The contribution of bin b to P@k is ``mean_i (1/k) sum_{j<=k} y_i[r_ij] [bin(r_ij) = b]``,
so the contributions add up to P@k.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xdex.atomic import atomic_path
from xdex.metrics.measures import hit_mask
from xdex.metrics.ranking import Ranking, positive_csr
from xdex.sparse import SparseMatrix

BINNINGS = ("volume", "count")


@dataclass(eq=False)
class DecileReport:
    """Per-bin contributions to P@k (percent), the bin of every label and what each bin holds."""

    k: int
    bins: np.ndarray  # bin of each label, 0 = most frequent
    contributions: np.ndarray  # percent, sums to P@k
    labels_per_bin: np.ndarray
    train_pairs_per_bin: np.ndarray
    by: str

    @property
    def precision(self) -> float:
        """P@k in percent, the sum of the contributions."""
        return float(self.contributions.sum())


def label_bins(train_labels: SparseMatrix, n_bins: int = 10, by: str = "volume") -> np.ndarray:
    """Bin of every label, 0 for the most frequent labels and ``n_bins - 1`` for the rarest."""
    if by not in BINNINGS:
        raise ValueError(f"binning must be one of {', '.join(BINNINGS)}, got {by!r}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, got {n_bins}")
    counts = _training_counts(train_labels)
    order = np.argsort(-counts, kind="stable")
    if by == "count":
        position = np.arange(len(order)) * n_bins // max(len(order), 1)
    else:
        before = np.cumsum(counts[order]) - counts[order]  # training pairs of the more frequent labels
        position = before * n_bins // max(int(counts.sum()), 1)
    bins = np.empty(len(order), dtype=np.int64)
    bins[order] = np.minimum(position, n_bins - 1)
    return bins


def decile_contributions(
    ranking: Ranking,
    truth: SparseMatrix,
    train_labels: SparseMatrix,
    k: int = 5,
    n_bins: int = 10,
    by: str = "volume",
) -> DecileReport:
    """Contribution of each label bin to P@k (percent); see the module docstring."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if ranking.n_rows == 0:
        raise ValueError("there are no documents to analyse")
    if truth.shape[1] != train_labels.shape[1]:
        raise ValueError(f"the ground truth has {truth.shape[1]} labels, the training labels {train_labels.shape[1]}")
    bins = label_bins(train_labels, n_bins, by)
    hits = hit_mask(ranking, truth, k)
    hit_labels = ranking.indices[:, : hits.shape[1]][hits]
    contributions = 100.0 * np.bincount(bins[hit_labels], minlength=n_bins) / (ranking.n_rows * k)
    volume = np.bincount(bins, weights=_training_counts(train_labels), minlength=n_bins)
    return DecileReport(
        k=k,
        bins=bins,
        contributions=contributions,
        labels_per_bin=np.bincount(bins, minlength=n_bins),
        train_pairs_per_bin=volume.astype(np.int64),
        by=by,
    )


def _training_counts(train_labels: SparseMatrix) -> np.ndarray:
    """Number of training documents of each label."""
    return np.bincount(positive_csr(train_labels).indices, minlength=train_labels.shape[1])


def plot_deciles(report: DecileReport, path: str | Path, title: str | None = None) -> None:
    """Bar chart of the per-bin contributions to P@k, written atomically (format from the suffix)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(6, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    positions = np.arange(1, len(report.contributions) + 1)
    ax.bar(positions, report.contributions, color="tab:blue")
    ax.set_xticks(positions)
    ax.set_xlabel("label bin (1 = most training documents)")
    ax.set_ylabel(f"contribution to P@{report.k} (%)")
    ax.set_title(title or f"P@{report.k} = {report.precision:.2f}% by label frequency ({report.by} bins)")
    fig.tight_layout()
    fmt = path.suffix.lstrip(".").lower() or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt)
