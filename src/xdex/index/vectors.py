"""Checking and normalising the dense vectors that indexes and clusterings take."""

from __future__ import annotations

import numpy as np


def as_matrix(array: object, name: str, dim: int | None = None) -> np.ndarray:
    """Return ``array`` as a C-contiguous float32 ``[n, dim]`` matrix.

    Raises ``ValueError`` naming ``name`` when the array is not 2-D, has the wrong width,
    is not numeric, or holds NaN or infinity (also after the cast to float32).
    """
    a = np.asarray(array)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [n, dim], got shape {a.shape}")
    if dim is not None and a.shape[1] != dim:
        raise ValueError(f"{name} have dimension {a.shape[1]}, expected {dim}")
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{name} must hold real numbers, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    finite = np.isfinite(a).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{name} row {row} holds NaN or infinity (as float32)")
    return a


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Return a copy of ``x`` with rows scaled to unit L2 norm; all-zero rows stay zero."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1).astype(x.dtype)
