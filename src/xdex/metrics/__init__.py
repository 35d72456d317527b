"""Evaluation: top-k rankings, P/nDCG/PSP/PSnDCG/R@k, propensities, decile analysis, prediction files."""

from xdex.metrics.deciles import DecileReport, decile_contributions, label_bins, plot_deciles
from xdex.metrics.evaluation import DEFAULT_KS, DEFAULT_RECALL_KS, evaluate_predictions, format_metrics
from xdex.metrics.measures import compute_metrics, hit_mask
from xdex.metrics.predictions import read_predictions, write_predictions, write_score_matrix
from xdex.metrics.propensity import PRESETS, inverse_propensity, parse_propensity
from xdex.metrics.ranking import Ranking, depth_with_filter, remove_pairs, top_k

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_RECALL_KS",
    "PRESETS",
    "DecileReport",
    "Ranking",
    "compute_metrics",
    "decile_contributions",
    "evaluate_predictions",
    "format_metrics",
    "hit_mask",
    "inverse_propensity",
    "label_bins",
    "parse_propensity",
    "plot_deciles",
    "read_predictions",
    "depth_with_filter",
    "remove_pairs",
    "top_k",
    "write_predictions",
    "write_score_matrix",
]
