"""The mention channel: labels whose text occurs word for word in a text.

Where documents name their labels (an entry and the entries it cross-references, a page and the pages it links
to, a text and the entities it mentions), a label's text occurring in the document is direct evidence that the
label is relevant, and it is there for a label with no training document as much as for a frequent one. Neither
the bag-of-words classifiers nor the dense encoder see it as such: the first weigh words by their training labels,
the second compresses the text into one vector. This channel finds the mentions (entity linking's candidate
generation by exact name match) and leaves their weight to the fusion, fitted on validation documents, so where
documents do not name their labels (tags, categories) it learns that mentions carry little or nothing.

* **Forms.** A label is mentioned by its text's words (lower-cased runs of letters and digits, the lexical
  channel's words), and by its text without bracketed parts (``"Mercury (planet)"`` is mentioned as ``mercury``),
  each of 1 to :data:`MAX_WORDS` words.
* **Matches.** Every run of words of a text is looked up among the forms (the lengths tried are those of the
  forms starting with the run's first word). Per mentioned label: how often, the words of its longest form found,
  where first (word position), and how many labels share that form.
* **Features** (:data:`MENTION_FEATURES`, 0 for a candidate that is not mentioned): ``mention`` (1),
  ``mention_count`` (log(1 + occurrences)), ``mention_words`` (the words of the longest form found),
  ``mention_first`` (1 − first position / words of the text: 1 at the start) and ``mention_labels``
  (1 / labels sharing the form: 1 for a name only this label has).
* **Shortlist**: the mentioned labels, longest form first, then the least shared, then the earliest.

Nothing is stored: the index is built from the model's label texts (``labels.jsonl``) when the model loads, and a
label added after training by its text is mentioned like any other.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from xdex.metrics.ranking import PAD
from xdex.ranking.lexical import TOKEN_PATTERN

WORD = re.compile(TOKEN_PATTERN)  # the lexical channel's words
BRACKETED = re.compile(r"\s*[(\[][^)\]]*[)\]]")
MAX_WORDS = 8  # longer label texts are not looked for (rarely written out word for word)
MENTION_FEATURES = ("mention", "mention_count", "mention_words", "mention_first", "mention_labels")


def words(text: str) -> tuple[str, ...]:
    """The lower-cased words of ``text``."""
    return tuple(WORD.findall(text.lower()))


def forms(text: str) -> set[tuple[str, ...]]:
    """The word sequences that mention a label of text ``text``: its words, and its words without bracketed
    parts, each of 1 to :data:`MAX_WORDS` words."""
    found = {words(text), words(BRACKETED.sub(" ", text))}
    return {form for form in found if 0 < len(form) <= MAX_WORDS}


class Mention(NamedTuple):
    """A label mentioned in a text: ``occurrences`` times, its longest form found has ``words`` words and is shared
    by ``shared`` labels, first at word ``first`` of a text of ``length`` words."""

    occurrences: int
    words: int
    first: int
    length: int
    shared: int

    def features(self) -> tuple[float, float, float, float, float]:
        """The values of :data:`MENTION_FEATURES`."""
        return (1.0, math.log1p(self.occurrences), float(self.words), 1.0 - self.first / self.length,
                1.0 / self.shared)


class MentionIndex:
    """The forms of a catalogue's label texts (label row i = the i-th text), looked up in texts (module
    docstring)."""

    def __init__(self, label_texts: Iterable[str] = ()) -> None:
        self.n_labels = 0
        self._labels: dict[tuple[str, ...], tuple[int, ...]] = {}  # form -> the labels it names
        self._lengths: dict[str, tuple[int, ...]] = {}  # first word -> the lengths of the forms it starts
        self._add(label_texts)

    def _add(self, label_texts: Iterable[str]) -> None:
        for text in label_texts:
            for form in forms(text):
                self._labels[form] = (*self._labels.get(form, ()), self.n_labels)
                lengths = self._lengths.get(form[0], ())
                if len(form) not in lengths:
                    self._lengths[form[0]] = tuple(sorted((*lengths, len(form))))
            self.n_labels += 1

    def extended(self, label_texts: Sequence[str]) -> MentionIndex:
        """A new index with the labels of ``label_texts`` added after this one's (this one is unchanged)."""
        index = MentionIndex()
        index.n_labels, index._labels, index._lengths = self.n_labels, dict(self._labels), dict(self._lengths)
        index._add(label_texts)
        return index

    def find(self, text: str) -> dict[int, Mention]:
        """The labels mentioned in ``text``, by label row."""
        tokens = words(text)
        n, lengths_of, labels_of = len(tokens), self._lengths, self._labels
        hits: dict[int, list[int]] = {}  # label -> [count, words, first, shared]
        for start, first_word in enumerate(tokens):
            lengths = lengths_of.get(first_word)
            if lengths is None:
                continue
            for length in lengths:
                if start + length > n:
                    break
                named = labels_of.get(tokens[start:start + length])
                if named is None:
                    continue
                for label in named:
                    hit = hits.get(label)
                    if hit is None:
                        hits[label] = [1, length, start, len(named)]
                    else:
                        hit[0] += 1
                        if length > hit[1]:
                            hit[1], hit[3] = length, len(named)
        return {label: Mention(count, size, first, n, shared) for label, (count, size, first, shared) in hits.items()}

    def find_all(self, texts: Sequence[str]) -> list[dict[int, Mention]]:
        return [self.find(text) for text in texts]


def shortlist(found: Sequence[dict[int, Mention]], k: int) -> np.ndarray:
    """The top ``k`` mentioned labels of each text ``[n, k]`` (-1 padded): the longest form first, then the least
    shared, then the earliest, then the lowest row."""
    ids = np.full((len(found), k), PAD, np.int64)
    for row, mentions in enumerate(found):
        best = sorted(mentions, key=lambda label: (-mentions[label].words, mentions[label].shared,
                                                   mentions[label].first, label))[:k]
        ids[row, :len(best)] = best
    return ids


def mention_features(found: Sequence[dict[int, Mention]], ids: np.ndarray) -> np.ndarray:
    """The :data:`MENTION_FEATURES` of candidate labels ``ids`` ``[n, C]`` (-1: none) of the texts whose mentions are
    ``found``: ``[n, C, 5]``, 0 for a label not mentioned."""
    out = np.zeros((*ids.shape, len(MENTION_FEATURES)), np.float32)
    for row, mentions in enumerate(found):
        if not mentions:
            continue
        candidates = ids[row].tolist()  # each label once: the mentioned labels are looked for, not every candidate
        for label, mention in mentions.items():
            if label in candidates:
                out[row, candidates.index(label)] = mention.features()
    return out
