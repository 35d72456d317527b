"""Thread counts chosen per kind of work: a bag encoder's training steps on the CPU on one thread or on every core,
whichever their timing shows faster, torch's own setting elsewhere (a transformer's steps included) and whenever
the user set OMP_NUM_THREADS; and the steps' floating-point mode (subnormals flushed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from test_hardware import needs_flush
from test_trainer import ToyObjective, _cfg

from xdex.encoders import Transformer
from xdex.encoders.factory import build_encoder
from xdex.hardware import denormals_are_flushed
from xdex.methods.pipeline import build_objective
from xdex.methods.recipe import load_recipe
from xdex.text import Tokenizer
from xdex.train import Trainer, threads
from xdex.train.threads import StepThreads, intra_op_threads, step_threads, training_step_threads

CPU = torch.device("cpu")


def test_a_bag_encoder_steps_with_one_thread_unless_the_user_chose(monkeypatch):
    bag = build_encoder({"type": "bag", "dim": 4, "vocab_size": 50}, ["alpha beta", "gamma delta"])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert step_threads(bag, CPU) == 1
    assert step_threads(bag, torch.device("cuda")) is None  # a GPU step: the CPU threads do not matter
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert step_threads(bag, CPU) is None


def test_a_transformer_steps_with_torchs_threads(tmp_path, monkeypatch):
    """Its large matrix products gain from every free core (docs/benchmarks.md, transformer training step)."""
    transformers = pytest.importorskip("transformers")
    tokenizer = Tokenizer.train_wordpiece(["alpha beta", "gamma delta"], 40)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=8, num_hidden_layers=1,
                                     num_attention_heads=1, intermediate_size=16, max_position_embeddings=16)
    transformers.BertModel(config).save_pretrained(str(tmp_path))
    tokenizer.save(tmp_path)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert step_threads(Transformer(tmp_path, max_length=8), CPU) is None


def test_intra_op_threads_are_restored_after_the_block():
    before = torch.get_num_threads()
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with intra_op_threads(None):
        assert torch.get_num_threads() == before


def test_the_trainer_runs_its_steps_with_the_chosen_threads(tmp_path):
    seen: list[int] = []

    class Counting(ToyObjective):
        def loss(self, batch):
            seen.append(torch.get_num_threads())
            return super().loss(batch)

    before = torch.get_num_threads()
    Trainer(Counting(), _cfg(2), tmp_path, step_threads=1).fit()
    assert set(seen) == {1} and torch.get_num_threads() == before


@needs_flush
def test_the_trainer_steps_with_subnormals_flushed_and_restores_the_mode(tmp_path):
    """A confident model's softmax gives subnormal probabilities, slow on x86 (xdex.hardware.denormals_flushed)."""
    seen: list[bool] = []

    class Watching(ToyObjective):
        def loss(self, batch):
            seen.append(denormals_are_flushed())
            return super().loss(batch)

    Trainer(Watching(), _cfg(2), tmp_path).fit()
    assert seen and all(seen) and not denormals_are_flushed()


def test_a_bag_encoder_trained_by_one_process_on_several_cores_has_its_threads_chosen_by_timing(monkeypatch):
    bag = build_encoder({"type": "bag", "dim": 4, "vocab_size": 50}, ["alpha beta", "gamma delta"])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    chooser = training_step_threads(bag, CPU, distributed=False)
    assert isinstance(chooser, StepThreads) and chooser.most == 2 and chooser.chosen == 1
    assert training_step_threads(bag, CPU, distributed=True) == 1  # torchrun's processes share the cores
    assert training_step_threads(bag, torch.device("cuda"), distributed=False) is None
    monkeypatch.setattr(threads, "cores", lambda: 1)
    assert training_step_threads(bag, CPU, distributed=False) == 1
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert training_step_threads(bag, CPU, distributed=False) is None


def _look(chooser: StepThreads, epoch: int, step_ms: dict[int, float], steps: int = 100) -> list[int]:
    """Run an epoch of ``steps`` steps through ``chooser``, each taking ``step_ms[threads]``: the counts used."""
    chooser.start_epoch(epoch, steps)
    used = []
    for i in range(steps):
        n = chooser.threads(i)
        used.append(n)
        chooser.record(i, n, step_ms[n] / 1e3)
    return used


def test_step_threads_look_then_run_the_epoch_on_the_faster_count():
    chooser = StepThreads(2)
    used = _look(chooser, 0, {1: 60.0, 2: 40.0})
    look = StepThreads.WARMUP + 2 * StepThreads.PROBE * StepThreads.ROUNDS
    assert used[: StepThreads.WARMUP] == [1] * StepThreads.WARMUP
    assert used[StepThreads.WARMUP : StepThreads.WARMUP + 2 * StepThreads.PROBE] == [1] * StepThreads.PROBE + [2] * (
        StepThreads.PROBE)
    assert used[look:] == [2] * (100 - look) and chooser.chosen == 2
    assert _look(chooser, 1, {1: 60.0, 2: 40.0})[:look] == used[:look]  # on every core: the next epoch looks again
    used = _look(chooser, 2, {1: 60.0, 2: 57.0})  # not faster by the margin: one thread
    assert used[look:] == [1] * (100 - look) and chooser.chosen == 1


def test_step_threads_look_again_every_epoch_unless_they_had_to_give_up():
    chooser = StepThreads(2)
    looked = [epoch for epoch in range(4) if set(_look(chooser, epoch, {1: 50.0, 2: 70.0})) == {1, 2}]
    assert looked == [0, 1, 2, 3] and chooser.chosen == 1  # a look costs a few steps on the slower count
    busy = {1: 50.0, 2: 50.0 * (StepThreads.GIVE_UP + 1)}  # another job holds a core
    looked = [epoch for epoch in range(4, 20) if set(_look(chooser, epoch, busy)) == {1, 2}]
    assert looked == [4, 5, 7, 11, 19]
    idle = {1: 50.0, 2: 40.0}  # the load went: from the next look on, every epoch looks again
    looked = [epoch for epoch in range(20, 38) if set(_look(chooser, epoch, idle)) == {1, 2}]
    assert looked == [35, 36, 37] and chooser.chosen == 2


def test_step_threads_give_up_at_once_when_every_core_is_much_slower():
    """Another job holds a core: OpenMP threads waiting for it make a step many times slower."""
    chooser = StepThreads(2)
    used = _look(chooser, 0, {1: 50.0, 2: 50.0 * (StepThreads.GIVE_UP + 1)})
    assert used.count(2) == 1 and chooser.chosen == 1


def test_a_step_much_slower_on_every_core_later_in_the_epoch_puts_the_rest_on_one_thread():
    """Another job starts after the look: the epoch does not go on with threads that wait for its core."""
    chooser = StepThreads(2)
    chooser.start_epoch(0, 100)
    look = StepThreads.WARMUP + 2 * StepThreads.PROBE * StepThreads.ROUNDS
    used = []
    for i in range(100):
        n = chooser.threads(i)
        used.append(n)
        slow = i >= 50 and n == 2
        chooser.record(i, n, (50.0 * (StepThreads.GIVE_UP + 1) if slow else {1: 50.0, 2: 40.0}[n]) / 1e3)
    assert used[look:51] == [2] * (51 - look) and used[51:] == [1] * 49 and chooser.chosen == 1


def test_short_epochs_step_on_one_thread_without_a_look():
    chooser = StepThreads(2)
    assert _look(chooser, 0, {1: 50.0, 2: 10.0}, steps=StepThreads.MIN_STEPS - 1) == [1] * (StepThreads.MIN_STEPS - 1)


def test_the_trainer_steps_on_the_counts_its_chooser_gives_and_logs_the_choice(tmp_path, monkeypatch):
    seen: list[int] = []

    class Counting(ToyObjective):
        def loss(self, batch):
            seen.append(torch.get_num_threads())
            return super().loss(batch)

    monkeypatch.setattr(StepThreads, "MIN_STEPS", 5)
    monkeypatch.setattr(StepThreads, "WARMUP", 1)
    monkeypatch.setattr(StepThreads, "PROBE", 1)
    monkeypatch.setattr(StepThreads, "ROUNDS", 1)  # a look of 3 steps: warm-up, one thread, two
    monkeypatch.setattr(StepThreads, "MARGIN", 100.0)  # two threads are always chosen
    before = torch.get_num_threads()
    history = Trainer(Counting(), _cfg(1), tmp_path, step_threads=StepThreads(2)).fit()
    assert seen == [1, 1, 2, 2, 2] and torch.get_num_threads() == before
    assert history[0]["step_threads"] == 2


def test_training_steps_give_the_same_weights_on_one_thread_and_on_two(tmp_path):
    """The thread count is chosen by timing, so it must not change what is learned: UniDEC's steps (bag encoder,
    both heads, hard negatives, sparse updates) on one and on two intra-op threads, compared bit for bit."""
    rng = np.random.default_rng(0)
    words = np.array(["".join(w) for w in rng.choice(list("abcdefghij"), (3000, 5))])
    queries = [" ".join(rng.choice(words, 120)) for _ in range(600)]  # 300 x 120 tokens a batch: torch's
    labels = [" ".join(rng.choice(words, 4)) for _ in range(900)]  # gathers go parallel from 32,768 elements
    y = sp.csr_matrix((np.ones(600, np.float32), (np.arange(600), rng.integers(0, 900, 600))), shape=(600, 900))
    weights = []
    for count in (1, 2):
        config = load_recipe("unidec", overrides=["trainer.epochs=3", "sampling.batch_size=300",
                                                   "sampling.first_refresh=1", "sampling.refresh_every=1"])
        torch.manual_seed(config.trainer.seed)
        encoder = build_encoder({k: v for k, v in config.encoder.items() if v is not None}, queries + labels)
        _, objective = build_objective(config, encoder, encoder.tokenize(queries), encoder.tokenize(labels), y)
        settings = dataclasses.replace(config.trainer, progress=False)
        Trainer(objective, settings, tmp_path / str(count), step_threads=count).fit()
        weights.append({name: value.detach().clone() for name, value in objective.model.state_dict().items()})
    assert weights[0].keys() == weights[1].keys()
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name
