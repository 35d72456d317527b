"""Scoring a forest of small regression trees feature by feature, after QuickScorer (Lucchese et al., "QuickScorer:
a fast algorithm to rank documents with additive ensembles of regression trees", SIGIR 2015).

A tree's leaves are numbered left to right and a row keeps one bit per leaf, all set at first. Every inner node
whose test ``x[column] <= threshold`` is false for the row (the row goes right there) clears the bits of the leaves
under its left child: no row that goes right reaches them. The leaf the row reaches is the leftmost one whose bit
is still set. The false nodes are found per feature: a feature's nodes of every tree,
sorted by threshold, are false exactly for the thresholds below the row's value, a prefix of the sorted list found
by binary search. The masks of each prefix are ANDed per tree ahead of time (one row of masks for each prefix), so a
row costs one search and one AND of a row of masks per feature, whatever the trees' shapes. The same leaves as
walking each tree from its root, so the same sums in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

MAX_LEAVES = 64  # a tree's leaves as the bits of one uint64
_DE_BRUIJN = 0x03F79D71B4CB0A89  # a de Bruijn sequence: the top 6 bits of its product with 2**b name b
_LOWEST_BIT = np.zeros(64, np.int64)  # b, by those top 6 bits
for _bit in range(64):
    _LOWEST_BIT[((_DE_BRUIJN << _bit) & (2**64 - 1)) >> 58] = _bit


@dataclass(frozen=True)
class FeatureOrderedNodes:
    """A forest's inner nodes grouped by the column they test (``starts[c]:starts[c + 1]``), sorted by threshold
    within a column; ``prefix_masks[starts[c] + p - 1, t]``: the leaves of tree t still reachable by a row whose
    value in column c exceeds the first p thresholds of that column (the AND of their nodes' masks, all bits set for
    the trees without one); ``leaf_value[t, i]``: the value of the i-th leaf from the left of tree t."""

    starts: np.ndarray
    threshold: np.ndarray
    prefix_masks: np.ndarray
    leaf_value: np.ndarray

    @classmethod
    def of(cls, column: np.ndarray, threshold: np.ndarray, left: np.ndarray, right: np.ndarray, value: np.ndarray,
           n_columns: int) -> FeatureOrderedNodes | None:
        """The nodes of trees given as ``[trees, nodes]`` arrays (root at node 0, a leaf its own child, ``column``:
        the column of ``x`` an inner node tests), or None where a tree has more than :data:`MAX_LEAVES` leaves, a
        node with two parents (not a tree) or a threshold that is NaN (no place in a sorted list)."""
        n_trees = column.shape[0]
        leaf_value = np.zeros((n_trees, MAX_LEAVES), np.float64)
        nodes: list[tuple[int, float, int, int]] = []  # column, threshold, tree, leaves under the left child
        most_leaves = 1
        for t in range(n_trees):
            read = _read_tree(left[t], right[t], threshold[t])
            if read is None:
                return None
            leaves, inner = read
            leaf_value[t, :len(leaves)] = value[t, leaves]
            nodes.extend((int(column[t, node]), float(threshold[t, node]), t, under_left) for node, under_left in inner)
            most_leaves = max(most_leaves, len(leaves))
        nodes.sort(key=lambda node: (node[0], node[1]))
        bits = next(width for width in (16, 32, 64) if most_leaves <= width)
        everything = 2**bits - 1
        masks = np.full(n_trees, everything, dtype=f"uint{bits}")
        prefix_masks = np.empty((len(nodes), n_trees), masks.dtype)
        for i, (c, _, t, under_left) in enumerate(nodes):
            if i and nodes[i - 1][0] != c:  # a new column: its prefixes start from every leaf
                masks[:] = everything
            masks[t] &= everything & ~under_left
            prefix_masks[i] = masks
        columns = np.array([node[0] for node in nodes], np.int64)
        return cls(np.searchsorted(columns, np.arange(n_columns + 1)).astype(np.int64),
                   np.array([node[1] for node in nodes], np.float64), prefix_masks, leaf_value)

    def score(self, x: np.ndarray) -> np.ndarray:
        """Σ_t value of the leaf of tree t that each row of ``x`` ``[n, columns]`` reaches, summed in tree order."""
        return _score_rows(x, self.starts, self.threshold, self.prefix_masks, self.leaf_value)


def _read_tree(left: np.ndarray, right: np.ndarray,
               threshold: np.ndarray) -> tuple[list[int], list[tuple[int, int]]] | None:
    """A tree's leaves left to right and its inner nodes, each with the bits (leaves numbered left to right) of the
    leaves under its left child; None where it is no tree (a node with two parents), has more than
    :data:`MAX_LEAVES` leaves or a NaN threshold."""
    leaves: list[int] = []
    inner: list[tuple[int, int]] = []
    seen: set[int] = set()

    def visit(node: int, depth: int) -> int | None:
        """The bits of the leaves under ``node``, or None (above)."""
        if node in seen or depth >= MAX_LEAVES:  # a tree of at most MAX_LEAVES leaves is not as deep
            return None
        seen.add(node)
        if left[node] == node:
            leaves.append(node)
            return 1 << (len(leaves) - 1) if len(leaves) <= MAX_LEAVES else None
        under_left = visit(int(left[node]), depth + 1)
        under_right = None if under_left is None else visit(int(right[node]), depth + 1)
        if under_left is None or under_right is None or np.isnan(threshold[node]):
            return None
        inner.append((node, under_left))
        return under_left | under_right

    return None if visit(0, 0) is None else (leaves, inner)


@numba.njit(cache=True, nogil=True)
def _score_rows(x: np.ndarray, starts: np.ndarray, threshold: np.ndarray, prefix_masks: np.ndarray,
                leaf_value: np.ndarray) -> np.ndarray:
    """:meth:`FeatureOrderedNodes.score`: per row and column, the thresholds below the row's value (all of them for
    a NaN: it goes right at every node) select a row of masks, ANDed into the row's leaves; then each tree's
    leftmost remaining leaf counts."""
    n_trees = leaf_value.shape[0]
    out = np.zeros(x.shape[0])
    bits = np.empty(n_trees, prefix_masks.dtype)
    for i in range(x.shape[0]):
        bits[:] = ~prefix_masks.dtype.type(0)
        for c in range(len(starts) - 1):
            start, end = starts[c], starts[c + 1]
            if start == end:
                continue
            value = np.float64(x[i, c])
            false = end - start if np.isnan(value) else np.searchsorted(threshold[start:end], value)
            if false:
                masks = prefix_masks[start + false - 1]
                for t in range(n_trees):
                    bits[t] &= masks[t]
        total = 0.0
        for t in range(n_trees):
            remaining = np.uint64(bits[t])
            lowest = remaining & (~remaining + np.uint64(1))
            total += leaf_value[t, _LOWEST_BIT[(lowest * np.uint64(_DE_BRUIJN)) >> np.uint64(58)]]
        out[i] = total
    return out
