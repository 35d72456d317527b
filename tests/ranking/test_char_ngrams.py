"""Character n-grams cut word by word: scikit-learn's char_wb vocabulary, idf and counts, to the bit."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from xdex.data import load
from xdex.ranking.char_ngrams import CharNgramCounter, _WordTable, fit_char_idf, word_ngrams
from xdex.ranking.lexical import LexicalConfig, TfidfTransform, _vectorizer

ODD_TEXTS = ["", "   ", "a", "A b\tc\nd", "Ünïcode  wörds ß ß", "x" * 12, "straße café déjà-vu", "a a a a"]


def char_vectorizer(lo: int, hi: int, min_df: int, vocabulary: list[str] | None = None,
                    max_df: float | int = 1.0) -> TfidfVectorizer:
    vectorizer = _vectorizer("char", LexicalConfig(char_ngrams=(lo, hi), min_df=min_df), vocabulary)
    vectorizer.max_df = max_df
    return vectorizer


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [*load("demo").train.texts[:300], *ODD_TEXTS]


@pytest.mark.parametrize("lo, hi", [(1, 1), (2, 5), (3, 3), (4, 7)])
def test_a_words_ngrams_are_scikit_learns(lo, hi):
    analyze = TfidfVectorizer(analyzer="char_wb", ngram_range=(lo, hi)).build_analyzer()
    for word in ["a", "ab", "abc", "abcdef", "ß", "wörds", "x" * 9]:
        assert word_ngrams(word, lo, hi) == analyze(word), word


def test_counts_by_hand():
    counter = CharNgramCounter({" a": 0, "ab": 1, "b ": 2, " b": 3}, (2, 2))
    indptr, columns, counts = counter.count(["ab AB", "b", "", "zz"])
    assert indptr.tolist() == [0, 3, 5, 5, 5]
    assert columns.tolist() == [0, 1, 2, 2, 3]  # each row ascending
    assert counts.tolist() == [2, 2, 2, 1, 1]  # 7 entries, 4 columns: counted by column
    alone = [counter.count([text]) for text in ["ab AB", "b"]]  # fewer entries than columns: sorted
    assert [a[1].tolist() for a in alone] == [[0, 1, 2], [2, 3]]
    assert [a[2].tolist() for a in alone] == [[2, 2, 2], [1, 1]]


@pytest.mark.parametrize("lo, hi, min_df, max_df", [(2, 5, 2, 1.0), (1, 3, 1, 1.0), (3, 4, 3, 1.0), (2, 5, 2, 0.05),
                                                   (1, 3, 1, 0.5), (3, 4, 2, 40)])
def test_fit_gives_scikit_learns_vocabulary_and_idf(texts, lo, hi, min_df, max_df):
    reference = char_vectorizer(lo, hi, min_df, max_df=max_df).fit(texts)
    terms, idf = fit_char_idf(texts, char_vectorizer(lo, hi, min_df, max_df=max_df))
    assert max_df == 1.0 or len(terms) < len(char_vectorizer(lo, hi, min_df).fit(texts).vocabulary_)
    assert terms == sorted(reference.vocabulary_, key=reference.vocabulary_.__getitem__)
    assert idf.dtype == reference.idf_.dtype
    np.testing.assert_array_equal(idf, reference.idf_)


def test_rows_equal_the_analyzers_one_text_and_a_batch(texts):
    """Both ways of counting in the compiled loop (a table by column for a batch, sorted entries for one text)
    against the rows of scikit-learn's analyzer, to the bit."""
    terms, idf = fit_char_idf(texts, char_vectorizer(2, 5, 2))
    vectorizer = char_vectorizer(2, 5, 2, terms)
    vectorizer.idf_ = idf
    transform = TfidfTransform(vectorizer)
    unseen = [*load("demo").test.texts[:100], *ODD_TEXTS, "qqqq zzzz"] * 30
    assert transform._count(unseen)[2].sum() >= transform.n_features  # so the batch is counted by column
    batch = transform.rows(unseen)
    one_by_one = [transform.rows([text]) for text in unseen]
    transform._char = None  # counted through the vectorizer's analyzer instead
    indptr, columns, values = transform.rows(unseen)
    order = np.lexsort((columns, np.repeat(np.arange(len(unseen)), np.diff(indptr))))
    for got in (batch, (indptr, *[np.concatenate([r[i] for r in one_by_one]) for i in (1, 2)])):
        np.testing.assert_array_equal(got[0], indptr)
        np.testing.assert_array_equal(got[1], columns[order])
        np.testing.assert_array_equal(got[2], values[order])
    assert len(indptr) == len(unseen) + 1 and batch[2].dtype == np.float32


def test_the_word_cache_starts_again_past_its_limit():
    table = _WordTable(lambda word: [len(word)] * len(word), limit=2)
    first = table.count(["aa bbb c", "c aa"])
    assert len(table._columns) <= 2
    for _ in range(2):
        again = table.count(["aa bbb c", "c aa"])
        for a, b in zip(first, again, strict=True):
            np.testing.assert_array_equal(a, b)
    assert first[1].tolist() == [1, 2, 3, 1, 2] and first[2].tolist() == [1, 2, 3, 1, 2]


def test_what_fit_does_not_take_is_refused():
    with pytest.raises(ValueError, match="max_features"):
        fit_char_idf(["ab"], TfidfVectorizer(analyzer="char_wb", max_features=5))
    with pytest.raises(ValueError, match="min_df=3"):
        fit_char_idf(["abc", "xyz", "qqq"], char_vectorizer(2, 3, 3))
    with pytest.raises(ValueError, match="no word"):
        fit_char_idf(["", "  "], char_vectorizer(2, 3, 1))
    with pytest.raises(ValueError, match="max_df corresponds to < documents than min_df"):
        fit_char_idf(["abc", "abd", "abe"], char_vectorizer(2, 3, 2, max_df=0.5))
