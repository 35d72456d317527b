import pytest
from benchmarks import bench_mining

from xdex.index.hnsw import HNSWIndex
from xdex.sampling.negatives import HardNegatives


def test_measure_refresh_times_both_kinds_and_leaves_the_classes_as_they_were():
    mine, add = HardNegatives.__dict__["mine"], HNSWIndex.add
    record = bench_mining.measure_refresh(300, 200, ["sampling.batch_size=64"], repeats=1)
    assert HardNegatives.__dict__["mine"] is mine and HNSWIndex.add is add  # un-patched afterwards
    assert (record["labels"], record["queries"], record["repeats"]) == (300, 200, 1)
    for kind in bench_mining.KINDS:
        assert record[f"{kind}_refresh_s"] >= record[f"{kind}_search_s"] > 0
    assert 0 < record["hnsw_build_s"] <= record["hnsw_search_s"]
    # 300 labels and a search list of 128: the graph finds nearly every exact neighbour
    assert record["shortlist"] > 0 and record["recall"] == pytest.approx(1.0, abs=0.1)
