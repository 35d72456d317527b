import numpy as np
import pytest
from benchmarks import bench_metrics
from benchmarks.harness import update_section


@pytest.fixture(scope="module")
def bench():
    return bench_metrics


def test_small_run_and_docs_update(bench, tmp_path, capsys):
    timings, metrics = bench.run(n_docs=300, n_labels=50, k=12, seed=1)
    assert "total evaluation" in timings and "P@10" in metrics and "P@100" not in metrics
    assert 0.0 < metrics["R@10"] <= 100.0  # half of the true labels are among the predictions
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Metrics speed\n\nold\n\n## Index speed\n\nkept\n")
    update_section(bench.SECTION, "## Metrics speed\n\nnew\n", docs)
    assert docs.read_text() == "# Benchmarks\n\n## Metrics speed\n\nnew\n\n## Index speed\n\nkept\n"
    update_section(bench.SECTION, "## Metrics speed\n\nnewer\n", docs)
    assert docs.read_text().count("## Metrics speed") == 1


def test_random_rankings_have_distinct_labels(bench):
    ranking = bench.random_ranking(np.random.default_rng(0), 100, 12, 12)  # every label in every row
    assert (np.sort(ranking.indices, axis=1) == np.arange(12)).all()
