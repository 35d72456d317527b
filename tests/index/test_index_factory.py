"""build_index / load_index and the checks of saved index folders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from xdex.data.errors import DataFormatError
from xdex.index import ExactIndex, HNSWIndex, build_index, load_index


def test_build_index_by_kind():
    exact = build_index("exact", 8, "cosine", chunk_items=100)
    hnsw = build_index("hnsw", 8, M=8, ef_search=32)
    assert isinstance(exact, ExactIndex) and exact.chunk_items == 100 and exact.metric == "cosine"
    assert isinstance(hnsw, HNSWIndex) and (hnsw.M, hnsw.ef_search, hnsw.metric) == (8, 32, "ip")


def test_build_index_refuses_unknown_kinds_and_settings():
    with pytest.raises(ValueError, match="unknown index kind 'faiss'; choose one of exact, hnsw"):
        build_index("faiss", 8)
    with pytest.raises(ValueError, match="hnsw index has no setting 'efSearch'"):
        build_index("hnsw", 8, efSearch=10)


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_load_index_dispatches_on_the_saved_kind(tmp_path, kind):
    index = build_index(kind, 3)
    index.add(np.eye(3, dtype=np.float32) * [1, 2, 3])
    index.save(tmp_path / kind)
    loaded = load_index(tmp_path / kind)
    assert type(loaded) is type(index) and len(loaded) == 3
    scores, ids = loaded.search(np.ones((1, 3), dtype=np.float32), 3)
    np.testing.assert_array_equal(ids, [[2, 1, 0]])
    np.testing.assert_allclose(scores, [[3, 2, 1]], atol=1e-6)


def test_metadata_problems_name_index_json(tmp_path):
    index = build_index("exact", 2)
    index.save(tmp_path / "idx")
    meta_path = tmp_path / "idx" / "index.json"
    meta = json.loads(meta_path.read_text())

    meta_path.write_text("{not json")
    with pytest.raises(DataFormatError, match=r"index\.json: not valid JSON"):
        load_index(tmp_path / "idx")
    meta_path.write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(DataFormatError, match=r"index\.json: format version 99 is not supported"):
        load_index(tmp_path / "idx")
    meta_path.write_text(json.dumps({**meta, "kind": "annoy"}))
    with pytest.raises(DataFormatError, match=r"index\.json: unknown index kind 'annoy'"):
        load_index(tmp_path / "idx")
    meta_path.write_text(json.dumps({**meta, "metric": "l2"}))
    with pytest.raises(DataFormatError, match=r"index\.json: invalid settings .*unknown metric 'l2'"):
        load_index(tmp_path / "idx")
    meta_path.write_text(json.dumps({**meta, "count": 5}))
    with pytest.raises(DataFormatError, match=r"vectors\.npy: holds float32 \(0, 2\), expected float32 \(5, 2\)"):
        load_index(tmp_path / "idx")
