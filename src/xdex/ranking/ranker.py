"""The ranking stage of a model: dense and lexical shortlists, fused by a model learnt on validation data.

For each text: the dense channel's top ``dense_candidates`` labels (the model's index, and the labels added
after training, searched exactly), the lexical channel's top ``lexical_candidates``
(:class:`~xdex.ranking.lexical.LexicalModel`), the mention channel's top ``mention_candidates`` (labels the
text names word for word: :mod:`xdex.ranking.mentions`, from the model's label texts) and, where the ranker has
one, a pre-trained sentence encoder's top ``encoder_candidates`` (:mod:`xdex.ranking.encoder_channel`) are
merged into one candidate set, whose features
(:mod:`xdex.ranking.fusion`) the fusion scores; the top k by fused score are returned. ``mode="lexical"``
ranks by the lexical channel alone. A model directory keeps it in ``ranker/``::

    ranker/
      ranker.json     format, version, the shortlist sizes, the lexical shortlist's beam width and the ranking
                      served by default (a file without ``mention_candidates`` predates the mention channel: 0,
                      the channel off; one without ``lexical_beam`` searched as wide as its shortlist: 0)
      fusion.json     the fusion's weights
      prior.npy       the trained labels' priors
      lexical/        the lexical model (its own pickle-free format)
      encoder/        the sentence encoder channel's label vectors (only with ``ranker.encoder``)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from xdex.hardware import thread_pool
from xdex.index.base import Index
from xdex.index.retrieval import retrieve, with_added
from xdex.jsonfile import read_json, write_json
from xdex.metrics.ranking import PAD, Ranking
from xdex.ranking.channels import Evidence, TextChannels
from xdex.ranking.encoder_channel import EncoderChannel
from xdex.ranking.fusion import FEATURES, Candidates, LogisticFusion, candidates
from xdex.ranking.lexical import LexicalModel
from xdex.ranking.mentions import MentionIndex

log = logging.getLogger(__name__)

FORMAT = "xdex-ranker"
VERSION = 1
MODES = ("fused", "lexical")  # the rankings of the stage
DENSE = "dense"  # the network's own ranking, without the stage
SERVED = (*MODES, DENSE)  # what a model may serve by default
HeadScores = Callable[[np.ndarray, np.ndarray, np.ndarray], "np.ndarray | None"]  # Network.head_scores
CHUNK = 256  # texts scored at a time: bounds the [texts, candidates, dim] gather of label vectors
BESIDE = 32  # from this many texts on, the lexical shortlist is computed beside the dense queries (a handover
# between threads costs more than it saves for a few texts)


@dataclass
class Ranker:
    """Lexical channel + fusion over the dense and lexical shortlists (module docstring)."""

    lexical: LexicalModel
    prior: np.ndarray  # [trained labels]: log(1 + n_l) / log(1 + max n)
    fusion: LogisticFusion | None = None  # fitted on validation candidates (methods/ranker.py)
    dense_candidates: int = 20  # 0: no dense shortlist (the dense score stays a feature of lexical candidates)
    lexical_candidates: int = 20  # 0: no lexical shortlist, so no lexical features (dense score and prior)
    served: str = "fused"  # the ranking a model serves by default, chosen on validation (methods/ranker.py)
    mention_candidates: int = 0  # mentioned labels per text; 0: no mention channel (no mention features either)
    encoder: EncoderChannel | None = None  # a pre-trained sentence encoder's channel (None: none)
    encoder_candidates: int = 0  # labels of highest cosine per text from it
    lexical_beam: int = 0  # Omikuji's beam width for the lexical shortlist; 0: the shortlist size (older models)

    def __post_init__(self) -> None:
        if self.served not in SERVED:
            raise ValueError(f"a ranker serves one of {', '.join(SERVED)}, not {self.served!r}")
        sizes = (self.dense_candidates, self.lexical_candidates, self.mention_candidates)
        if self.lexical_beam < 0:
            raise ValueError(f"the ranker's lexical beam must be >= 0, not {self.lexical_beam}")
        if min(sizes) < 0 or not sum(sizes):
            raise ValueError(f"the ranker's shortlists need sizes >= 0, not all 0 (dense {self.dense_candidates}, "
                             f"lexical {self.lexical_candidates}, mention {self.mention_candidates})")

    def lexical_shortlist(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The lexical channel's top ``lexical_candidates`` labels of each text and their scores."""
        n = len(texts)
        if self.lexical_candidates == 0:
            return np.full((n, 0), PAD, np.int64), np.zeros((n, 0), np.float32)
        return self.lexical.predict(list(texts), self.lexical_candidates, self.lexical_beam or None)

    @property
    def reads_label_texts(self) -> bool:
        """Whether the ranker has a channel that reads the label texts (mentions, a sentence encoder)."""
        return bool(self.mention_candidates) or self.encoder is not None

    def text_channels(self, label_texts: Sequence[str], known: TextChannels | None = None) -> TextChannels | None:
        """The mention and encoder channels over a catalogue's ``label_texts`` (the trained labels, then any added
        later), None where the ranker has neither. ``known``: channels over the first labels, extended."""
        if not self.reads_label_texts:
            return None
        covered = known.n_labels if known is not None else None
        if known is not None and covered is not None and covered <= len(label_texts):
            return known.extended(label_texts[covered:]) if covered < len(label_texts) else known
        n = len(self.prior)
        encoder = None if self.encoder is None else self.encoder.with_labels(label_texts[n:])
        mentions = MentionIndex(label_texts) if self.mention_candidates else None
        return TextChannels(mentions, encoder, self.mention_candidates, self.encoder_candidates)

    def dense_shortlist(self, queries: np.ndarray, index: Index | np.ndarray, added: np.ndarray | None = None,
                        k: int = 0) -> np.ndarray:
        """The dense channel's top ``max(dense_candidates, k)`` label rows of each query vector: ``index`` searches
        the trained labels (an index or their vectors), ``added`` the labels added after training, exactly."""
        if self.dense_candidates == 0:
            return np.full((len(queries), 0), PAD, np.int64)
        width = max(self.dense_candidates, k)
        dense = retrieve(queries, index, width)
        if added is not None and len(added):
            dense = with_added(dense, queries, added, len(self.prior), width)
        return dense.indices

    def candidates(self, texts: Sequence[str], queries: np.ndarray, index: Index | np.ndarray,
                   label_vectors: Callable[[np.ndarray], np.ndarray], added: np.ndarray | None = None, k: int = 0,
                   lexical: tuple[np.ndarray, np.ndarray] | None = None, heads: HeadScores | None = None,
                   channels: TextChannels | None = None, evidence: Evidence | None = None,
                   dense: np.ndarray | None = None) -> Candidates:
        """The candidates of ``texts`` (their dense query vectors ``queries``) and their features.

        ``index`` searches the trained labels (an index or their vectors); ``label_vectors(ids)`` gives the search
        vectors of label rows ``ids`` (any shape), trained or added. The dense shortlist holds at least ``k``
        labels, so that a ranking of ``k`` labels is never cut short. ``lexical`` and ``dense``: the texts'
        :meth:`lexical_shortlist` and :meth:`dense_shortlist`, when already computed. ``heads``: the network's
        ``head_scores``, where its dense score sums two heads. ``channels``: the :meth:`text_channels` of every
        label (trained, then added), needed where the ranker has a mention or encoder channel; ``evidence``: what
        they see in ``texts``, when already read.
        """
        n_known = len(self.prior)
        dense_ids = dense if dense is not None else self.dense_shortlist(queries, index, added, k)
        lexical_ids, lexical_scores = lexical if lexical is not None else self.lexical_shortlist(texts)
        if evidence is None and self.reads_label_texts:
            if channels is None:
                raise ValueError("this ranker's mention or encoder channel needs the channels of the label texts")
            evidence = channels.read(texts)

        def dense_score(rows: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
            vectors, texts_queries = label_vectors(ids), queries[rows[:, 0]]
            parts = heads(texts_queries, ids, vectors) if heads is not None else None
            return np.einsum("ncd,nd->nc", vectors, texts_queries), parts

        if evidence is None or channels is None:
            return candidates(dense_ids, lexical_ids, lexical_scores, dense_score, self.prior, n_known)
        found = candidates(dense_ids, lexical_ids, lexical_scores, dense_score, self.prior, n_known,
                           channels.shortlists(evidence))
        for names, values in channels.features(evidence, found.ids):
            first = FEATURES.index(names[0])  # a channel's features are side by side in FEATURES
            found.features[..., first:first + len(names)] = values
        return found

    def rank(self, texts: Sequence[str], queries: np.ndarray | Callable[[], np.ndarray] | None, index: Index,
             label_vectors: Callable[[np.ndarray], np.ndarray], k: int, added: np.ndarray | None = None,
             mode: str = "fused", heads: HeadScores | None = None, channels: TextChannels | None = None
             ) -> Ranking:
        """Top-``k`` labels of each text by fused score (``mode="fused"``; ``queries`` are the texts' dense query
        vectors, or a function that computes them; ``heads`` and ``channels`` as in :meth:`candidates`) or by the
        lexical channel alone (``"lexical"``; ``queries`` unused).

        For :data:`BESIDE` texts or more, the lexical shortlist is computed on another thread while ``queries()``
        runs (Omikuji's search and torch's work both leave Python's lock), and the chunks of a large batch are ranked
        side by side, their dense shortlists found by one search of every text (a BLAS product over many queries
        costs less a query than one per chunk)."""
        if mode not in MODES:
            raise ValueError(f"ranker mode {mode!r} is not one of {', '.join(MODES)}")
        if mode == "lexical":
            ids, scores = self.lexical.predict(list(texts), k)
            return Ranking(ids, scores)
        if queries is None or self.fusion is None:
            raise ValueError("the fused ranking needs the texts' dense query vectors and a fitted fusion")
        if not len(texts):
            return Ranking(np.full((0, k), PAD, np.int64), np.full((0, k), -np.inf, np.float32))
        fusion, pool = self.fusion, thread_pool("ranker")  # its tasks wait on Omikuji's pool, never on their own
        if callable(queries) and len(texts) >= BESIDE:
            lexical = pool.submit(self.lexical_shortlist, texts)
            vectors = queries()
            ids, scores = lexical.result()
        else:
            ids, scores = self.lexical_shortlist(texts)
            vectors = queries() if callable(queries) else queries

        dense = self.dense_shortlist(vectors, index, added, k)

        def chunk(start: int) -> Ranking:
            end = min(start + CHUNK, len(texts))
            found = self.candidates(texts[start:end], vectors[start:end], index, label_vectors, added, k,
                                    (ids[start:end], scores[start:end]), heads, channels, dense=dense[start:end])
            return top_k(found, fusion.score(found, len(self.prior)), k)

        starts = range(0, len(texts), CHUNK)
        return Ranking.stacked(list(pool.map(chunk, starts)) if len(starts) > 1 else [chunk(s) for s in starts])

    # -- persistence ------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        """Write ``folder`` (module docstring); the caller replaces the folder atomically."""
        if self.fusion is None:
            raise ValueError("a ranker is saved once its fusion is fitted")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.lexical.save(folder / "lexical")
        self.fusion.save(folder / "fusion.json")
        if self.encoder is not None:
            self.encoder.save(folder / "encoder", len(self.prior))
        with open(folder / "prior.npy", "wb") as f:
            np.save(f, self.prior.astype(np.float32), allow_pickle=False)
        write_json(folder / "ranker.json", {"format": FORMAT, "version": VERSION,
                                            "dense_candidates": self.dense_candidates,
                                            "lexical_candidates": self.lexical_candidates,
                                            "mention_candidates": self.mention_candidates,
                                            "encoder_candidates": self.encoder_candidates,
                                            "lexical_beam": self.lexical_beam, "served": self.served})

    @classmethod
    def load(cls, folder: str | Path, n_labels: int) -> Ranker:
        """Read a ranker written by :meth:`save` for a model of ``n_labels`` trained labels."""
        folder = Path(folder)
        path = folder / "ranker.json"
        record = read_json(path)
        if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("version") != VERSION:
            raise ValueError(f"{path}: not an xdex ranker of version {VERSION}")
        try:
            dense, lexical = int(record["dense_candidates"]), int(record["lexical_candidates"])
            mention = int(record.get("mention_candidates", 0))
            encoder = int(record.get("encoder_candidates", 0))
            beam = int(record.get("lexical_beam", 0))
            served = str(record["served"])
            if (served not in SERVED or min(dense, lexical, mention, encoder, beam) < 0
                    or not dense + lexical + mention):
                raise ValueError(f"served {served!r}, shortlists {dense}, {lexical}, {mention} and {encoder}, "
                                 f"lexical beam {beam}")
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: damaged settings ({e})") from None
        try:
            prior = np.load(folder / "prior.npy", allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise ValueError(f"{folder / 'prior.npy'}: damaged label priors ({e})") from None
        if prior.shape != (n_labels,):
            raise ValueError(f"{folder / 'prior.npy'} holds {prior.shape} priors for the model's {n_labels} labels")
        channel = EncoderChannel.load(folder / "encoder", n_labels) if (folder / "encoder").is_dir() else None
        return cls(LexicalModel.load(folder / "lexical"), prior.astype(np.float32),
                   LogisticFusion.load(folder / "fusion.json"), dense, lexical, served, mention, channel,
                   encoder if channel is not None else 0, beam)


def top_k(found: Candidates, scores: np.ndarray, k: int) -> Ranking:
    """The ``k`` candidates of highest score per row, best first (padded with -1 / -inf)."""
    ids, top = _top_k(found.ids, np.ascontiguousarray(scores), k)
    return Ranking(ids, top)


@numba.njit(cache=True, nogil=True)
def _top_k(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` best candidates (``ids`` -1: none) by float32 score: the order of a stable ``argsort`` of
    the negated scores (ties in candidate order, NaN last) over the row padded to ``k`` with -inf, by insertion into
    the ``k`` kept; a candidate kept without a finite score gets the id -1."""
    n, width = ids.shape
    out_ids = np.full((n, k), PAD, np.int64)
    out_scores = np.full((n, k), -np.inf, np.float32)
    for i in range(n):
        size = 0
        for c in range(max(width, k)):
            label = ids[i, c] if c < width else PAD
            score = np.float32(scores[i, c]) if label >= 0 else np.float32(-np.inf)
            at = size
            while at > 0 and not np.isnan(score) and (np.isnan(out_scores[i, at - 1]) or score > out_scores[i, at - 1]):
                at -= 1
            if at == k:
                continue
            for move in range(min(size, k - 1), at, -1):
                out_ids[i, move], out_scores[i, move] = out_ids[i, move - 1], out_scores[i, move - 1]
            out_ids[i, at], out_scores[i, at] = label, score
            size = min(size + 1, k)
        for c in range(k):
            if not np.isfinite(out_scores[i, c]):
                out_ids[i, c] = PAD
    return out_ids, out_scores
