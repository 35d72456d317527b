"""The network's shared pieces: the label tables' scores of candidate labels, unit rows."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from xdex.modules.network import table_scores, unit_rows


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


def test_unit_rows_are_torchs_normalize_to_the_bit():
    torch.manual_seed(0)
    rows = torch.randn(64, 37) * torch.logspace(-30, 15, 64)[:, None]  # tiny to large norms
    rows[0] = 0.0  # a zero row stays zero (its norm is clamped, as F.normalize clamps it)
    rows[1, 3] = 1e-45  # a subnormal component
    got = unit_rows(rows)
    assert torch.equal(got, F.normalize(rows, dim=-1))
    assert torch.equal(got[0], torch.zeros(37))
    large = torch.linalg.vector_norm(rows, dim=-1) > 1e-12  # below the clamp: divided by 1e-12, shorter than 1
    assert 20 < int(large.sum()) < 64
    assert torch.allclose(torch.linalg.vector_norm(got[large], dim=-1), torch.ones(int(large.sum())))
