import argparse

from benchmarks import bench_train_scale as bench

SMALL = ["encoder.dim=16", "encoder.vocab_size=400", "heads.dim=8", "sampling.batch_size=32", "trainer.epochs=4",
         "data.validation_size=40"]


def test_a_small_run_records_its_epochs_refreshes_and_searches():
    record = bench.run_one({"kind": "auto", "documents": 300, "method": "unidec", "overrides": SMALL})
    assert len(record["epoch_s"]) == 4 and all(s > 0 for s in record["epoch_s"])
    assert record["refresh_epochs"] == [2]  # the recipe's first refresh, then one every 4 epochs
    assert record["searches"] == ["exact"]  # auto mines 260 texts against 300 labels exactly
    assert record["total_s"] > sum(record["epoch_s"]) and record["peak_mb"] > 0
    args = argparse.Namespace(method="unidec", set=SMALL, documents=300)
    text = bench.section(args, {"auto": record}, ["--documents", "300"])
    assert text.startswith(bench.TITLE) and "| auto | exact |" in text and "memorisation_task(n=300)" in text
    assert f"Goals: auto mining, at most 600 s from the texts to the model: met ({record['total_s']:,.0f} s)." in text
