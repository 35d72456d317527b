"""Training data in the Extreme Classification Repository's text format, written by compiled code.

Omikuji trains only from a file (``Model.train_on_data``): a header ``rows features labels``, then one line per
text, ``l1,l2,... j1:v1 j2:v2 ...``. Formatting the pairs in Python took 10-20 s of a 60 s fit on long texts
(about 17 million pairs), so :func:`write_xc_file` fills byte buffers in a numba loop instead.

Each value is written with nine significant digits (``123456789e-10``), enough for the decimal to read back as
the same float32 (float32 needs at most nine), so the classifier trains on the exact TF-IDF values.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp

ROWS_PER_CHUNK = 4096
_ENTRY_BYTES = 48  # a bound on one ``j:v `` pair: 20 digits, ':', 9 digits, 'e', sign, 3 digits, ' '
_LABEL_BYTES = 21  # a bound on one ``l,`` label: 20 digits, ','


@numba.njit(cache=True, nogil=True)
def _put_int(out: np.ndarray, at: int, value: int) -> int:
    """The decimal digits of ``value >= 0`` at ``out[at:]``; returns the position after them."""
    if value == 0:
        out[at] = 48
        return at + 1
    n = 0
    v = value
    while v > 0:
        n += 1
        v //= 10
    v = value
    for i in range(n - 1, -1, -1):
        out[at + i] = 48 + v % 10
        v //= 10
    return at + n


@numba.njit(cache=True, nogil=True)
def _mantissa(value: float, exponent: int) -> int:
    """``value / 10**exponent`` rounded to the nearest integer, through an exact power of ten where one exists."""
    if exponent <= 0:
        return int(np.rint(value * 10.0 ** -exponent))
    return int(np.rint(value / 10.0 ** exponent))


@numba.njit(cache=True, nogil=True)
def _put_float(out: np.ndarray, at: int, value: float) -> int:
    """``value`` (a finite float32, widened) as ``[-]M`` or ``[-]MeE``: M of at most nine significant digits,
    rounded to nearest, so that the text reads back as the same float32. Returns the position after it."""
    if value == 0.0:
        out[at] = 48
        return at + 1
    if value < 0.0:
        out[at] = 45
        at += 1
        value = -value
    exponent = int(np.floor(np.log10(value))) - 8  # value = mantissa * 10**exponent, 9-digit mantissa
    mantissa = _mantissa(value, exponent)
    if mantissa >= 1_000_000_000:  # log10 rounded up to the next power, or the mantissa rounded up to it
        exponent += 1
        mantissa = _mantissa(value, exponent)
    elif mantissa < 100_000_000:  # log10 rounded down
        exponent -= 1
        mantissa = _mantissa(value, exponent)
    while mantissa % 10 == 0:  # shorter text, same number
        mantissa //= 10
        exponent += 1
    at = _put_int(out, at, mantissa)
    if exponent != 0:
        out[at] = 101  # 'e'
        at += 1
        if exponent < 0:
            out[at] = 45
            at += 1
            exponent = -exponent
        at = _put_int(out, at, exponent)
    return at


@numba.njit(cache=True, nogil=True)
def _lines(start: int, end: int, x_indptr: np.ndarray, x_indices: np.ndarray, x_data: np.ndarray,
           y_indptr: np.ndarray, y_indices: np.ndarray, out: np.ndarray) -> int:
    """Rows ``start .. end - 1`` as lines at the start of ``out``; returns their length in bytes. A row without
    features ends after its labels: Omikuji rejects a trailing space."""
    at = 0
    for i in range(start, end):
        for e in range(y_indptr[i], y_indptr[i + 1]):
            if e > y_indptr[i]:
                out[at] = 44  # ','
                at += 1
            at = _put_int(out, at, y_indices[e])
        for e in range(x_indptr[i], x_indptr[i + 1]):
            out[at] = 32
            at = _put_int(out, at + 1, x_indices[e])
            out[at] = 58  # ':'
            at = _put_float(out, at + 1, x_data[e])
        out[at] = 10
        at += 1
    return at


def write_xc_file(path: Path, x: sp.csr_matrix, y: sp.csr_matrix) -> None:
    """Write features ``x`` and labels ``y`` (CSR, same rows; ``y.shape[1]`` labels) to ``path``: the header, then
    one line per row, labels and ``column:value`` pairs in their CSR order."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{x.shape[0]} feature rows but {y.shape[0]} label rows")
    data = np.asarray(x.data, np.float32)
    if not np.isfinite(data).all():
        raise ValueError("the features hold a value that is not finite")
    x_indptr, x_indices = x.indptr.astype(np.int64), x.indices.astype(np.int64)
    y_indptr, y_indices = y.indptr.astype(np.int64), y.indices.astype(np.int64)
    with open(path, "wb") as f:
        f.write(f"{x.shape[0]} {x.shape[1]} {y.shape[1]}\n".encode("ascii"))
        for start in range(0, x.shape[0], ROWS_PER_CHUNK):
            end = min(start + ROWS_PER_CHUNK, x.shape[0])
            bound = ((x_indptr[end] - x_indptr[start]) * _ENTRY_BYTES
                     + (y_indptr[end] - y_indptr[start]) * _LABEL_BYTES + (end - start))
            out = np.empty(bound, np.uint8)
            size = _lines(start, end, x_indptr, x_indices, data, y_indptr, y_indices, out)
            f.write(out[:size].tobytes())


__all__ = ["write_xc_file"]
