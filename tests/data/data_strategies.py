"""Hypothesis strategies for small random datasets, and a helper to compare two datasets."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

from xdex.data import Catalogue, Dataset, Split

# Texts of any characters but surrogates and line breaks (the xc-raw layout is one text per line).
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\n\r"), max_size=10)
NONBLANK = TEXT.filter(lambda t: t.strip() != "")


def _unique_ids(n: int) -> st.SearchStrategy[list[str]]:
    return st.one_of(
        st.just([str(i) for i in range(n)]),
        st.lists(NONBLANK, min_size=n, max_size=n, unique=True),
    )


@st.composite
def _matrix(draw, n_rows: int, n_cols: int, values: bool) -> sp.csr_matrix:
    cell = st.tuples(st.integers(0, n_rows - 1), st.integers(0, n_cols - 1))
    cells = sorted(draw(st.sets(cell, max_size=2 * n_rows)))
    weights = st.floats(0.001, 1000, allow_nan=False, allow_infinity=False)
    data = draw(st.lists(weights, min_size=len(cells), max_size=len(cells))) if values else [1.0] * len(cells)
    rows = [r for r, _ in cells]
    cols = [c for _, c in cells]
    return sp.csr_matrix((np.array(data, dtype=float), (rows, cols)), shape=(n_rows, n_cols))


@st.composite
def _catalogue(draw, n: int) -> Catalogue:
    descs = draw(st.none() | st.lists(TEXT, min_size=n, max_size=n))
    return Catalogue(draw(_unique_ids(n)), draw(st.lists(NONBLANK, min_size=n, max_size=n)), descs)


@st.composite
def _split(draw, n: int, n_labels: int, n_aux: int, values: bool) -> Split:
    return Split(
        ids=draw(_unique_ids(n)),
        texts=draw(st.lists(TEXT, min_size=n, max_size=n)),
        labels=draw(_matrix(n, n_labels, values)),
        akp=draw(_matrix(n, n_aux, values)) if n_aux else None,
        filter=draw(st.none() | _matrix(n, n_labels, False)),
    )


@st.composite
def datasets(draw, values: bool = False) -> Dataset:
    """A random dataset of at most 6 documents per split, 5 labels and 3 auxiliary items.

    With ``values``, relevances are random positive numbers instead of 1.
    """
    n_labels = draw(st.integers(1, 5))
    n_aux = draw(st.integers(0, 3))
    n_train = draw(st.integers(1, 6))
    n_test = draw(st.integers(0, 4))
    return Dataset(
        name="random",
        train=draw(_split(n_train, n_labels, n_aux, values)),
        labels=draw(_catalogue(n_labels)),
        test=draw(_split(n_test, n_labels, n_aux, values)) if n_test else None,
        akp_items=draw(_catalogue(n_aux)) if n_aux else None,
    )


def _same_matrix(a: sp.csr_matrix | None, b: sp.csr_matrix | None) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        assert a.shape == b.shape
        np.testing.assert_array_equal(a.toarray(), b.toarray())


def assert_same_dataset(a: Dataset, b: Dataset) -> None:
    """Equal ids, texts, descriptions, label / aux / filter matrices and auxiliary items."""
    for name in ("labels", "akp_items"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            assert (x.ids, x.texts, x.descs) == (y.ids, y.texts, y.descs)
    assert a.splits().keys() == b.splits().keys()
    for name, x in a.splits().items():
        y = b.splits()[name]
        assert (x.ids, x.texts) == (y.ids, y.texts)
        for field in ("labels", "akp", "filter", "features"):
            _same_matrix(getattr(x, field), getattr(y, field))
