"""The ranking stage's fast paths give what the plain array computations they replace give, on small random data."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from xdex.ranking.fusion import (
    DENSE_FEATURES,
    FEATURES,
    LOG_FLOOR,
    Candidates,
    LinearFusion,
    LogisticFusion,
    TreeFusion,
    candidates,
)


def reference_candidates(dense_ids: np.ndarray, lexical_ids: np.ndarray, lexical_scores: np.ndarray,
                         dense_score: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray | None]],
                         prior: np.ndarray, n_known: int, more_ids: np.ndarray | None = None) -> Candidates:
    """The array expressions that :func:`candidates` replaced (the reference): the union of the dense shortlist
    ``[n, Kd]``, the lexical shortlist ``[n, Kl]`` and another channel's ``[n, Km]`` with their features."""
    n, kd = dense_ids.shape
    kl = lexical_ids.shape[1]
    in_dense = (lexical_ids[:, :, None] == dense_ids[:, None, :]) & (lexical_ids[:, :, None] >= 0)  # [n, Kl, Kd]
    lexical_new = (lexical_ids >= 0) & ~in_dense.any(axis=2)
    ids = np.concatenate([dense_ids, np.where(lexical_new, lexical_ids, -1)], axis=1)  # [n, Kd + Kl]
    if more_ids is not None and more_ids.shape[1]:
        seen = (more_ids[:, :, None] == ids[:, None, :]).any(axis=2) | (more_ids < 0)
        ids = np.concatenate([ids, np.where(seen, -1, more_ids)], axis=1)  # [n, Kd + Kl + Km]
    km = ids.shape[1] - kd - kl
    valid = ids >= 0
    rows = np.broadcast_to(np.arange(n)[:, None], ids.shape)
    safe = np.where(valid, ids, 0)

    total, heads = dense_score(rows, safe)
    dense = np.where(valid, total, 0.0).astype(np.float32)
    if heads is None:
        heads = np.zeros((*ids.shape, 2), np.float32)
    best_dense = np.where(valid, dense, -np.inf).max(axis=1, initial=-np.inf)[:, None]
    dense_rank = np.where(dense_ids >= 0, 1.0 / (2.0 + np.arange(kd, dtype=np.float32)), 0.0)
    dense_rrank = np.concatenate([dense_rank, np.zeros((n, kl + km), np.float32)], axis=1)

    lex_scores = np.where(lexical_ids >= 0, np.nan_to_num(lexical_scores, neginf=0.0), 0.0).astype(np.float32)
    lex_rank = np.where(lexical_ids >= 0, 1.0 / (2.0 + np.arange(kl, dtype=np.float32)), 0.0).astype(np.float32)
    # the lexical features of the dense candidates: from the matching lexical entry, if any
    match = in_dense.transpose(0, 2, 1)  # [n, Kd, Kl]
    none = np.zeros((n, km), np.float32)  # the other channel's own candidates are in no lexical shortlist
    lexical = np.concatenate([(match * lex_scores[:, None, :]).sum(axis=2), lex_scores, none], axis=1)
    lexical_rrank = np.concatenate([(match * lex_rank[:, None, :]).sum(axis=2), lex_rank, none], axis=1)
    in_lexical = np.concatenate([match.any(axis=2), lexical_ids >= 0, none], axis=1).astype(np.float32)
    best_lexical = lex_scores.max(axis=1, initial=0.0)[:, None]
    log_lexical = np.where(in_lexical > 0, np.log(np.maximum(lexical, LOG_FLOOR)), 0.0)
    log_best = np.log(np.maximum(best_lexical, LOG_FLOOR))

    known = valid & (ids < n_known)
    label_prior = np.where(known, prior[np.where(known, ids, 0)], 0.0)
    features = np.stack([
        dense, np.where(valid, dense - best_dense, 0.0), dense_rrank,
        lexical, np.where(in_lexical > 0, lexical - best_lexical, 0.0), lexical_rrank, in_lexical,
        label_prior, heads[..., 0], heads[..., 1],
        log_lexical, np.where(in_lexical > 0, log_lexical - log_best, 0.0),
        *np.zeros((len(FEATURES) - 12, *ids.shape), np.float32),
    ], axis=2).astype(np.float32)
    features[~valid] = 0.0
    return Candidates(ids, features)



def shortlists(rng: np.random.Generator, n: int, kd: int, kl: int, n_labels: int) -> tuple[np.ndarray, ...]:
    """Random dense and lexical shortlists over ``n_labels`` labels that overlap, with -1 padding at row ends."""
    dense = np.stack([rng.choice(n_labels, kd, replace=False) for _ in range(n)])
    lexical = np.stack([rng.choice(n_labels, kl, replace=False) for _ in range(n)])
    scores = np.sort(rng.random((n, kl)).astype(np.float32), axis=1)[:, ::-1].copy()
    scores[rng.random((n, kl)) < 0.1] = 0.0  # a score of 0: below the log floor
    for i in range(n):  # some rows end early
        dense[i, kd - rng.integers(0, 3):] = -1
        cut = kl - rng.integers(0, kl + 1) if i % 4 == 0 else kl
        lexical[i, cut:], scores[i, cut:] = -1, -np.inf
    return dense.astype(np.int64), lexical.astype(np.int64), scores


@pytest.mark.parametrize("more", [False, True])
@pytest.mark.parametrize("two_heads", [False, True])
def test_candidates_equal_the_array_expressions(two_heads, more):
    rng = np.random.default_rng(7)
    n, n_labels, n_known = 60, 30, 26  # labels 26-29 were added after training
    dense, lexical, scores = shortlists(rng, n, 6, 5, n_labels)
    lexical[lexical >= n_known] = 0  # an added label has no lexical score...
    lexical = np.where(scores == -np.inf, -1, lexical)
    for i in range(n):  # ...and a shortlist holds a label once
        row = lexical[i][lexical[i] >= 0]
        _, first = np.unique(row, return_index=True)
        keep = np.zeros(len(row), bool)
        keep[first] = True
        lexical[i, np.flatnonzero(lexical[i] >= 0)[~keep]] = -1
    de = rng.standard_normal((n, n_labels)).astype(np.float32)
    clf = rng.standard_normal((n, n_labels)).astype(np.float32)

    def dense_score(rows: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        heads = np.stack([de[rows, ids], clf[rows, ids]], axis=-1) if two_heads else None
        return de[rows, ids] + clf[rows, ids], heads

    prior = rng.random(n_known).astype(np.float32)
    more_ids = None
    if more:  # a third shortlist: labels of either shortlist, new labels, padding
        more_ids = np.stack([rng.choice(n_labels, 4, replace=False) for _ in range(n)]).astype(np.int64)
        more_ids[::3, 0], more_ids[::5, -1] = dense[::3, 0], -1
        more_ids[1::3, 1] = np.where(lexical[1::3, 0] >= 0, lexical[1::3, 0], 0)
    fast = candidates(dense, lexical, scores, dense_score, prior, n_known, more_ids)
    slow = reference_candidates(dense, lexical, scores, dense_score, prior, n_known, more_ids)
    if more:
        assert fast.ids.shape[1] == 15 and (fast.ids[:, 11:] >= 0).any() and (fast.ids[::3, 11] == -1).all()
    np.testing.assert_array_equal(fast.ids, slow.ids)
    assert fast.features.dtype == slow.features.dtype == np.float32
    np.testing.assert_array_equal(fast.features, slow.features)
    assert (fast.ids >= n_known).any() and ((fast.features[..., FEATURES.index("in_lexical")]) > 0).any()


def test_candidates_of_no_text_and_of_empty_shortlists():
    def dense_score(rows, ids):
        return np.zeros(ids.shape, np.float32), None

    prior = np.ones(3, np.float32)
    for dense, lexical in ((np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64)),
                           (np.full((2, 2), -1, np.int64), np.full((2, 0), -1, np.int64)),
                           (np.full((2, 0), -1, np.int64), np.full((2, 3), -1, np.int64))):
        scores = np.full(lexical.shape, -np.inf, np.float32)
        fast = candidates(dense, lexical, scores, dense_score, prior, 3)
        slow = reference_candidates(dense, lexical, scores, dense_score, prior, 3)
        np.testing.assert_array_equal(fast.ids, slow.ids)
        np.testing.assert_array_equal(fast.features, slow.features)


def reference_tree_scores(fusion: TreeFusion, features: np.ndarray) -> np.ndarray:
    """Each row's walk of each tree to its leaf, one branch at a time (the loop :meth:`TreeFusion.score` replaced)."""
    x = features[..., fusion.columns].reshape(-1, len(fusion.columns)).astype(np.float64)
    out = np.zeros(len(x))
    for i in range(len(x)):
        total = 0.0
        for t in range(fusion.feature.shape[0]):
            node = 0
            while fusion.left[t, node] != node:
                go_left = x[i, fusion.feature[t, node]] <= fusion.threshold[t, node]
                node = fusion.left[t, node] if go_left else fusion.right[t, node]
            total += fusion.value[t, node]
        out[i] = total
    return (out + fusion.bias).reshape(features.shape[:-1])


def test_tree_scores_equal_a_walk_one_branch_at_a_time():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((600, len(FEATURES))).astype(np.float32)
    y = x[:, 0] + 0.5 * x[:, 3] - 0.3 * x[:, 7] + 0.5 * rng.standard_normal(600) > 0
    names = FEATURES[:10]  # a fusion over some of the features: columns are looked up by name
    fusion = TreeFusion.fit(names, x, y, trees=30)
    features = rng.standard_normal((7, 9, len(FEATURES))).astype(np.float32)
    features[0, 0, 0] = np.nan  # goes right, as "not x <= threshold"
    features[1, :, 3] = fusion.threshold[fusion.feature == 3][:1].astype(np.float32)  # at a threshold (rounded)
    np.testing.assert_array_equal(fusion.score(features), reference_tree_scores(fusion, features))


def test_fused_scores_of_empty_slots_are_left_out():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((400, len(FEATURES))).astype(np.float32)
    y = x[:, 0] > 0
    fusion = LogisticFusion(TreeFusion.fit(FEATURES, x, y, trees=10), LinearFusion.fit(DENSE_FEATURES, x, y, 1.0))
    ids = np.array([[0, -1, 5, 2], [7, 1, -1, -1]])  # labels 5 and 7 were added after training
    features = rng.standard_normal((2, 4, len(FEATURES))).astype(np.float32)
    scores = fusion.score(Candidates(ids, features), n_known=5)
    trained, added = fusion.trained.score(features), fusion.added.score(features)
    expected = np.where(ids >= 5, added, np.where(ids >= 0, trained, 0.0))
    np.testing.assert_array_equal(scores, expected)


def test_a_batch_ranked_in_threads_equals_the_reference_computation_text_by_text():
    """Ranker.rank on 300 texts (two chunks side by side, the lexical shortlist beside the queries) against the
    plain computation: a brute-force dense shortlist, the lexical shortlist of one text at a time, the array
    expressions of the features and a walk of the trees one branch at a time."""
    from ranking_asserts import assert_same_ranking

    from xdex.data import load
    from xdex.index import ExactIndex
    from xdex.ranking.fusion import label_prior
    from xdex.ranking.lexical import LexicalConfig, LexicalModel
    from xdex.ranking.ranker import CHUNK, Ranker, top_k

    demo = load("demo")
    texts, labels = demo.train.texts[:800], demo.train.labels[:800]
    lexical = LexicalModel(LexicalConfig(classifier="omikuji-bonsai", threads=1)).fit(texts, labels)
    rng = np.random.default_rng(5)
    n_labels, dim = labels.shape[1], 8
    vectors = rng.standard_normal((n_labels, dim)).astype(np.float32)
    index = ExactIndex(dim)
    index.add(vectors)
    ranker = Ranker(lexical, label_prior(labels))
    train_queries = rng.standard_normal((300, dim)).astype(np.float32)
    found = ranker.candidates(texts[:300], train_queries, index, lambda ids: vectors[ids])
    ranker.fusion = LogisticFusion.fit(found, labels[:300])

    test_texts = [*demo.test.texts[:298], "", "qzxv"]
    queries = rng.standard_normal((len(test_texts), dim)).astype(np.float32)
    assert len(test_texts) > CHUNK
    fast = ranker.rank(test_texts, lambda: queries, index, lambda ids: vectors[ids], k=10)

    scores = queries @ vectors.T
    dense_ids = np.lexsort((np.broadcast_to(np.arange(n_labels), scores.shape), -scores), axis=1)[:, :20]
    lexical_ids, lexical_scores = (np.concatenate(part) for part in
                                   zip(*(lexical.predict([text], 20) for text in test_texts), strict=True))

    def dense_score(rows: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, None]:
        return np.einsum("ncd,nd->nc", vectors[ids], queries[rows[:, 0]]), None

    slow = reference_candidates(dense_ids, lexical_ids, lexical_scores, dense_score, ranker.prior, n_labels)
    fused = np.where(slow.ids >= 0, reference_tree_scores(ranker.fusion.trained, slow.features), 0.0)
    expected = top_k(slow, fused, 10)
    assert_same_ranking(fast.indices, fast.scores, expected.indices, expected.scores)
    assert (fast.indices[:, 0] >= 0).all()



@pytest.mark.parametrize("n_blocks", [1, 2, 3])
def test_stacked_rows_equal_scipys_stacking_to_the_bit(n_blocks):
    """FeatureRows.stacked against the sparse-matrix path it replaced: each block's rows sorted, the blocks stacked
    by scipy, each row scaled to unit length again (texts with unicode, repeats, no feature at all)."""
    import scipy.sparse as sp

    from xdex.ranking.lexical import FeatureRows, LexicalConfig, TfidfTransform, _vectorizer

    train = ["alpha beta beta", "beta gamma", "Ünïcode wörds ß", "gamma delta alpha", "straße café déjà"]
    texts = [*train, "", "zzz", "alpha alpha alpha beta", "wörds café gamma ß ß"]
    config = LexicalConfig(min_df=1, char_ngrams=(2, 4))
    kinds = ["word", "char", "word"][:n_blocks]
    transforms = [TfidfTransform(_vectorizer(kind, config).fit(train)) for kind in kinds]
    blocks = [t.rows(texts) for t in transforms]
    fast = FeatureRows.stacked(blocks, [t.n_features for t in transforms]).csr()

    def sorted_block(indptr, columns, values, width):
        block = sp.csr_matrix((values, columns, indptr), shape=(len(texts), width))
        block.sort_indices()
        return block

    def unit_rows(x):  # each nonzero row scaled to unit length, float32, sorted indices
        out = sp.csr_matrix((unit_values(x.data, row_of_entries(x.indptr), x.shape[0]), x.indices, x.indptr),
                            shape=x.shape)
        out.sort_indices()
        return out

    parts = [sorted_block(*b, t.n_features) for b, t in zip(blocks, transforms, strict=True)]
    reference = parts[0] if n_blocks == 1 else unit_rows(sp.hstack(parts, format="csr"))
    np.testing.assert_array_equal(fast.indptr, reference.indptr)
    np.testing.assert_array_equal(fast.indices, reference.indices)
    np.testing.assert_array_equal(fast.data, reference.data)
    assert fast.data.dtype == np.float32 and fast.has_sorted_indices


def row_of_entries(indptr: np.ndarray) -> np.ndarray:
    """The row of each entry of CSR arrays with row offsets ``indptr``."""
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def unit_values(values: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """``values`` (the entries of rows ``rows``) with each nonzero row scaled to unit length, as float32: the array
    expressions the compiled scaling replaced (the reference)."""
    norms = np.sqrt(np.bincount(rows, weights=np.square(values, dtype=np.float64), minlength=n_rows))
    return (values / norms[rows]).astype(np.float32)


@pytest.mark.parametrize("kind", ["word", "char"])
def test_tfidf_rows_equal_the_array_expressions_to_the_bit(kind):
    """TfidfTransform.rows's compiled tf-idf and scaling against numpy's expressions of the same counts."""
    from xdex.data import load
    from xdex.ranking.lexical import LexicalConfig, TfidfTransform, _vectorizer

    demo = load("demo")
    transform = TfidfTransform(_vectorizer(kind, LexicalConfig(min_df=1)).fit(demo.train.texts[:300]))
    texts = [*demo.test.texts[:50], "", "qqqq", "Ünïcode wörds ß ß ß", "a a a a a a b"]
    for batch in (texts, texts[:1], texts[-1:]):
        indptr, columns, values = transform.rows(batch)
        counts = transform._char.count(batch) if transform._char is not None else transform._count(batch)
        np.testing.assert_array_equal(indptr, counts[0])
        np.testing.assert_array_equal(columns, counts[1])
        raw = (1.0 + np.log(counts[2].astype(np.float64))) * transform.idf[columns]
        expected = unit_values(raw, row_of_entries(indptr), len(batch))
        assert values.dtype == np.float32
        np.testing.assert_array_equal(values, expected)


def test_lexical_rows_best_first_equal_lexsort():
    """The compiled ordering of the lexical channel's labels against the padding and lexsort it replaced: labels out
    of range dropped, best first, ties to the lower id, padding last."""
    from xdex.ranking.lexical import _best_first, _found_labels

    rng = np.random.default_rng(11)
    n, k, n_labels = 200, 12, 40
    labels = rng.integers(0, n_labels + 5, (n, k)).astype(np.uint32)  # some beyond the labels
    raw = rng.choice(np.float32([0.0, 0.25, 0.5, 0.75, 1.0]), (n, k))  # many ties
    found = rng.integers(0, k + 1, n)
    found[:3] = (0, k, 1)
    ids, scores = _found_labels(labels, raw, found)
    expected_ids = np.where(np.arange(k) < found[:, None], labels.astype(np.int64), -1)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(scores, np.where(expected_ids >= 0, raw, -np.inf).astype(np.float32))

    valid = (ids >= 0) & (ids < n_labels)
    plain_ids, plain_scores = np.where(valid, ids, -1), np.where(valid, scores, -np.inf).astype(np.float32)
    order = np.lexsort((plain_ids, -plain_scores, ~valid), axis=1)
    got_ids, got_scores = _best_first(ids, scores, n_labels)
    np.testing.assert_array_equal(got_ids, np.take_along_axis(plain_ids, order, axis=1))
    np.testing.assert_array_equal(got_scores, np.take_along_axis(plain_scores, order, axis=1))
    assert got_scores.dtype == np.float32 and (got_ids[:, 0] >= 0).any() and (got_ids == -1).any()


def test_top_k_equals_a_stable_argsort():
    """The compiled top-k of the fused scores against the stable argsort it replaced: masked candidates, ties (also
    after the rounding to float32), NaN, -inf, rows narrower than k."""
    from xdex.ranking.ranker import top_k

    def reference(found: Candidates, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.where(found.mask, scores, -np.inf).astype(np.float32)
        ids = found.ids
        if scores.shape[1] < k:
            pad = k - scores.shape[1]
            scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
            ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        top_ids, top_scores = np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)
        top_ids[~np.isfinite(top_scores)] = -1
        return top_ids, top_scores

    rng = np.random.default_rng(12)
    for width, k in ((30, 10), (6, 10), (10, 10), (1, 3)):
        ids = np.stack([rng.permutation(50)[:width] for _ in range(80)])  # a label once per row
        ids[rng.random((80, width)) < 0.2] = -1
        scores = rng.choice([0.5, -1.25, 2.0, 1e-9, 3.0, 0.0, -0.0], (80, width)) + rng.random((80, width)) * 1e-12
        scores[rng.random((80, width)) < 0.05] = np.nan
        scores[rng.random((80, width)) < 0.05] = -np.inf
        found = Candidates(ids, np.zeros((80, width, 1), np.float32))
        got = top_k(found, scores, k)
        expected_ids, expected_scores = reference(found, scores, k)
        np.testing.assert_array_equal(got.indices, expected_ids)
        np.testing.assert_array_equal(got.scores, expected_scores)


def test_each_text_channels_features_are_side_by_side():
    """The ranker writes a text channel's features as one slice of FEATURES."""
    from xdex.ranking.encoder_channel import ENCODER_FEATURES
    from xdex.ranking.mentions import MENTION_FEATURES

    for names in (MENTION_FEATURES, ENCODER_FEATURES):
        first = FEATURES.index(names[0])
        assert FEATURES[first:first + len(names)] == names
