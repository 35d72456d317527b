import math

import numpy as np
import pytest
import torch
from benchmarks import bench_unidec_step

SMALL = ["sampling.batch_size=32", "sampling.beta=2", "sampling.hard_negatives=3", "encoder.vocab_size=2000"]


@pytest.fixture(scope="module")
def bench():
    return bench_unidec_step


@pytest.fixture(scope="module")
def record(bench):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # steps this small run fastest on one thread, and a busy machine slows many
    try:
        return bench.measure(n_labels=2000, n_queries=200, steps=4, warmup=1, overrides=SMALL, seed=0)
    finally:
        torch.set_num_threads(threads)


def test_measurement_is_sane(bench, record):
    assert len(record["step_ms"]) == len(record["pool_sizes"]) == len(record["positives_in_pool"]) == 4
    assert all(0 < t < 60_000 for t in record["step_ms"])
    assert record["setup_s"] > 0 and record["refresh_s"] > 0 and record["peak_mb"] > 0
    assert record["pool_bound"] == 32 * (2 + 3)  # B·(β + η)
    pools = np.array(record["pool_sizes"])
    assert (pools <= 160).all()
    assert (pools > 32 * 2).any()  # more than the sampled positives could fill: the hard negatives are in
    # every query has a positive and β = 2 of them are sampled into the pool; no query has more than 5
    assert all(1.0 <= p <= 5.0 for p in record["positives_in_pool"])
    s = bench.summary(record)
    assert s["max_pool"] == pools.max() and s["avg_pool"] == pytest.approx(pools.mean())
    assert s["step_ms_median"] == pytest.approx(np.median(record["step_ms"]))


def test_texts_have_the_asked_number_of_words(bench):
    rng = np.random.default_rng(0)
    words = bench.random_words(50, rng)
    texts = bench.random_texts(words, 7, 3, rng)
    vocabulary = {bytes(w).decode() for w in words}
    assert len(texts) == 7
    for text in texts:
        tokens = text.split(" ")
        assert len(tokens) == 3 and set(tokens) <= vocabulary and all(len(t) == 6 for t in tokens)


def test_label_draws_follow_the_log_uniform_law(bench):
    draws = bench.log_uniform_labels(200_000, 3, np.random.default_rng(3))
    # P(l) = log((l + 2)/(l + 1)) / log(L + 1) with L = 3: log 2 / log 4, log 1.5 / log 4, log(4/3) / log 4
    expected = [0.5, 0.2925, 0.2075]
    assert [math.log((j + 2) / (j + 1)) / math.log(4) for j in range(3)] == pytest.approx(expected, abs=1e-4)
    assert np.bincount(draws, minlength=3) / len(draws) == pytest.approx(expected, abs=0.005)
    assert (bench.log_uniform_labels(1000, 1, np.random.default_rng(4)) == 0).all()


def test_every_query_gets_one_to_five_positives(bench):
    y = bench.random_positives(5000, 100, np.random.default_rng(1))
    counts = np.diff(y.indptr)
    assert y.shape == (5000, 100) and counts.min() >= 1 and counts.max() <= 5
    assert (y.data == 1).all()  # duplicates merged into binary rows
    assert counts.max() == 5 and counts.mean() < 3.0  # draws of popular labels sometimes coincide


def test_failed_run_keeps_the_table_shape(bench, record):
    lines = bench.table([record, {"labels": 10_000, "error": "exit code 1"}])
    assert lines[2].startswith("| 2,000 | ") and lines[3].startswith("| 10,000 | failed (exit code 1)")
    assert {line.count("|") for line in lines} == {10}


def test_bad_arguments_stop_before_any_run(bench):
    with pytest.raises(SystemExit):
        bench.main(["--labels", "0"])
    with pytest.raises(SystemExit):
        bench.main(["--set", "sampling.beta=many"])
