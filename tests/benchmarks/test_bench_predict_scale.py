import pytest
from benchmarks import bench_predict_scale

SMALL = ["--queries", "200", "--texts", "40", "--calls", "5", "--runs", "2", "--batch", "30", "--k", "5"]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """One end-to-end run of the script (each label count in its own process): the section it published."""
    models = tmp_path_factory.mktemp("models")
    sections = []
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(bench_predict_scale, "publish", lambda section, write: sections.append((section, write)))
    try:
        code = bench_predict_scale.main(["--exact", "300", "--hnsw", "400", "--ef-search", "8", "400",
                                         "--models", str(models), *SMALL, "--update-docs"])
    finally:
        monkeypatch.undo()
    assert code == 0 and len(sections) == 1
    return sections[0], models


def rows_of(section: str) -> list[list[str]]:
    lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| labels")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


@pytest.mark.slow  # two model directories trained, each in a process of its own: 15-60 s with the machine's load
def test_the_section_has_a_row_per_index_setting(published):
    (section, write), _ = published
    assert write and section.startswith(bench_predict_scale.SECTION + "\n")
    assert "`python -m benchmarks.bench_predict_scale --exact 300 --hnsw 400" in section
    rows = rows_of(section)
    assert [row[:2] for row in rows] == [["300", "exact"], ["400", "hnsw ef_search=8"], ["400", "hnsw ef_search=400"]]
    assert {len(row) for row in rows} == {10}
    for row in rows:
        build, p50, p95, encoder, search, batch, recall, copy = row[2:]
        assert float(build) > 0  # built in this run
        assert 0 < float(p50) <= float(p95) and float(encoder) > 0 and float(search) > 0
        assert float(batch.replace(",", "")) > 0 and float(copy) > 0
        assert 0 < float(recall) <= 1
    # exact search is its own truth; a candidate list as long as the catalogue makes HNSW search every label
    assert rows[0][8] == "1.000" and rows[2][8] == "1.000"
    assert "M = 16, ef_construction = 32" in section and "Goals: one text p50 ≤ 1 ms" in section


@pytest.mark.slow  # the same run
def test_kept_model_directories_are_reused(published):
    (section, _), models = published
    names = sorted(path.name for path in models.iterdir() if path.is_dir())
    assert [name.split("-")[:2] for name in names] == [["exact", "300"], ["hnsw", "400"]]
    job = {"labels": 300, "kind": "exact", "queries": 200, "seed": 0,
           "overrides": bench_predict_scale.recipe_overrides("exact", 16, 32, 8, 2)}
    assert bench_predict_scale.model_name(job) == names[0]
    seconds, reused = bench_predict_scale.build_model(job, models / names[0])  # nothing trained again
    assert reused and f"| 300 | exact | {seconds:.0f} |" in section  # the seconds of the run that built it
    record = {"build_s": seconds, "reused": True}
    assert bench_predict_scale.build_cell(record) == f"{seconds:.0f} (earlier run)"
    assert bench_predict_scale.build_cell(record | {"build_s": 0.0}) == "earlier run"  # no record of its build


def test_query_texts_are_new_texts_of_the_training_words():
    texts = bench_predict_scale.query_texts(50, seed=0)
    assert texts == bench_predict_scale.query_texts(50, seed=0)
    dataset = bench_predict_scale.synthetic_dataset(n_labels=30, n_queries=50, seed=0)
    assert len(dataset.labels) == 30 and len(dataset.train.texts) == 50
    training_words = {word for text in dataset.train.texts + dataset.labels.texts for word in text.split()}
    assert not set(texts) & set(dataset.train.texts)
    assert all(len(text.split()) == bench_predict_scale.QUERY_WORDS for text in texts)
    # the same vocabulary: with 50 x 8 + 30 x 4 draws from 20,000 words, shared words come from it alone
    assert {word for text in texts for word in text.split()} & training_words


def test_hnsw_overrides_set_the_index():
    from xdex.methods.recipe import load_recipe

    config = load_recipe("dexml", overrides=bench_predict_scale.recipe_overrides("hnsw", 12, 40, 64, 2))
    assert config.index == {"kind": "hnsw", "M": 12, "ef_construction": 40, "ef_search": 64, "num_threads": 2}
    assert config.trainer.epochs == 1 and config.data.validation_size == 0 and "ranker" not in config.sections


def test_a_failed_run_keeps_the_table_shape():
    lines = bench_predict_scale.table([{"labels": 1_000_000, "kind": "hnsw", "error": "exit code 1"}], k=10)
    assert lines[2].startswith("| 1,000,000 | hnsw | failed (exit code 1) |")
    assert {line.count("|") for line in lines} == {11}


@pytest.mark.parametrize("argv", [["--exact", "0"], ["--exact", "5", "--hnsw"], ["--exact", "--hnsw"],
                                  ["--set", "index.M=many"], ["--set", "trainer.epochs=many"],
                                  ["--set", "nosuch.key=1"], ["--M", "1"]])
def test_bad_arguments_stop_before_any_run(argv):
    with pytest.raises(SystemExit):
        bench_predict_scale.main(argv)
