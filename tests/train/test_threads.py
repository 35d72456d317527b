"""Thread counts chosen per kind of work: one intra-op thread for a bag encoder's training steps on the CPU,
torch's own setting elsewhere (a transformer's steps included) and whenever the user set OMP_NUM_THREADS; and the
steps' floating-point mode (subnormals flushed)."""

from __future__ import annotations

import pytest
import torch
from test_hardware import needs_flush
from test_trainer import ToyObjective, _cfg

from xdex.encoders import Transformer
from xdex.encoders.factory import build_encoder
from xdex.hardware import denormals_are_flushed
from xdex.text import Tokenizer
from xdex.train import Trainer
from xdex.train.threads import intra_op_threads, step_threads

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
