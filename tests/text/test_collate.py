import warnings

import numpy as np
import torch

from xdex.text import TokenizedTexts, bag_inputs, padded_inputs


def make(rows):
    return TokenizedTexts.from_arrays([np.array(r, dtype=np.int32) for r in rows])


def test_bag_inputs_are_flat_ids_and_offsets():
    ids, offsets = bag_inputs(make([[5, 6, 7], [], [8]]))
    assert ids.tolist() == [5, 6, 7, 8]
    assert offsets.tolist() == [0, 3, 3, 4]
    assert ids.dtype == offsets.dtype == torch.int64


def test_bag_inputs_of_read_only_arrays_are_copied_without_a_warning():
    """A memory-mapped token cache gives read-only int64 arrays; torch warns when it wraps one."""
    ids, offsets = np.array([5, 6, 7, 8], np.int32), np.array([0, 3, 3, 4], np.int64)
    ids.flags.writeable = offsets.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got_ids, got_offsets = bag_inputs(TokenizedTexts(ids, offsets))
    assert got_ids.tolist() == [5, 6, 7, 8] and got_offsets.tolist() == [0, 3, 3, 4]


def test_padded_to_longest_text_in_batch():
    input_ids, mask = padded_inputs(make([[5, 6, 7], [8], []]), pad_id=0)
    assert input_ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [0, 0, 0]]


def test_padding_id_and_empty_batch():
    input_ids, mask = padded_inputs(make([[1], [2, 3]]), pad_id=9)
    assert input_ids.tolist() == [[1, 9], [2, 3]]
    input_ids, mask = padded_inputs(make([[], []]), pad_id=9)
    assert input_ids.shape == (2, 1) and mask.sum() == 0
