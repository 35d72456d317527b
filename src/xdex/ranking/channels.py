"""The channels of the ranking stage that read the label texts themselves: the mention channel
(:mod:`xdex.ranking.mentions`) and a pre-trained sentence encoder (:mod:`xdex.ranking.encoder_channel`).

Unlike the dense and lexical channels, they need nothing learnt from the training documents, only the catalogue's
texts, so they cover a label added after training as soon as its text is known. :class:`TextChannels` holds both
over the labels of one catalogue (trained labels first, then added ones); :meth:`TextChannels.read` gives what they
see in a batch of texts (:class:`Evidence`), which the ranker turns into candidates and features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xdex.metrics.ranking import PAD
from xdex.ranking.encoder_channel import ENCODER_FEATURES, EncoderChannel
from xdex.ranking.mentions import MENTION_FEATURES, Mention, MentionIndex, mention_features, shortlist


@dataclass
class Evidence:
    """What the text channels see in a batch of texts: the labels each text names, and the texts' encoder vectors
    with their encoder shortlist and best cosine (None where the channel is off)."""

    mentions: list[dict[int, Mention]] | None = None
    vectors: np.ndarray | None = None
    encoder_ids: np.ndarray | None = None
    best: np.ndarray | None = None


@dataclass
class TextChannels:
    """The mention index and the encoder channel of one catalogue (either may be absent)."""

    mentions: MentionIndex | None = None
    encoder: EncoderChannel | None = None
    mention_candidates: int = 0
    encoder_candidates: int = 0

    @property
    def n_labels(self) -> int | None:
        """The labels the channels cover (None without a channel)."""
        counts = {c.n_labels for c in (self.mentions, self.encoder) if c is not None}
        if len(counts) > 1:
            raise ValueError(f"the text channels cover different numbers of labels: {sorted(counts)}")
        return counts.pop() if counts else None

    def extended(self, label_texts: Sequence[str]) -> TextChannels:
        """The channels with the labels of ``label_texts`` added after these (these are unchanged)."""
        return TextChannels(None if self.mentions is None else self.mentions.extended(label_texts),
                            None if self.encoder is None else self.encoder.with_labels(label_texts),
                            self.mention_candidates, self.encoder_candidates)

    def read(self, texts: Sequence[str]) -> Evidence:
        """What the channels see in ``texts``."""
        evidence = Evidence()
        if self.mentions is not None:
            evidence.mentions = self.mentions.find_all(texts)
        if self.encoder is not None:
            evidence.vectors = self.encoder.embed(texts)
            evidence.encoder_ids, evidence.best = self.encoder.shortlist(evidence.vectors, self.encoder_candidates)
        return evidence

    def shortlists(self, evidence: Evidence) -> np.ndarray:
        """The mention shortlist then the encoder shortlist of each text ``[n, Km + Ke]`` (-1 padded)."""
        parts = []
        if evidence.mentions is not None and self.mention_candidates:
            parts.append(shortlist(evidence.mentions, self.mention_candidates))
        if evidence.encoder_ids is not None:
            parts.append(evidence.encoder_ids)
        n = len(evidence.mentions) if evidence.mentions is not None else len(evidence.vectors)  # type: ignore[arg-type]
        return np.concatenate(parts, axis=1) if parts else np.full((n, 0), PAD, np.int64)

    def features(self, evidence: Evidence, ids: np.ndarray) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """The features of candidates ``ids`` ``[n, C]`` as blocks of named features and their values ``[n, C, F]``
        (:data:`MENTION_FEATURES`, :data:`ENCODER_FEATURES`), for the channels there are."""
        out: list[tuple[tuple[str, ...], np.ndarray]] = []
        if evidence.mentions is not None:
            out.append((MENTION_FEATURES, mention_features(evidence.mentions, ids)))
        if self.encoder is not None and evidence.vectors is not None:
            assert evidence.encoder_ids is not None and evidence.best is not None
            out.append((ENCODER_FEATURES,
                        self.encoder.features(evidence.vectors, ids, evidence.encoder_ids, evidence.best)))
        return out
