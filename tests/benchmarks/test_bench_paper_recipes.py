import json

import pytest
from benchmarks import bench_paper_recipes as bench

from xdex.train.run_folder import TRAINING
from xdex.train.trainer import METRICS_LOG


@pytest.mark.parametrize("recipe", bench.RECIPES)
def test_every_paper_recipe_resolves_with_the_encoder_folder_and_overrides(recipe, tmp_path):
    config = bench.recipe_config(recipe, str(tmp_path), ["trainer.epochs=3"])
    assert config.method == recipe.removesuffix("-paper")
    assert config.encoder["type"] == "transformer" and config.encoder["model_dir"] == str(tmp_path)
    assert config.trainer.epochs == 3


def test_an_unknown_recipe_is_refused():
    with pytest.raises(ValueError, match="unknown paper recipe 'dexml'"):
        bench.recipe_file("dexml")


def test_epoch_seconds_come_from_the_metrics_log(tmp_path):
    assert bench.epoch_seconds(tmp_path) == []  # no log: no epochs
    (tmp_path / TRAINING).mkdir()
    records = [{"epoch": 1, "seconds": 1.5}, {"epoch": 2, "seconds": 0.25, "valid": {"P@1": 3.0}}]
    (tmp_path / TRAINING / METRICS_LOG).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert bench.epoch_seconds(tmp_path) == [1.5, 0.25]


def test_table_rows_for_a_recipe_a_peer_and_a_failure():
    metrics = dict.fromkeys(bench.COLUMNS, 12.345)
    recipe = {"method": "dexml-paper [fused]", "metrics": metrics, "epochs": 100, "epoch_s": 0.451, "train_s": 156.4,
              "gpu_peak_mb": 32318.8, "peak_mb": 3603.0}
    peer = {"method": "omikuji-parabel", "metrics": metrics, "train_s": 2.3, "peak_mb": 313.5}
    lines = bench.table([recipe, peer, {"method": "ngame-paper", "error": "exit code 1"}])
    assert lines[2] == "| dexml-paper [fused] | " + " | ".join(["12.35"] * 6) + " | 100 | 0.45 | 156 | 32,319 | 3,603 |"
    assert lines[3] == "| omikuji-parabel | " + " | ".join(["12.35"] * 6) + " |  |  | 2 |  | 314 |"
    assert lines[4].startswith("| ngame-paper | failed (exit code 1) |")
    assert all(line.count("|") == lines[0].count("|") for line in lines)
