"""Validation documents are held out as the test split is built: where the label set is drawn from the training
documents, a validation document keeps the labels the fitted documents have."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xdex.methods.run import held_out_as_test


def matrix(rows: list[list[int]], n_labels: int) -> sp.csr_matrix:
    dense = np.zeros((len(rows), n_labels), np.float32)
    for i, labels in enumerate(rows):
        dense[i, labels] = 1
    return sp.csr_matrix(dense)


def test_labels_only_validation_documents_have_are_dropped_with_documents_left_empty():
    y = matrix([[0, 1], [1], [2], [0, 3], [3], [0, 2]], 4)  # every label has a training document
    train_rows, valid_rows = np.array([0, 1, 4]), np.array([2, 3, 5])  # label 2: validation documents only
    rows, labels = held_out_as_test(y, train_rows, valid_rows)
    assert rows.tolist() == [3, 5]  # document 2 had label 2 alone
    assert labels.toarray().tolist() == [[1, 0, 0, 1], [1, 0, 0, 0]]


def test_with_labels_that_no_training_document_has_the_validation_labels_are_kept():
    y = matrix([[0], [1], [1]], 3)  # label 2 has no document: a zero-shot label set
    rows, labels = held_out_as_test(y, np.array([0]), np.array([1, 2]))
    assert rows.tolist() == [1, 2]
    assert labels.toarray().tolist() == [[0, 1, 0], [0, 1, 0]]


def test_where_most_validation_labels_are_never_shared_they_are_kept():
    y = matrix([[0], [1], [2], [3], [0]], 4)  # labels 1-3 have one document each: a memorisation task
    rows, labels = held_out_as_test(y, np.array([0, 4]), np.array([1, 2, 3]))
    assert rows.tolist() == [1, 2, 3]
    assert labels.toarray().tolist() == [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]

