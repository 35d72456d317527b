"""The network's shared pieces: the label tables' scores of candidate labels."""

from __future__ import annotations

import numpy as np
import torch

from xdex.modules.network import table_scores


def test_table_scores_are_the_inner_products_of_the_stored_rows_and_of_added_vectors():
    rng = np.random.default_rng(3)
    table = torch.from_numpy(rng.integers(-3, 4, (9, 5)).astype(np.float32))  # integers: exact sums
    queries = rng.integers(-3, 4, (4, 5)).astype(np.float32)
    ids = rng.integers(0, 9, (4, 6))
    vectors = rng.integers(-3, 4, (4, 6, 5)).astype(np.float32)  # the search vectors of the same labels
    want = np.einsum("ncd,nd->nc", table.numpy()[ids], queries)
    np.testing.assert_array_equal(table_scores(table, queries, ids, vectors), want)
    ids[1, 2], ids[3, 0] = 9, 11  # two labels added after training: scored with their own vectors
    got = table_scores(table, queries, ids, vectors)
    assert got[1, 2] == vectors[1, 2] @ queries[1] and got[3, 0] == vectors[3, 0] @ queries[3]
    np.testing.assert_array_equal(np.delete(got.ravel(), [8, 18]), np.delete(want.ravel(), [8, 18]))
