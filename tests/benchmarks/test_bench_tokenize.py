from benchmarks import bench_tokenize as bench

from xdex.data import Dataset, Split, save
from xdex.data.synthetic import memorisation_task


def test_both_ways_are_timed_on_short_and_long_texts_and_reported(tmp_path):
    toy = memorisation_task(n=40, length=4, vocab_size=30, seed=0)
    long = [" ".join([text] * 30) for text in toy.test.texts]  # long enough to be cut
    test = Split(toy.test.ids, toy.test.texts[:20] + long[20:], toy.test.labels)
    save(Dataset("toy", toy.train, toy.labels, test), tmp_path / "toy")
    rows = bench.measure("toy", tmp_path, [1, 5], runs=3, vocab=100)
    assert [row["texts"] for row in rows] == [1, 5]
    assert all(row["ascii"] == 1.0 and row["whole_us"] > 0 and row["ours_us"] > 0 for row in rows)
    section = bench.report(rows, ["--datasets", "toy"], [0.5, 0.7])
    table = [line for line in section.splitlines() if line.startswith("| toy |")]
    assert len(table) == 2 and section.startswith(bench.SECTION)
