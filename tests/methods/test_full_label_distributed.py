"""Two gloo ranks: the full-label step, after the mean of the gradients over ranks, equals the 1-process step,
and so does training with the trainer."""

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed
import torch.multiprocessing as mp
from test_full_label import _grads, _objective

from xdex.losses import DecoupledSoftmax, SoftTopK
from xdex.train import OptimConfig, Trainer, TrainerConfig
from xdex.train.distributed import average_gradients

QUERIES = np.arange(11)  # 5 + 6 queries on the two ranks; 23 labels: 11 + 12, in chunks of 5 and 4


def _losses():
    return {"decoupled": lambda: DecoupledSoftmax(temperature=0.1, learnable_temperature=True),
            "soft_topk": lambda: SoftTopK(k=3, temperature=0.2)}


def _step(name: str, chunk: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    obj = _objective(_losses()[name](), chunk, dropout=0.0)  # dropout masks differ by rank, by design
    torch.manual_seed(0)
    loss = obj.loss((0, 0, QUERIES))
    loss.backward()
    average_gradients(obj.model)
    return loss.detach(), _grads(obj.model)


def _train(folder: str) -> dict[str, torch.Tensor]:
    """Two epochs of the trainer (AdamW steps) on the full-label objective."""
    obj = _objective(DecoupledSoftmax(temperature=0.1, learnable_temperature=True), 5, dropout=0.0)
    obj.batcher.batch_size = 5  # 12 queries: batches of 5, 5 and 2, split 2 + 3 and 1 + 1 over the ranks
    config = TrainerConfig(epochs=2, optim=OptimConfig(lr=0.01, warmup_ratio=0.0), progress=False, device="cpu")
    Trainer(obj, config, folder).fit()
    return {k: v.clone() for k, v in obj.model.state_dict().items()}


def _worker(rank: int, world: int, port: int, folder: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                         world_size=world)
    try:
        results = {(name, chunk): _step(name, chunk) for name in _losses() for chunk in (5, 4)}
        results["trained"] = _train(os.path.join(folder, f"train{rank}"))
        torch.save(results, os.path.join(folder, f"rank{rank}.pt"))
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch build has no torch.distributed")
def test_two_gloo_ranks_give_the_one_process_step(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    trained = _train(str(tmp_path / "train"))
    start = _objective(DecoupledSoftmax(temperature=0.1, learnable_temperature=True), 5, dropout=0.0).model
    assert not torch.allclose(start.state_dict()["loss.temperature.log_scale"], trained["loss.temperature.log_scale"])
    for rank in ranks:
        state = rank.pop("trained")
        for name, value in trained.items():  # the trainer averages the gradients of the nested backward
            assert torch.allclose(state[name], value, rtol=1e-5, atol=1e-6), name
    for key in ranks[0]:
        loss, grads = _step(*key)
        for rank in ranks:
            rank_loss, rank_grads = rank[key]
            assert torch.allclose(rank_loss, loss, rtol=1e-6), key
            assert rank_grads.keys() == grads.keys() and len(grads) >= 2
            for name in grads:
                assert torch.allclose(rank_grads[name], grads[name], rtol=1e-5, atol=1e-7), (key, name)
