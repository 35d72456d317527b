"""Label propensities of Jain et al. (2016), used by the propensity-scored metrics PSP@k and PSnDCG@k.

The inverse propensity of label ``l`` is ``q_l = 1/p_l = 1 + C (N_l + B)^(-A)`` with
``C = (ln N - 1)(B + 1)^A``, ``N`` the number of training documents and ``N_l`` the number of
training documents that have label ``l``.
"""

from __future__ import annotations

import numpy as np

from xdex.metrics.ranking import positive_csr
from xdex.sparse import SparseMatrix

PRESETS: dict[str, tuple[float, float]] = {
    "default": (0.55, 1.5),
    "amazon": (0.6, 2.6),
    "wikipedia": (0.5, 0.4),
}
"""Named (A, B) pairs from Jain et al. (2016)."""


def inverse_propensity(train_labels: SparseMatrix, A: float = 0.55, B: float = 1.5) -> np.ndarray:
    """``q_l = 1 + (ln N - 1)(B + 1)^A (N_l + B)^(-A)`` for every label (float64, length L)."""
    if not B > 0:
        raise ValueError(f"propensity parameter B must be > 0, got {B}")
    y = positive_csr(train_labels)
    n = y.shape[0]
    if n == 0:
        raise ValueError("propensities need at least one training document")
    counts = np.bincount(y.indices, minlength=y.shape[1]).astype(np.float64)
    c = (np.log(n) - 1.0) * (B + 1.0) ** A
    return 1.0 + c * (counts + B) ** (-A)


def parse_propensity(spec: str | tuple[float, float]) -> tuple[float, float]:
    """(A, B) from a preset name (``default``, ``amazon``, ``wikipedia``), an ``"A,B"`` string or a pair."""
    if isinstance(spec, tuple):
        a, b = (float(v) for v in spec)
    elif spec.strip().lower() in PRESETS:
        return PRESETS[spec.strip().lower()]
    else:
        try:
            a, b = (float(p) for p in spec.split(","))
        except ValueError:
            names = ", ".join(PRESETS)
            raise ValueError(f"propensity {spec!r}: expected one of {names} or 'A,B' (two numbers)") from None
    if not (np.isfinite(a) and np.isfinite(b)) or b <= 0:
        raise ValueError(f"propensity {spec!r}: A and B must be finite numbers with B > 0")
    return a, b
