"""Ranking channels that score (text, label) pairs besides the dense model.

:mod:`xdex.ranking.lexical`: TF-IDF features and per-label sparse linear classifiers (Omikuji's
Bonsai trees by default), fitted on the training texts, with a pickle-free folder format.
"""

from xdex.ranking.lexical import (
    ANALYZERS,
    CLASSIFIERS,
    FORMAT_VERSION,
    LexicalConfig,
    LexicalModel,
    choose_analyzer,
    documents_per_label,
    fit_choosing_features,
    unique_word_share,
)

__all__ = [
    "ANALYZERS",
    "CLASSIFIERS",
    "FORMAT_VERSION",
    "LexicalConfig",
    "LexicalModel",
    "choose_analyzer",
    "documents_per_label",
    "fit_choosing_features",
    "unique_word_share",
]
