"""Property: every writer's output reads back as the same dataset."""

from __future__ import annotations

import pytest
from data_strategies import assert_same_dataset, datasets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xdex.data import load, save, validate

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """One folder for all examples of a test: each example overwrites the previous one's files."""
    return tmp_path_factory.mktemp("roundtrip")


@SETTINGS
@given(dataset=datasets(), compress=st.booleans())
def test_jsonl_round_trip(folder, dataset, compress):
    save(dataset, folder, "jsonl", overwrite=True, compress=compress)
    assert validate(folder) == []
    assert_same_dataset(dataset, load(folder))


@SETTINGS
@given(dataset=datasets(values=True))
def test_xc_raw_round_trip_keeps_relevances(folder, dataset):
    save(dataset, folder / "raw", "xc-raw", overwrite=True)
    assert validate(folder / "raw") == []
    assert_same_dataset(dataset, load(folder / "raw"))


@SETTINGS
@given(dataset=datasets())
def test_jsonl_to_xc_raw_and_back(folder, dataset):
    save(dataset, folder / "a", "jsonl", overwrite=True)
    save(load(folder / "a"), folder / "b", "xc-raw", overwrite=True)
    assert_same_dataset(dataset, load(folder / "b"))
