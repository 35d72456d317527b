"""Multi-process training: 2 gloo processes (spawned, one thread each) against the 1-process computation.

Each spawned run writes its results per rank with ``torch.save``; the test process computes the same
things without a process group (where every function of ``xdex.train.distributed`` is the identity)
and compares.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from xdex.data.synthetic import memorisation_task
from xdex.encoders.factory import build_encoder
from xdex.losses import build_loss
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.methods.unidec import HeadsConfig, UniDECObjective
from xdex.modules import DualEncoder, UniDECNet
from xdex.train import OptimConfig, Trainer, TrainerConfig
from xdex.train import distributed as dist

WORLD = 2
W = torch.tensor([0.5, -1.0, 2.0])  # weights of the hand-checked loss Σ_ij w_j y_ij²


# -- running 2 ranks -----------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn, port: int, out: Path, backend: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD), RANK=str(rank),
                      LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    assert dist.init_from_env(backend, timeout_minutes=2)
    try:
        torch.save(fn(out), out / f"{fn.__name__}.{rank}.pt")
    finally:
        dist.shutdown()


def run_ranks(fn, out: Path, backend: str = "gloo", timeout: float = 150.0) -> list[dict]:
    """``fn(out)`` on 2 spawned ranks; the results of rank 0 and rank 1."""
    ctx = mp.start_processes(_entry, args=(fn, _free_port(), out, backend), nprocs=WORLD, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{fn.__name__} on {WORLD} ranks did not finish in {timeout:.0f} s")
    return [torch.load(out / f"{fn.__name__}.{r}.pt", weights_only=False) for r in range(WORLD)]


# -- shared set-ups -------------------------------------------------------------------------------------
def _rows(n: int) -> torch.Tensor:
    return torch.arange(n * 3, dtype=torch.float32).reshape(n, 3) / 7


def _bag(sparse: bool, n: int = 40):
    ds = memorisation_task(n=n, length=5, vocab_size=300, seed=3)
    encoder = build_encoder({"type": "bag", "dim": 8, "vocab_size": 400, "sparse": sparse, "weighting": "learned"},
                            ds.train.texts + ds.labels.texts)
    return ds, encoder, encoder.tokenize(ds.train.texts), encoder.tokenize(ds.labels.texts)


IDS = {4: np.array([5, 1, 4, 1]), 5: np.array([3, 1, 4, 1, 5]), 1: np.array([7])}


def _dense(grad: torch.Tensor | None) -> torch.Tensor | None:
    return None if grad is None else (grad.to_dense() if grad.is_sparse else grad).cpu().clone()


def collectives(out: Path) -> dict:
    """gather_rows, the reductions, encode_sharded + average_gradients; also run without a process group."""
    res: dict = {}
    for n in (4, 5, 1):
        local = _rows(n)[dist.shard(n)].clone().requires_grad_()
        y = dist.gather_rows(local, n)
        (W * y**2).sum().backward()
        res["gather", n] = (y.detach(), local.grad, dist.shard(n))
    t = torch.tensor([dist.rank() + 1.0, 2.0 * dist.rank()])
    res["sum"], res["max"], res["min"] = dist.all_reduce_sum(t), dist.all_reduce_max(t), dist.all_reduce_min(t)
    s = torch.tensor(dist.rank() + 1.0, requires_grad=True)
    total = dist.all_reduce_sum_grad(s)
    (total**2).backward()
    res["sum_grad"] = (total.detach(), s.grad)
    for sparse in (False, True):
        _, encoder, queries, _ = _bag(sparse)
        net = DualEncoder(encoder)
        for n, ids in IDS.items():
            net.zero_grad(set_to_none=True)
            emb = dist.encode_sharded(net, queries, ids)
            weights = torch.linspace(-1, 1, emb.numel()).reshape(emb.shape)
            (weights * emb).sum().backward()
            dist.average_gradients(net)
            res["encode", sparse, n] = (emb.detach(), {k: _dense(p.grad) for k, p in net.named_parameters()})
        res["embed", sparse] = dist.embed_sharded(net, queries, 16)
    _, encoder, queries, labels = _bag(True)
    net = DualEncoder(encoder)
    calls: list[int] = []
    encoder.register_forward_hook(lambda module, args, out: calls.append(len(args[0])))
    together = dist.encode_together(net, [(queries, IDS[4]), (labels, IDS[5])])
    (_together_weights(together) * torch.cat(together)).sum().backward()
    dist.average_gradients(net)
    res["together"] = ([t.detach() for t in together], {k: _dense(p.grad) for k, p in net.named_parameters()}, calls)
    return res


def _together_weights(parts: list[torch.Tensor]) -> torch.Tensor:
    rows = sum(len(p) for p in parts)
    return torch.linspace(-1, 1, rows * parts[0].shape[1]).reshape(rows, -1)


class ExplicitlyAveraged(DualEncoderObjective):
    """Marks its gradients for averaging after the backward pass instead of by DDP."""

    nested_backward = True


RUNS = {  # name: (objective, loss, sparse table)
    "triplet-dense": ("dual", {"name": "triplet", "margin": 0.3, "num_negatives": 3}, False),
    "decoupled-sparse": ("dual", {"name": "decoupled_softmax"}, True),
    "unidec-sparse": ("unidec", {"name": "decoupled_softmax"}, True),
    "unidec-dense": ("unidec", {"name": "softmax"}, False),
    "explicit-sparse": ("explicit", {"name": "decoupled_softmax"}, True),
}


def _objective(kind: str, loss: dict, sparse: bool):
    torch.manual_seed(0)  # UniDEC's heads start from the global generator
    ds, encoder, queries, labels = _bag(sparse, n=47)  # batches of 24 and 23 queries: uneven shards
    cfg = SamplingConfig(batch_size=24, first_refresh=1, refresh_every=1, cluster_size=4, hard_negatives=2)
    y = ds.train.labels
    if kind == "unidec":
        net = UniDECNet(encoder, 8, y.shape[1], dropout=0.0)
        obj = UniDECObjective(net, build_loss(**loss), queries, labels, y, cfg, HeadsConfig(dim=8, dropout=0.0),
                              build_loss(**loss))
        obj.init_classifiers()
        return obj
    return (ExplicitlyAveraged if kind == "explicit" else DualEncoderObjective)(
        DualEncoder(encoder), build_loss(**loss), queries, labels, y, cfg)


def _trainer_config(epochs: int, device: str = "cpu") -> TrainerConfig:
    optim = OptimConfig(lr=0.01, lr_sparse=0.05, warmup_ratio=0.0, schedule="constant")
    return TrainerConfig(epochs=epochs, optim=optim, progress=False, eval_every=100, device=device)


def _digest(model: nn.Module) -> str:
    return str(hash(tuple(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist())))


def _train(name: str, workdir: Path, epochs: int = 2, resume: bool = False, device: str = "cpu") -> dict:
    obj = _objective(*RUNS[name])
    seen: list[str] = []
    loss = obj.loss

    def recording_loss(batch):
        seen.append(_digest(obj.model))  # the parameters each step starts from
        return loss(batch)

    obj.loss = recording_loss
    trainer = Trainer(obj, _trainer_config(epochs, device), workdir)
    history = trainer.fit(resume=resume)
    return {"loss": [h["loss"] for h in history], "steps": seen, "objective": obj.state_dict(),
            "params": {k: v.cpu().clone() for k, v in obj.model.state_dict().items()},
            "grads": {k: _dense(p.grad) for k, p in obj.model.named_parameters()}}


class Disagreeing:
    """An objective whose refresh hook gives every rank a different state."""

    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Linear(2, 1)
        self.offset = -1.0

    def steps_per_epoch(self):
        return 2

    def start_epoch(self, epoch):
        self.offset = float(dist.rank())

    def batches(self, epoch):
        return [torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -1.0]])]

    def loss(self, x):
        return ((self.model(x) - self.offset) ** 2).sum()

    def epoch_stats(self):
        return {}

    def state_dict(self):
        return {"offset": self.offset}

    def load_state_dict(self, state):
        self.offset = state["offset"]


def training(out: Path) -> dict:
    res = {name: _train(name, out / name) for name in RUNS}
    _train("decoupled-sparse", out / "resumed", epochs=1)
    res["resumed"] = _train("decoupled-sparse", out / "resumed", epochs=2, resume=True)
    toy = Disagreeing()
    Trainer(toy, _trainer_config(1), out / "toy").fit()
    res["toy"] = (toy.offset, _dense(toy.model.weight.detach()))
    optim = OptimConfig(lr=0.01, lr_sparse=0.05, group_lr={"aux.": 0.1})
    res["scaled"] = Trainer(Disagreeing(), TrainerConfig(optim=optim, scale_lr_with_world=True), out).optim_config()
    return res


def training_on_gpus(out: Path) -> dict:
    return {name: _train(name, out / name, device="cuda") for name in ("triplet-dense", "decoupled-sparse")}


# -- module-scoped runs ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks_collectives(tmp_path_factory):
    return run_ranks(collectives, tmp_path_factory.mktemp("collectives"))


@pytest.fixture(scope="module")
def ranks_training(tmp_path_factory):
    return run_ranks(training, tmp_path_factory.mktemp("training"))


# -- without a process group ----------------------------------------------------------------------------
def test_shard_bounds_split_evenly_and_cover_every_position():
    assert dist.shard_bounds(5, 2) == [(0, 2), (2, 5)]
    assert dist.shard_bounds(4, 2) == [(0, 2), (2, 4)]
    assert dist.shard_bounds(1, 2) == [(0, 0), (0, 1)]
    assert dist.shard_bounds(7, 3) == [(0, 2), (2, 4), (4, 7)]
    assert dist.shard(6) == slice(0, 6)


def test_one_process_is_the_identity(monkeypatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert not dist.init_from_env()
    assert (dist.world_size(), dist.rank(), dist.is_main()) == (1, 0, True)
    dist.barrier()
    x = _rows(3).requires_grad_()
    assert dist.gather_rows(x, 3) is x
    assert dist.all_reduce_sum_grad(x) is x
    assert torch.equal(dist.all_reduce_sum(x), x) and not dist.all_reduce_sum(x).requires_grad
    _, encoder, queries, _ = _bag(False)
    net = DualEncoder(encoder)
    assert torch.equal(dist.encode_sharded(net, queries, IDS[5]), net(queries[IDS[5]]))
    with pytest.raises(ValueError, match="holds 2 rows"):
        dist.gather_rows(x[:2], 3)


@pytest.mark.parametrize("wrap", [False, True])  # the bag itself (UniDEC) or inside a DualEncoder
def test_encode_together_gives_each_parts_embeddings_and_gradients_from_one_pass(wrap):
    _, encoder, queries, labels = _bag(True)
    net = DualEncoder(encoder) if wrap else encoder
    parts = [(queries, IDS[4]), (labels, IDS[5]), (labels, np.array([], dtype=np.int64))]
    calls = []
    handle = encoder.register_forward_hook(lambda module, args, out: calls.append(len(args[0])))
    together = dist.encode_together(net, parts)
    handle.remove()
    assert calls == [4 + 5]  # one pass over all the texts
    separate = [net(tokens[ids]) for tokens, ids in parts]
    assert [t.shape for t in together] == [t.shape for t in separate] == [(4, 8), (5, 8), (0, 8)]
    for a, b in zip(together, separate, strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=0.0)
    grads = []
    for outputs in (together, separate):
        net.zero_grad(set_to_none=True)
        sum((_rows(len(o))[:, :1] * o).sum() for o in outputs).backward()
        grads.append({name: _dense(p.grad) for name, p in net.named_parameters()})
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], rtol=1e-5, atol=1e-7), name


def test_encode_together_passes_each_part_alone_for_other_networks():
    _, encoder, queries, labels = _bag(True)
    net = nn.Sequential(encoder)  # no joint_pass: one pass per part
    calls = []
    encoder.register_forward_hook(lambda module, args, out: calls.append(len(args[0])))
    out = dist.encode_together(net, [(queries, IDS[4]), (labels, IDS[1])])
    assert calls == [4, 1] and [len(o) for o in out] == [4, 1]


def test_init_from_env_names_the_missing_torchrun_variables(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for var in dist.TORCHRUN_VARS:
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT are not set"):
        dist.init_from_env()


# -- collectives on 2 ranks -------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [4, 5, 1])
def test_gather_rows_gives_the_global_rows_and_g_times_their_gradient(ranks_collectives, n):
    x = _rows(n)
    for r, res in enumerate(ranks_collectives):
        y, grad, part = res["gather", n]
        assert torch.equal(y, x)  # every rank holds all n rows, in global order
        assert part == slice(*dist.shard_bounds(n, WORLD)[r])
        # ∂/∂x Σ w_j x_ij² = 2 w_j x_ij; the gather's backward sums it over the 2 ranks
        assert torch.allclose(grad, 2 * (2 * W * x[part]))


def test_reductions_by_hand(ranks_collectives):
    for res in ranks_collectives:  # rank r holds [r + 1, 2r]
        assert res["sum"].tolist() == [3.0, 2.0]
        assert res["max"].tolist() == [2.0, 2.0]
        assert res["min"].tolist() == [1.0, 0.0]
        total, grad = res["sum_grad"]
        assert total.item() == 3.0  # 1 + 2
        assert grad.item() == 12.0  # ∂(s²)/∂s = 2·3 on each rank, summed over the 2 ranks


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n", [4, 5, 1])
def test_encode_sharded_forward_and_averaged_gradients_equal_one_process(ranks_collectives, sparse, n):
    _, encoder, queries, _ = _bag(sparse)
    net = DualEncoder(encoder)
    emb = net(queries[IDS[n]])
    weights = torch.linspace(-1, 1, emb.numel()).reshape(emb.shape)
    (weights * emb).sum().backward()
    for res in ranks_collectives:
        got, grads = res["encode", sparse, n]
        assert torch.allclose(got, emb.detach(), atol=1e-6)
        for name, p in net.named_parameters():
            assert torch.allclose(grads[name], _dense(p.grad), atol=1e-6), name
    assert torch.allclose(ranks_collectives[0]["embed", sparse], net.embed(queries, 16), atol=1e-6)


def test_encode_together_on_two_ranks_is_one_pass_of_each_ranks_shard_and_equals_one_process(ranks_collectives):
    _, encoder, queries, labels = _bag(True)
    net = DualEncoder(encoder)
    separate = [net(queries[IDS[4]]), net(labels[IDS[5]])]
    (_together_weights(separate) * torch.cat(separate)).sum().backward()
    for rank, res in enumerate(ranks_collectives):
        got, grads, calls = res["together"]
        first, end = dist.shard_bounds(4 + 5, WORLD)[rank]
        assert calls == [end - first]  # one pass over its shard of the 4 queries and 5 labels
        for a, b in zip(got, separate, strict=True):
            assert torch.allclose(a, b.detach(), atol=1e-6)
        for name, p in net.named_parameters():
            assert torch.allclose(grads[name], _dense(p.grad), atol=1e-6), name


# -- training on 2 ranks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(RUNS))
def test_two_ranks_train_like_one_process(ranks_training, tmp_path, name):
    ref = _train(name, tmp_path)
    for res in (ranks[name] for ranks in ranks_training):
        assert np.allclose(res["loss"], ref["loss"], rtol=1e-5)
        for k, v in ref["grads"].items():  # the last step's gradients, averaged over the ranks
            assert (v is None) == (res["grads"][k] is None), k
            assert v is None or torch.allclose(res["grads"][k], v, atol=1e-5), k
        for k, v in ref["params"].items():
            assert torch.allclose(res["params"][k], v, atol=1e-5), k
        refreshed = res["objective"]
        assert all(np.array_equal(a, b)
                   for a, b in zip(refreshed["clusters"], ref["objective"]["clusters"], strict=True))
        assert np.array_equal(refreshed["shortlist"], ref["objective"]["shortlist"])
    rank0, rank1 = ranks_training[0][name], ranks_training[1][name]
    assert rank0["steps"] == rank1["steps"] and len(rank0["steps"]) == 4  # same parameters before every step
    assert all(torch.equal(rank0["params"][k], rank1["params"][k]) for k in rank0["params"])


def test_resumed_run_equals_the_uninterrupted_one(ranks_training):
    for res in ranks_training:
        full, resumed = res["decoupled-sparse"], res["resumed"]
        assert resumed["loss"] == full["loss"]
        assert all(torch.equal(resumed["params"][k], v) for k, v in full["params"].items())


def test_learning_rates_scale_with_the_number_of_ranks_when_asked(ranks_training):
    scaled = ranks_training[0]["scaled"]
    assert (scaled.lr, scaled.lr_sparse, scaled.group_lr) == (0.02, 0.1, {"aux.": 0.2})


def test_refresh_results_that_disagree_are_replaced_by_rank_0s(ranks_training):
    (offset0, w0), (offset1, w1) = ranks_training[0]["toy"], ranks_training[1]["toy"]
    assert offset0 == offset1 == 0.0
    assert torch.equal(w0, w1)


def _assert_trains_like_one_cpu_process(ranks: list[dict], tmp_path: Path) -> None:
    for name in ("triplet-dense", "decoupled-sparse"):  # DDP, and explicit averaging of the sparse table
        ref = _train(name, tmp_path / name)
        for res in (r[name] for r in ranks):
            assert np.allclose(res["loss"], ref["loss"], rtol=1e-4)
            assert all(torch.allclose(res["params"][k], v, atol=1e-3) for k, v in ref["params"].items())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_on_a_gpu_matches_the_cpu(tmp_path):
    _assert_trains_like_one_cpu_process([training_on_gpus(tmp_path / "gpu")], tmp_path)


@pytest.mark.skipif(torch.cuda.device_count() < WORLD, reason="nccl needs a GPU per rank")
def test_two_gpu_ranks_on_nccl_train_like_one_cpu_process(tmp_path):
    ranks = run_ranks(training_on_gpus, tmp_path / "gpus", backend="nccl")
    _assert_trains_like_one_cpu_process(ranks, tmp_path)
