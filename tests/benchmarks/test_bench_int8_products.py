import numpy as np
import pytest
from benchmarks import bench_int8_products as bench


def test_every_cell_is_timed_each_way_checked_and_printed(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "items.npy", rng.standard_normal((600, 16)).astype(np.float32))
    np.save(tmp_path / "texts.npy", rng.standard_normal((40, 16)).astype(np.float32))
    assert bench.main(["--vectors", str(tmp_path / "items.npy"), "--query-vectors", str(tmp_path / "texts.npy"),
                       "--items", "300", "600", "--queries", "5", "40", "--k", "3", "400", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(bench.SECTION)
    rows = [line for line in out.splitlines() if line.startswith(("| 300 |", "| 600 |"))]
    assert [row.split("|")[1:4] for row in rows] == [  # k = 400 only where there are that many vectors
        [" 300 ", " 5 ", " 3 "], [" 300 ", " 40 ", " 3 "], [" 600 ", " 5 ", " 3 "], [" 600 ", " 5 ", " 400 "],
        [" 600 ", " 40 ", " 3 "], [" 600 ", " 40 ", " 400 "]]
    assert all(len(row.split("|")) == 11 and row.rstrip().endswith("| not int8 |") for row in rows)


def test_fewer_query_vectors_than_asked_are_refused(tmp_path, capsys):
    np.save(tmp_path / "texts.npy", np.zeros((10, 4), np.float32))
    with pytest.raises(SystemExit) as refused:
        bench.main(["--query-vectors", str(tmp_path / "texts.npy"), "--queries", "20", "--items", "50"])
    assert refused.value.code == 2
    assert "holds 10 vectors, fewer than --queries asks" in capsys.readouterr().err
