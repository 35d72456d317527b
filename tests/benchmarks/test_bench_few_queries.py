import numpy as np
import pytest
from benchmarks import bench_few_queries as bench


@pytest.mark.parametrize("vnni", [False, True])
def test_every_cell_is_timed_every_way_and_printed(tmp_path, capsys, monkeypatch, vnni):
    monkeypatch.setattr(bench, "cpu_has_vnni", lambda: vnni)  # int8 products are timed only where they pay
    vectors = np.random.default_rng(0).standard_normal((500, 16)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", vectors)
    assert bench.main(["--vectors", str(tmp_path / "vectors.npy"), "--items", "200", "500", "--queries", "1", "3",
                       "--calls", "2", "--pause", "0"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| 1 |", "| 3 |"))]
    assert out.startswith(bench.SECTION) and "| queries | L = 200 | L = 500 |" in out
    ways = 3 if vnni else 2
    assert len(rows) == 2 and all(len(row.split("|")) == 5 and row.count(" / ") == 2 * (ways - 1) for row in rows)
    assert ("int8 codes / int8 products / float32 products" in out) == vnni


def test_fewer_vectors_than_asked_are_refused(tmp_path, capsys):
    np.save(tmp_path / "vectors.npy", np.zeros((10, 4), np.float32))
    with pytest.raises(SystemExit) as refused:
        bench.main(["--vectors", str(tmp_path / "vectors.npy"), "--items", "20"])
    assert refused.value.code == 2
    assert "holds 10 vectors, fewer than --items asks" in capsys.readouterr().err
