import pytest
import torch
from benchmarks import bench_sparse_steps as bench

from xdex.encoders.bag import BagOfEmbeddings
from xdex.train.sparse_adam import RowSparseAdam

SMALL = ["encoder.dim=16", "encoder.vocab_size=400", "heads.dim=8", "sampling.batch_size=16"]


@pytest.fixture(scope="module")
def record():
    return bench.measure(documents=200, rounds=2, steps=2, warmup=1, epoch=True, overrides=SMALL, threads=1)


def test_each_computation_is_timed_in_parts(record):
    assert set(record["times"]) == set(bench.MODES)
    for parts in record["times"].values():
        assert set(parts) == set(bench.PARTS)
        assert all(len(times) == 2 * 2 for times in parts.values())
        for i, step in enumerate(parts["step"]):
            assert 0 < parts["forward"][i] < step and 0 < parts["optimiser"][i] < step
            assert parts["rest"][i] == pytest.approx(step - parts["forward"][i] - parts["optimiser"][i])
    assert max(record["pool_sizes"]) > 16  # hard negatives joined the pools
    assert set(record["epoch_s"]) == {"before", "now"} and record["epoch_steps"] == 200 // 16 + (200 % 16 > 0)
    text = bench.report("python -m benchmarks.bench_sparse_steps", record, 1)
    assert all(f"| {mode} |" in text for mode in bench.MODES) and "An epoch of" in text


def test_modes_switch_the_bag_and_the_sparse_optimiser():
    setup = bench.Setup(60, SMALL)
    kinds = {}
    for mode in bench.MODES:
        with setup.mode(mode):
            kinds[mode] = (BagOfEmbeddings._distinct_bag is bench.per_occurrence_bag, BagOfEmbeddings.joint_pass,
                           type(setup.trainer.optimizers[-1]))
        assert BagOfEmbeddings._distinct_bag is not bench.per_occurrence_bag and BagOfEmbeddings.joint_pass  # restored
    assert kinds == {"before": (True, False, torch.optim.SparseAdam),
                     "distinct": (False, False, torch.optim.SparseAdam),
                     "now": (False, True, RowSparseAdam)}
