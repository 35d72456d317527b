"""Scoring trees feature by feature: the leaves by hand, and the same sums as walking each tree from its root."""

from __future__ import annotations

import numpy as np

from xdex.ranking.fusion import FEATURES, MONOTONE, TreeFusion, _depth, _walk_trees
from xdex.ranking.quickscorer import FeatureOrderedNodes

# one tree over two columns, nodes 0-4: x0 <= 1 ? (x1 <= 5 ? leaf 10 : leaf 20) : leaf 30
#   node 0 tests column 0 at 1.0 (children 1, 2); node 1 tests column 1 at 5.0 (children 3, 4); nodes 2-4 are leaves
COLUMN = np.array([[0, 1, 0, 0, 0]])
THRESHOLD = np.array([[1.0, 5.0, 0.0, 0.0, 0.0]])
LEFT = np.array([[1, 3, 2, 3, 4]])
RIGHT = np.array([[2, 4, 2, 3, 4]])
VALUE = np.array([[0.0, 0.0, 30.0, 10.0, 20.0]])


def walk(column, threshold, left, right, value, x):
    depth = np.array([_depth(lo, hi) for lo, hi in zip(left, right, strict=True)], np.int64)
    return _walk_trees(x, column.astype(np.int32), threshold, left.astype(np.int32), right.astype(np.int32), value,
                       depth)


def test_a_row_reaches_the_leftmost_leaf_no_false_node_ruled_out():
    nodes = FeatureOrderedNodes.of(COLUMN, THRESHOLD, LEFT, RIGHT, VALUE, n_columns=2)
    assert nodes is not None
    np.testing.assert_array_equal(nodes.leaf_value[0, :3], [10.0, 20.0, 30.0])  # leaves left to right
    assert nodes.prefix_masks.dtype == np.uint16
    # column 0's node rules out leaves 0 and 1 (under its left child), column 1's node leaf 0
    np.testing.assert_array_equal(nodes.prefix_masks[:, 0], [0xFFFF & ~0b011, 0xFFFF & ~0b001])
    x = np.array([[0.0, 0.0],  # left, left: 10
                  [1.0, 5.0],  # at both thresholds: left, left (as scikit-learn): 10
                  [0.5, 7.0],  # left, right: 20
                  [2.0, 0.0],  # right: 30, column 1 unread by its walk
                  [np.nan, 0.0],  # NaN goes right: 30
                  [0.0, np.nan]], np.float32)  # 20
    np.testing.assert_array_equal(nodes.score(x), [10.0, 10.0, 20.0, 30.0, 30.0, 20.0])
    np.testing.assert_array_equal(nodes.score(x), walk(COLUMN, THRESHOLD, LEFT, RIGHT, VALUE, x))


def test_fitted_trees_score_as_walking_them_to_the_bit_thresholds_and_nans_included():
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(5)
    x = rng.normal(size=(2000, len(FEATURES)))
    x[:, 3] = rng.integers(0, 4, size=2000)  # few distinct values: many rows at a threshold
    y = x[:, 0] + x[:, 3] * x[:, 7] + 0.3 * rng.normal(size=2000) > 0.5
    for leaves in (15, 40):  # masks of 16 and of 64 bits
        model = HistGradientBoostingClassifier(max_iter=25, max_leaf_nodes=leaves, early_stopping=False,
                                               monotonic_cst=[1 if n in MONOTONE else 0 for n in FEATURES]).fit(x, y)
        trees = TreeFusion.from_sklearn(FEATURES, model)
        column = np.asarray(trees.columns)[trees.feature]
        nodes = FeatureOrderedNodes.of(column, trees.threshold, trees.left, trees.right, trees.value, len(FEATURES))
        assert nodes is not None and nodes.prefix_masks.dtype == (np.uint16 if leaves <= 16 else np.uint64)
        test = rng.normal(size=(600, len(FEATURES))).astype(np.float32)
        inner = trees.left != np.arange(trees.left.shape[1])
        test[:200, column[inner][:1]] = trees.threshold[inner][0]  # exactly at a threshold
        test[200:300, 0] = np.nan
        test[300:400, 3] = rng.integers(0, 4, size=100)
        np.testing.assert_array_equal(
            nodes.score(test), walk(column, trees.threshold, trees.left, trees.right, trees.value, test))
        known = ~np.isnan(test).any(axis=1)  # scikit-learn sends a NaN where its training saw most rows go
        np.testing.assert_allclose(trees.score(test[known]), model.decision_function(test[known]), rtol=1e-9,
                                   atol=1e-9)


def test_what_is_no_small_tree_is_left_to_the_walk():
    shared = LEFT.copy()
    shared[0, 1] = 2  # node 2 under both node 0 and node 1: not a tree
    assert FeatureOrderedNodes.of(COLUMN, THRESHOLD, shared, RIGHT, VALUE, 2) is None
    nan = THRESHOLD.copy()
    nan[0, 1] = np.nan
    assert FeatureOrderedNodes.of(COLUMN, nan, LEFT, RIGHT, VALUE, 2) is None
    # a chain of 70 inner nodes, each with a leaf on the right: 71 leaves
    inner, n = 70, 141
    own = np.arange(n)
    left, right = own.copy(), own.copy()
    left[:inner], right[:inner] = own[:inner] + 1, own[:inner] + 71  # node i: left to i + 1, right to leaf i + 71
    left[inner - 1] = inner  # the last inner node's left child is the leaf at `inner`
    column, threshold = np.zeros((1, n), np.int64), -np.arange(n, dtype=np.float64)[None, :]
    value = np.arange(n, dtype=np.float64)[None, :]
    assert FeatureOrderedNodes.of(column, threshold, left[None], right[None], value, 1) is None
    trees = TreeFusion([FEATURES[0]], column, threshold, left[None], right[None], value, 0.0)
    x = np.zeros((3, len(FEATURES)), np.float32)
    x[:, 0] = [-0.5, -10.5, 1.0]  # goes right at node 1, node 11, node 0
    np.testing.assert_array_equal(trees.score(x), [72.0, 82.0, 71.0])
