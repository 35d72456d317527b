"""The type of the scipy sparse matrices that xdex's functions accept: any format (matrix or array), which
each function converts to the one it needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import scipy.sparse as sp

if TYPE_CHECKING:
    from typing import TypeAlias

    # scipy-stubs types scipy.sparse.spmatrix as a mixin without the matrix methods; _spbase is the base
    # class of every sparse matrix and array
    from scipy.sparse._base import _spbase

    SparseMatrix: TypeAlias = _spbase[Any, Any]
else:
    SparseMatrix = sp.spmatrix | sp.sparray
