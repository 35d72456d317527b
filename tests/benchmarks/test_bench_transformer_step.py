"""The transformer step benchmark's own parts: its texts and its report (the timed run needs the packaged model
and minutes, so it is not run here)."""

import numpy as np
from benchmarks import bench_transformer_step as bench


def test_random_texts_have_exactly_the_tokens_asked_for():
    texts = bench.random_texts(5, 8, 2_000, cls_id=101, sep_id=102, seed=0)
    assert texts.lengths.tolist() == [8] * 5
    rows = np.stack([texts.row(i) for i in range(5)])
    assert (rows[:, 0] == 101).all() and (rows[:, -1] == 102).all()
    assert rows[:, 1:-1].min() >= bench.FIRST_ID and rows[:, 1:-1].max() < 2_000


def _setting(bf16: bool, threads: int, wall: list[list[float]]) -> bench.Setting:
    setting = object.__new__(bench.Setting)  # no model: only the recorded times matter to the report
    setting.bf16, setting.threads = bf16, threads
    setting.wall, setting.cpu = wall, [[2 * t for t in r] for r in wall]
    return setting


def test_the_report_gives_each_round_and_the_speed_up_against_fp32_on_the_most_threads():
    settings = [_setting(False, 1, [[4.0, 4.0], [6.0, 6.0]]), _setting(False, 2, [[2.0, 2.0], [4.0, 4.0]]),
                _setting(True, 2, [[1.0, 1.0], [3.0, 3.0]])]
    check = {"texts": 10, "source": "random texts", "threads": 2, "cos_min": 0.99995, "cos_mean": 0.99998,
             "texts_per_s_fp32": 100.0, "texts_per_s_bf16": 200.0}
    figures = {"machine": "2 CPU cores", "bf16_cpu": "AVX-512 BF16 yes, AMX no", "pairs": 64, "tokens": 32,
               "rounds": 2, "steps": 2, "peak_mb": 100.0, "round_loads": [1.0, 5.0]}
    text = bench.report("python -m benchmarks.bench_transformer_step", settings, check, figures)
    assert text.startswith(bench.SECTION + "\n")
    assert "| round 1 (load 1.0) | round 2 (load 5.0) | all rounds | speed-up vs fp32, 2 threads (wall) |" in text
    assert "| fp32, 1 thread | 4.00 (8.00) | 6.00 (12.00) | 5.00 (10.00) | 0.60x |" in text
    assert "| bf16, 2 threads | 1.00 (2.00) | 3.00 (6.00) | 2.00 (4.00) | 1.50x |" in text
    assert "cosine min 0.999950" in text
