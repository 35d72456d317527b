"""benchmarks.bench_ranker's goals, checked against hand-made medians."""

from benchmarks import bench_ranker


def test_the_prediction_goals_against_hand_made_medians():
    goals = bench_ranker.ranking_goals(dense_ms=0.25, fused_ms=0.80, dense_tps=24_000.0, fused_tps=4_900.0)
    assert goals == [("one text fused ≤ 1.5 ms", "0.80 ms", True), ("the stage adds ≤ 0.5 ms", "+0.55 ms", False),
                     ("fused batches ≥ 5,000 texts/s", "4,900", False),
                     ("dense batches ≥ 20,000 texts/s", "24,000", True)]
