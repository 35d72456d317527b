import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from benchmarks import bench_dexa

from xdex.data import Catalogue, Dataset, Split

NO_VALIDATION = ("data.validation_size=0", "encoder.dim=8")


@pytest.fixture(scope="module")
def bench():
    return bench_dexa


@pytest.fixture(scope="module")
def dataset():
    """16 labels; labels 0, 1, 2 have 3, 4 and 5 training points, every other label 1; a label with n points is on
    documents 0 .. n-1, so documents 0-4 are labelled and 5-12 are not."""
    points = [3, 4, 5] + [1] * 13
    rows = [(i, label) for label, n in enumerate(points) for i in range(n)]
    r, c = np.array(rows).T
    y = sp.csr_matrix((np.ones(len(r), np.float32), (r, c)), shape=(13, 16))
    train = Split([f"d{i}" for i in range(13)], [f"text {i}" for i in range(13)], y)
    return Dataset("toy", train, Catalogue([f"l{j}" for j in range(16)], [f"label {j}" for j in range(16)]))


def test_aux_setting_without_head_labels(bench, dataset):
    # L = 16, r = 4: K = 16 / 4 = 4 vectors of d = 8 floats -> 4 * 8 * 4 = 128 bytes
    setting = bench.aux_setting(dataset, bench.dexa_config(4, 0, NO_VALIDATION))
    assert setting == {"ratio": 4.0, "hlp": 0, "budget": 4, "head": 0, "clusters": 4, "a_bytes": 128}


def test_aux_setting_with_head_labels(bench, dataset):
    # r = 2: K = 8; h = 3: labels 0, 1, 2 are head labels; K' = 3 + 2^floor(log2(8 - 3)) = 3 + 4 = 7
    setting = bench.aux_setting(dataset, bench.dexa_config(2, 3, NO_VALIDATION))
    assert (setting["budget"], setting["head"], setting["clusters"]) == (8, 3, 7)
    assert setting["a_bytes"] == 7 * 8 * 4
    # h = 5: only label 2 -> K' = 1 + 2^floor(log2 7) = 5
    assert bench.aux_setting(dataset, bench.dexa_config(2, 5, NO_VALIDATION))["clusters"] == 5


def test_aux_setting_with_too_many_head_labels(bench, dataset):
    # r = 8: K = 2 clusters, 3 head labels leave none for the others
    setting = bench.aux_setting(dataset, bench.dexa_config(8, 3, NO_VALIDATION))
    assert (setting["budget"], setting["head"], setting["clusters"], setting["a_bytes"]) == (2, 3, 0, 0)


def test_sweep_runs_ngame_then_each_setting(bench, dataset, monkeypatch):
    calls = []

    def fake_run(path, method, overrides):
        calls.append((method, overrides))
        return [{"dataset": path.name, "method": method, "metrics": metrics(10.0), "train_s": 1.0, "peak_mb": 1.0}]

    monkeypatch.setattr(bench, "run_method", fake_run)
    runs = bench.sweep(Path("toy"), dataset, [4.0, 8.0], [0, 2])
    # the recipe holds out one of the 5 labelled documents: labels 0, 1, 2 keep >= 2 training points, the others
    # <= 1, so h = 2 gives 3 head labels; they fit in K = 4 (r = 4) but not in K = 2 (r = 8)
    assert calls == [("ngame", []), ("dexa", ["aux.labels_per_cluster=4", "aux.head_threshold=0"]),
                     ("dexa", ["aux.labels_per_cluster=4", "aux.head_threshold=2"]),
                     ("dexa", ["aux.labels_per_cluster=8", "aux.head_threshold=0"])]
    assert [(r["recipe"], r.get("ratio"), r.get("hlp")) for r in runs] == [
        ("ngame", None, None), ("dexa", 4.0, 0), ("dexa", 4.0, 2), ("dexa", 8.0, 0), ("dexa", 8.0, 2)]
    assert runs[2]["head"] == 3 and runs[2]["clusters"] == 3 + 1  # 3 + 2^floor(log2(4 - 3))
    assert "head labels leave none of the K=2 clusters" in bench.error(runs[-1])


def metrics(p1: float) -> dict:
    return {"P@1": p1, "P@5": p1 / 2, "PSP@1": p1 + 1, "PSP@5": p1 + 2}


def dexa_run(ratio: float, hlp: int, clusters: int, de: float, fused: float, head: int = 0) -> dict:
    common = {"dataset": "toy", "train_s": 12.4, "peak_mb": 700.0}
    return {"dataset": "toy", "recipe": "dexa", "ratio": ratio, "hlp": hlp, "budget": clusters, "head": head,
            "clusters": clusters, "a_bytes": clusters * 256 * 4,
            "records": [common | {"method": "dexa [fused]", "metrics": metrics(40.0)},  # the ranking stage: left out
                        common | {"method": "dexa-dense", "metrics": metrics(fused)},
                        common | {"method": "dexa-de", "metrics": metrics(de)},
                        common | {"method": "dexa-clf", "metrics": metrics(1.0)}]}


@pytest.fixture
def runs():
    common = {"dataset": "toy", "train_s": 7.0, "peak_mb": 600.0}
    ngame = {"dataset": "toy", "recipe": "ngame", "records": [
        common | {"method": "ngame [fused]", "metrics": metrics(40.0)},
        common | {"method": "ngame-dense", "metrics": metrics(21.0)},
        common | {"method": "ngame-de", "metrics": metrics(20.0)}]}
    failed = {"dataset": "toy", "recipe": "dexa", "ratio": 64.0, "hlp": 50, "budget": 128, "head": 130,
              "clusters": 0, "a_bytes": 0,
              "records": [{"dataset": "toy", "method": "dexa", "error": "130 head labels leave none"}]}
    # NGAME last in the list: the table still puts it first
    return [dexa_run(16, 0, 512, de=22.0, fused=24.0),
            dexa_run(2, 50, 4151, de=23.5, fused=23.0, head=55), failed, ngame]


def test_table_rows(bench, runs):
    lines = bench.table(runs)
    assert lines[0].startswith("| recipe | r | K | HLP | A MB | P@1 I |")
    assert len(lines) == 2 + 4 and all(line.count("|") == lines[0].count("|") for line in lines)
    assert lines[2] == ("| ngame | — | 0 | — | — | 20.00 | 10.00 | 21.00 | 22.00 | 21.00 | 10.50 | 22.00 | 23.00 "
                        "| 7 | 600 |")
    # 512 * 256 * 4 bytes = 0.52 MB
    assert lines[3] == ("| dexa | 16 | 512 | off | 0.52 | 22.00 | 11.00 | 23.00 | 24.00 | 24.00 | 12.00 | 25.00 "
                        "| 26.00 | 12 | 700 |")
    assert lines[4].startswith("| dexa | 2 | 4151 | 50 (55 head) | 4.25 | 23.50 |")
    assert lines[5].startswith("| dexa | 64 | 128 | 50 (130 head) | 0.00 | failed (130 head labels leave none) |")


def test_verdict_picks_the_best_run_of_each_search(bench, runs):
    text = bench.verdict(runs)
    assert "Module I alone: NGAME 20.00 P@1, DEXA at its best (K=4151, HLP 50) 23.50, +3.50" in text
    assert "fused with Module II: NGAME 21.00 P@1, DEXA at its best (K=512, HLP off) 24.00, +3.00" in text


def test_verdict_without_ngame(bench, runs):
    assert bench.verdict(runs[:3]).startswith("No comparison")


def costs(small_bytes: int, large_bytes: int) -> list[dict]:
    common = {"module1_s": 10.0, "predict_s": 1.5, "n_texts": 3000}
    return [{"recipe": "ngame", "clusters": 0, "a_bytes": 0, "model_bytes": 1000} | common,
            {"recipe": "dexa", "clusters": 128, "a_bytes": 131_072, "model_bytes": small_bytes} | common,
            {"recipe": "dexa", "clusters": 4096, "a_bytes": 4_194_304, "model_bytes": large_bytes} | common]


def test_overhead_verdict(bench):
    # A grows by 4,194,304 - 131,072 = 4,063,232 bytes; 3 bytes more is no A
    same = bench.overhead_verdict(costs(30_000_000, 30_000_003))
    assert "A grows by 4,063,232 bytes and the model directory by +3 bytes" in same
    assert "does not depend on K and the model holds no A" in same
    assert "grows with K" in bench.overhead_verdict(costs(30_000_000, 34_063_232))
    assert bench.overhead_verdict(costs(1, 1)[:2]) == "One K only: no size comparison."


def test_overhead_table(bench):
    lines = bench.overhead_table(costs(30_000_000, 30_000_003))
    assert lines[4] == "| dexa | 4096 | 4,194,304 | 10.0 | 30,000,003 | 1.50 |"


def test_report_sections(bench, runs):
    text = bench.report("python -m benchmarks.bench_dexa", runs, costs(5, 5), "toy", (1.0, 2.0))
    assert text.startswith(bench.SECTION + "\n\n`python -m benchmarks.bench_dexa`\n")
    assert "### toy\n" in text and "### Overheads (toy)\n" in text
    assert "3,000 test texts" in text and text.endswith("\n")
    assert "\n## " not in text[1:]  # one section: publish replaces it whole


def test_dir_bytes_and_module_one_seconds(bench, tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    (tmp_path / "encoder").mkdir()
    (tmp_path / "encoder" / "model.bin").write_bytes(b"x" * 5)
    (tmp_path / "ranker").mkdir()
    (tmp_path / "ranker" / "fusion.json").write_bytes(b"x" * 7)  # the ranking stage's: not counted
    log = tmp_path / bench.TRAINING / "metrics.jsonl"
    log.parent.mkdir()
    log.write_text(json.dumps({"epoch": 1, "seconds": 1.25}) + "\n" + json.dumps({"epoch": 2, "seconds": 2.5}) + "\n")
    assert bench.dir_bytes(tmp_path) == 10 + 5  # the network's files: the training log apart too
    assert bench.module_one_seconds(tmp_path) == pytest.approx(3.75)
    with pytest.raises(FileNotFoundError, match="no training log"):
        bench.module_one_seconds(tmp_path / bench.TRAINING)


def test_overheads_trains_ngame_and_both_extremes(bench):
    """A real (tiny) run: 60 training documents, 32 labels; r = 16 gives K = 2, r = 4 K = 8, r = 2 K = 16."""
    def split(n: int, seed: int) -> Split:
        y = sp.random(n, 32, density=0.08, random_state=seed, format="csr")
        y = y + sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) % 32)), shape=(n, 32))
        y.data[:] = 1
        texts = [" ".join(f"word{j}" for j in y[i].indices) for i in range(n)]
        return Split([f"{seed}-{i}" for i in range(n)], texts, y)

    labels = Catalogue([f"l{j}" for j in range(32)], [f"word{j} title" for j in range(32)])
    rows = bench.overheads(Dataset("toy", split(60, 1), labels, test=split(20, 2)), [16.0, 4.0, 2.0])
    assert [(r["recipe"], r["clusters"], r["a_bytes"]) for r in rows] == [
        ("ngame", 0, 0), ("dexa", 2, 2 * 256 * 4), ("dexa", 16, 16 * 256 * 4)]
    assert all(r["module1_s"] > 0 and r["predict_s"] > 0 and r["n_texts"] == 20 for r in rows)
    # the model directory does not hold A: 14 more vectors of 1,024 bytes would add 14,336 bytes
    assert abs(rows[2]["model_bytes"] - rows[1]["model_bytes"]) < 14 * 1024
    assert rows[1]["model_bytes"] > rows[0]["model_bytes"]  # DEXA's classifiers W, L x d, on top of NGAME's model
