"""Evaluate a ranking of a dataset's test split: the metric set every xdex report uses.

Propensities come from the training labels; the test split's filter pairs are removed from the
predictions (never from the ground truth) before the metrics are computed.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdex.data.dataset import Dataset, Split
from xdex.metrics.measures import compute_metrics
from xdex.metrics.propensity import inverse_propensity, parse_propensity
from xdex.metrics.ranking import Ranking, remove_pairs

DEFAULT_KS = (1, 3, 5)
"""k of P@k, nDCG@k, PSP@k and PSnDCG@k when none are given."""
DEFAULT_RECALL_KS = (5, 10)
"""k of R@k when none are given."""


def evaluate_predictions(
    ranking: Ranking,
    dataset: Dataset,
    ks: Iterable[int] = DEFAULT_KS,
    propensity: str | tuple[float, float] | None = "default",
    recall_ks: Iterable[int] = DEFAULT_RECALL_KS,
) -> dict[str, float]:
    """Metrics (percent) of ``ranking`` on ``dataset.test``, keyed ``P@1``, ``nDCG@5``, ``R@10``, ...

    ``propensity`` is a preset name, an ``"A,B"`` string or an ``(A, B)`` pair for the
    propensity-scored metrics, or None to leave them out.
    """
    test = require_test(dataset)
    if ranking.n_rows != len(test):
        raise ValueError(f"the predictions have {ranking.n_rows} rows but the test split has {len(test)} documents")
    q = None
    if propensity is not None:
        a, b = parse_propensity(propensity)
        q = inverse_propensity(dataset.train.labels, a, b)
    return compute_metrics(filtered(ranking, test), test.labels, ks, q, recall_ks)


def format_metrics(metrics: dict[str, float]) -> str:
    """A table with one row per metric family (P, nDCG, ...) and one column per k, in percent."""
    families: dict[str, dict[int, float]] = {}
    for name, value in metrics.items():
        family, _, k = name.partition("@")
        families.setdefault(family, {})[int(k)] = value
    ks = sorted({k for values in families.values() for k in values})
    width = max(len(family) for family in families)
    lines = [" " * width + "".join(f"{'@' + str(k):>8}" for k in ks)]
    for family, values in families.items():
        cells = "".join(f"{values[k]:8.2f}" if k in values else " " * 8 for k in ks)
        lines.append(f"{family:<{width}}{cells}".rstrip())
    return "\n".join(lines)


def filtered(ranking: Ranking, split: Split) -> Ranking:
    """The ranking without the split's filter pairs (unchanged when the split has none)."""
    return ranking if split.filter is None else remove_pairs(ranking, split.filter)


def require_test(dataset: Dataset) -> Split:
    """The dataset's test split; a clear error when it has none."""
    if dataset.test is None:
        raise ValueError(f"dataset {dataset.name!r} has no test split to evaluate on")
    return dataset.test
