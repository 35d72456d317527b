"""The shared datasets put together into one of about 10^5 real documents (docs/benchmarks.md, "Real texts at 10^5
documents: the shared datasets put together").

    python -m benchmarks.shared_union OUT [--data-root DIR]

gcide-links and gcide-links-titles share GCIDE's labels, foldoc-links and foldoc-links-titles FOLDOC's, and
debian-debtags keeps its tags: 92,753 training and 33,034 test documents (titles and long texts), 35,594 labels,
each training split after the one before, each group's labels after the group before. Document and label ids are
prefixed with their dataset's and group's names; the test splits' filter pairs follow their documents, and the
training splits of same-universe datasets get theirs (a document and the label of the same id, which is how xdex
holds validation documents out of such a dataset, :func:`xdex.methods.run.validation_filter`; the prefixes would
hide it). Written in the jsonl layout by :func:`xdex.data.save` (gzipped), so any recipe, ``xdex evaluate`` and
the shared harness's converter read it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.harness import data_root
from xdex.data import Catalogue, Dataset, Split, load, save
from xdex.methods.run import validation_filter

GROUPS = {"gcide": ("gcide-links", "gcide-links-titles"), "foldoc": ("foldoc-links", "foldoc-links-titles"),
          "debtags": ("debian-debtags",)}


def _shifted(matrix: sp.csr_matrix | None, rows: int, before: int, total: int) -> sp.csr_matrix:
    """``matrix`` (or an empty one of ``rows`` rows) with its columns moved ``before`` to the right, ``total`` wide."""
    if matrix is None:
        return sp.csr_matrix((rows, total), dtype="float32")
    matrix = matrix.tocsr()
    return sp.csr_matrix((matrix.data, matrix.indices + before, matrix.indptr), shape=(matrix.shape[0], total))


def union(root: Path, groups: dict[str, tuple[str, ...]]) -> Dataset:
    """The datasets of ``groups`` (group name -> datasets sharing one label catalogue) under ``root`` as one dataset
    (module docstring)."""
    loaded = {group: [load(root / name) for name in names] for group, names in groups.items()}
    for sets in loaded.values():
        for other in sets[1:]:
            if other.labels.ids != sets[0].labels.ids:
                raise ValueError(f"{other.name} does not share the labels of {sets[0].name}")
    total = sum(sets[0].n_labels for sets in loaded.values())
    ids: list[str] = []
    texts: list[str] = []
    descs: list[str] = []
    parts: dict[str, list[tuple[Split, str, int, sp.csr_matrix | None]]] = {"train": [], "test": []}
    for group, sets in loaded.items():
        labels = sets[0].labels
        ids += [f"{group}:{key}" for key in labels.ids]
        texts += labels.texts
        descs += labels.descs if labels.descs is not None else [""] * len(labels)
        for dataset in sets:
            assert dataset.test is not None
            same_universe = dataset.test.filter is not None and dataset.train.filter is None
            for name, split in dataset.splits().items():
                pairs = validation_filter(dataset, np.arange(len(split))) if name == "train" and same_universe \
                    else split.filter
                parts[name].append((split, dataset.name, len(ids) - len(labels), pairs))

    def joined(name: str) -> Split:
        pieces = parts[name]
        return Split([f"{source}:{key}" for split, source, _, _ in pieces for key in split.ids],
                     [text for split, _, _, _ in pieces for text in split.texts],
                     sp.vstack([_shifted(split.labels, len(split), before, total) for split, _, before, _ in pieces],
                               format="csr"),
                     filter=sp.vstack([_shifted(pairs, len(split), before, total)
                                       for split, _, before, pairs in pieces], format="csr"))

    return Dataset("shared-union", joined("train"), Catalogue(ids, texts, descs), joined("test"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write (must not hold a dataset yet)")
    parser.add_argument("--data-root", type=Path, default=None, help="the shared datasets' folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    dataset = union(args.data_root or data_root(), GROUPS)
    save(dataset, args.out, compress=True)
    assert dataset.test is not None
    print(f"{args.out}: {len(dataset.train)} training and {len(dataset.test)} test documents, {dataset.n_labels} "
          f"labels")


if __name__ == "__main__":
    main()
