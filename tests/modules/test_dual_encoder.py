"""The dual encoder's unit vectors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xdex.modules.dual_encoder import unit_rows


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
