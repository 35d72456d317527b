"""In-memory dataset: documents with texts and sparse label sets, label texts, auxiliary items.

A folder on disk (any supported layout) loads into one :class:`Dataset` holding the
``train`` split, an optional ``test`` split, the label catalogue and, for OAK-style
data, the catalogue of auxiliary knowledge pieces linked to documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


@dataclass
class Catalogue:
    """Items with text: the labels of a dataset, or its auxiliary knowledge pieces.

    ``ids`` are stable string identifiers (row ``i`` is item ``i`` everywhere else),
    ``texts`` the short titles the encoders read, ``descs`` optional longer descriptions.
    Texts are never blank, except for the labels of a bag-of-words dataset, which have none.
    """

    ids: list[str]
    texts: list[str]
    descs: list[str] | None = None

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts):
            raise ValueError(f"{len(self.ids)} ids but {len(self.texts)} texts")
        if self.descs is not None and len(self.descs) != len(self.texts):
            raise ValueError(f"{len(self.texts)} texts but {len(self.descs)} descriptions")

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Split:
    """One split of documents.

    ``labels`` is an ``N x L`` CSR matrix of relevances (1.0 unless the source says otherwise)
    with sorted indices; ``akp`` an optional ``N x M`` CSR matrix of links to auxiliary knowledge pieces (AKPs,
    OAK's auxiliary items: the ``"aux"`` links of the files);
    ``filter`` an optional ``N x L`` CSR matrix of (document, label) pairs that must be removed
    from predictions before evaluation (e.g. a document's self-link in same-universe datasets).
    ``features`` is an optional ``N x D`` CSR matrix of bag-of-words features: a dataset in the
    sparse bag-of-words layout carries features instead of texts (its texts are empty strings).
    """

    ids: list[str]
    texts: list[str]
    labels: sp.csr_matrix
    akp: sp.csr_matrix | None = None
    filter: sp.csr_matrix | None = None
    features: sp.csr_matrix | None = None

    def __post_init__(self) -> None:
        n = len(self.ids)
        if len(self.texts) != n:
            raise ValueError(f"{n} ids but {len(self.texts)} texts")
        for name in ("labels", "akp", "filter", "features"):
            m = getattr(self, name)
            if m is None:
                continue
            m = sp.csr_matrix(m)
            m.sum_duplicates()
            m.sort_indices()
            if m.shape[0] != n:
                raise ValueError(f"{name} matrix has {m.shape[0]} rows for {n} documents")
            setattr(self, name, m)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_labels(self) -> int:
        return self.labels.shape[1]

    def filter_pairs(self) -> np.ndarray:
        """The filter pairs as an ``(n, 2)`` int64 array of (row, label)."""
        if self.filter is None:
            return np.zeros((0, 2), dtype=np.int64)
        coo = self.filter.tocoo()
        return np.stack([coo.row, coo.col], axis=1).astype(np.int64)


@dataclass
class Dataset:
    """A training split, an optional test split, the label catalogue and optional auxiliary items."""

    name: str
    train: Split
    labels: Catalogue
    test: Split | None = None
    akp_items: Catalogue | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        L = len(self.labels)
        for split_name, split in (("train", self.train), ("test", self.test)):
            if split is None:
                continue
            if split.labels.shape[1] != L:
                raise ValueError(f"{split_name} label matrix has {split.labels.shape[1]} columns for {L} labels")
            if split.akp is not None:
                if self.akp_items is None:
                    raise ValueError(f"{split_name} has auxiliary links but the dataset has no auxiliary items")
                if split.akp.shape[1] != len(self.akp_items):
                    raise ValueError(
                        f"{split_name} AKP link matrix has {split.akp.shape[1]} columns for {len(self.akp_items)} items"
                    )
        if self.test is not None:
            train_d, test_d = (s.features.shape[1] if s.features is not None else None for s in (self.train, self.test))
            if train_d != test_d:
                raise ValueError(f"train has {train_d} feature columns, test {test_d} (None: no features)")

    @property
    def n_labels(self) -> int:
        return len(self.labels)

    def splits(self) -> dict[str, Split]:
        out = {"train": self.train}
        if self.test is not None:
            out["test"] = self.test
        return out
