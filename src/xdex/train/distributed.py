"""Multi-process training on ``torch.distributed`` (launched by ``torchrun``; gloo on CPUs, nccl on GPUs).

Every rank sees the same global batches; within a batch the texts to encode are sharded across the
ranks, each rank encodes its shard, and the embeddings are all-gathered *with gradients*, so every rank
holds the same [n, d] matrices and computes the same global loss (DEXML Appendix B.5: queries split
B/G per device and all-gathered; labels split L/G). In a 1-process run every function here is the
identity, and :func:`encode_sharded` is exactly ``net(tokens[ids])``.

Gradient scaling. The backward pass of every collective here *sums* the incoming gradients over the
ranks: the all-gather's backward is a reduce-scatter (sum) and :func:`all_reduce_sum_grad`'s backward an
all-reduce (sum). With G ranks that each compute the same global loss ℓ,

* rank r's own rows x_r receive Σ_g ∂ℓ/∂x_r = G · ∂ℓ/∂x_r, so a parameter θ before the gather gets
  G · (∂ℓ/∂x_r)(∂x_r/∂θ) on rank r, and the mean over ranks that DDP applies gives
  Σ_r (∂ℓ/∂x_r)(∂x_r/∂θ) = ∂ℓ/∂θ, the 1-process gradient;
* a parameter used after the gather (heads, a loss temperature, classifier rows) gets the full ∂ℓ/∂θ on
  every rank, and the mean of G equal gradients is again ∂ℓ/∂θ.

So the rule for any objective is: *return the same global loss on every rank*. A loss assembled from
per-rank parts ℓ = Σ_g ℓ_g (e.g. each rank scoring its own chunk of labels against all queries, with
the softmax denominators summed across ranks) keeps the rule by returning ``all_reduce_sum_grad(ℓ_g)``.
To keep post-gather randomness (e.g. dropout in heads) identical across ranks, :func:`encode_sharded`
runs the shard's encoder under a forked random generator seeded per rank.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import warnings
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from torch import Tensor, nn

from xdex.text.tokens import TokenizedTexts

log = logging.getLogger(__name__)

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def is_distributed() -> bool:
    """Whether a process group of more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Number of ranks (1 when ``torch.distributed`` is not initialised)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's global rank (0 when ``torch.distributed`` is not initialised)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def local_rank() -> int:
    """This process's rank on its node (torchrun's ``LOCAL_RANK``; 0 when not distributed)."""
    return int(os.environ.get("LOCAL_RANK", "0")) if is_distributed() else 0


def is_main() -> bool:
    """True on rank 0, the one rank that writes files, logs metrics and shows progress bars."""
    return rank() == 0


def barrier() -> None:
    """Wait for all ranks (no-op when not distributed)."""
    if is_distributed():
        dist.barrier()


def backend_name() -> str | None:
    """The process group's backend (``"gloo"``, ``"nccl"``), or None when not distributed."""
    return str(dist.get_backend()) if is_distributed() else None


def init_from_env(backend: str | None = None, timeout_minutes: float = 30.0) -> bool:
    """Start the process group described by torchrun's environment; return whether the run is distributed.

    Nothing happens unless ``WORLD_SIZE`` > 1 (a plain ``python -m xdex`` run, or torchrun with one
    process). The backend defaults to nccl when CUDA is available (this rank then uses the GPU
    ``LOCAL_RANK``), else gloo. A group that already exists is kept.
    """
    if dist.is_available() and dist.is_initialized():
        return is_distributed()
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError(f"WORLD_SIZE must be an integer, got {os.environ['WORLD_SIZE']!r}") from None
    if size <= 1:
        return False
    missing = [name for name in TORCHRUN_VARS if name not in os.environ]
    if missing:
        raise ValueError(f"WORLD_SIZE is {size} but {', '.join(missing)} are not set; launch with torchrun")
    if not dist.is_available():
        raise ValueError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if chosen == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(chosen, timeout=timedelta(minutes=timeout_minutes))
    log.info("rank %d of %d (%s backend, local rank %s)", rank(), world_size(), chosen, os.environ["LOCAL_RANK"])
    return True


def shutdown() -> None:
    """Destroy the process group, if there is one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# -- sharding --------------------------------------------------------------------------------------
def shard_bounds(n: int, size: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) of every rank's contiguous block of an n-item list: rank r gets [⌊rn/G⌋, ⌊(r+1)n/G⌋).

    Blocks differ in length by at most one; when n < G some are empty.
    """
    if n < 0:
        raise ValueError(f"cannot shard a list of {n} items")
    g = world_size() if size is None else size
    return [(r * n // g, (r + 1) * n // g) for r in range(g)]


def shard(n: int) -> slice:
    """The positions of an n-item global list that this rank handles (a contiguous block)."""
    start, stop = shard_bounds(n)[rank()]
    return slice(start, stop)


def gather_rows(local: Tensor, n: int) -> Tensor:
    """All-gather every rank's rows (its :func:`shard` of n) into the global [n, ...] tensor, in global order.

    Gradients flow back to each rank's own rows, summed over the ranks (the module docstring explains
    why this, with DDP's mean, gives the 1-process gradient). Shards are padded to equal length for the
    collective and the padding is cut. Every rank must call this, with the same n and trailing shape.
    """
    bounds = shard_bounds(n)
    start, stop = bounds[rank()]
    if local.shape[0] != stop - start:
        raise ValueError(f"rank {rank()} holds {local.shape[0]} rows, but its shard of {n} is {stop - start}")
    if not is_distributed():
        return local
    longest = max(b - a for a, b in bounds)
    if local.shape[0] < longest:
        local = torch.cat([local, local.new_zeros(longest - local.shape[0], *local.shape[1:])])
    with warnings.catch_warnings():  # the autograd all-gather is marked deprecated without a public successor
        warnings.simplefilter("ignore", FutureWarning)
        parts = dist_nn.all_gather(local)
    return torch.cat([part[: b - a] for part, (a, b) in zip(parts, bounds, strict=True)])


class Embedder(Protocol):
    """A network that embeds texts without a graph (e.g. a dual encoder)."""

    def embed(self, tokens: TokenizedTexts, batch_size: int) -> Tensor: ...


def embed_sharded(net: Embedder, tokens: TokenizedTexts, batch_size: int) -> Tensor:
    """``net.embed(tokens, batch_size)`` (no graph, CPU, input order) with each rank embedding only its shard
    of the texts, all-gathered: a refresh pass over all queries or labels costs 1/G of it per rank."""
    if not is_distributed():
        return net.embed(tokens, batch_size)
    part = shard(len(tokens))
    local = net.embed(tokens[part], batch_size)
    with torch.no_grad():
        return gather_rows(local.to(_collective_device() or "cpu"), len(tokens)).cpu()


def encode_sharded(net: nn.Module, tokens: TokenizedTexts, ids: np.ndarray) -> Tensor:
    """``net(tokens[ids])`` with each rank encoding only its shard of ``ids``, gathered with gradients.

    Returns [len(ids), d] in the order of ``ids`` on every rank. The shard's forward pass runs under a
    random generator forked and seeded by (a draw shared by all ranks, rank), so ranks draw different
    dropout masks for their rows while the shared generator advances identically on every rank. A rank
    whose shard is empty encodes one text and keeps none of it, so that it takes part in the backward
    pass's collectives like the others.
    """
    ids = np.asarray(ids)
    if not is_distributed() or len(ids) == 0:
        return net(tokens[ids])
    part = ids[shard(len(ids))]
    with random_per_rank(net):
        local = net(tokens[part]) if len(part) else net(tokens[ids[:1]])[:0]
    return gather_rows(local, len(ids))


def encode_together(net: nn.Module, parts: Sequence[tuple[TokenizedTexts, np.ndarray]]) -> list[Tensor]:
    """``[encode_sharded(net, tokens, ids) for tokens, ids in parts]`` (e.g. a batch's queries and its label pool).

    For a ``net`` whose ``joint_pass`` is true (a bag of embeddings: its texts do not interact and it draws
    nothing at random, so the embeddings are the same) the texts of all parts go through one pass (under
    torchrun, each rank its shard of them all): one lookup of their distinct tokens and one sparse gradient for
    the table, instead of one per part, which the backward pass would then merge (docs/benchmarks.md, "Steps
    over large label pools, after").
    """
    if not getattr(net, "joint_pass", False):
        return [encode_sharded(net, tokens, ids) for tokens, ids in parts]
    texts = TokenizedTexts.concatenate([tokens[np.asarray(ids)] for tokens, ids in parts])
    together = net(texts) if not is_distributed() else encode_sharded(net, texts, np.arange(len(texts)))
    return list(together.split([len(ids) for _, ids in parts]))


@contextlib.contextmanager
def random_per_rank(net: nn.Module) -> Iterator[None]:
    """Run the block under a random generator forked and seeded by (a draw shared by all ranks, rank): ranks
    draw their own dropout masks for their own rows while the shared generator advances alike on every rank.
    A no-op in a 1-process run."""
    if not is_distributed():
        yield
        return
    seed = int(torch.randint(0, 2**62, (1,)))
    device = next(net.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed + rank())
        yield


# -- reductions ----------------------------------------------------------------------------------------
def _all_reduce(t: Tensor, op: dist.ReduceOp.RedOpType) -> Tensor:
    out = t.detach()
    if not is_distributed():
        return out
    out = out.clone()
    dist.all_reduce(out, op=op)
    return out


def all_reduce_sum(t: Tensor) -> Tensor:
    """Σ over ranks of ``t`` (a new tensor, no graph; ``t`` detached when not distributed)."""
    return _all_reduce(t, dist.ReduceOp.SUM)


def all_reduce_max(t: Tensor) -> Tensor:
    """Element-wise max over ranks (no graph), e.g. the upper end of DEXML B.7's threshold bracket."""
    return _all_reduce(t, dist.ReduceOp.MAX)


def all_reduce_min(t: Tensor) -> Tensor:
    """Element-wise min over ranks (no graph)."""
    return _all_reduce(t, dist.ReduceOp.MIN)


def all_reduce_sum_grad(t: Tensor) -> Tensor:
    """Σ over ranks of ``t`` with the graph: the backward pass sums the incoming gradients over ranks.

    For per-rank terms of one global quantity, e.g. softmax denominators Σ_j exp(S_ij) over each
    rank's chunk of labels (DEXML Appendix B.5). Identity when not distributed.
    """
    if not is_distributed():
        return t
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return dist_nn.all_reduce(t, op=dist.ReduceOp.SUM)


# -- keeping ranks identical ---------------------------------------------------------------------------
@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block before the other ranks do, e.g. to fill an on-disk cache the others then read."""
    if not is_main():
        barrier()
    yield
    if is_main():
        barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (pickled; ``obj`` itself when not distributed)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, device=_collective_device())
    return box[0]


def same_on_all_ranks(obj: Any) -> bool:
    """Whether ``obj`` pickles to the same bytes on every rank (compares SHA-256 digests only)."""
    if not is_distributed():
        return True
    digest = hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).hexdigest()
    digests: list[Any] = [None] * world_size()
    dist.all_gather_object(digests, digest)
    return len(set(digests)) == 1


def broadcast_module(module: nn.Module, src: int = 0) -> None:
    """Overwrite every parameter and buffer of ``module`` with rank ``src``'s, in place (same shapes)."""
    if not is_distributed():
        return
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=src)


def average_gradients(module: nn.Module) -> None:
    """Replace every gradient of ``module`` by its mean over ranks, dense and sparse alike.

    The explicit alternative to DDP for objectives that back-propagate inside their loss (gradient
    cache) and for sparse gradients on backends without sparse all-reduce (nccl). Dense gradients are
    flattened into one all-reduce per dtype and device; a sparse gradient is all-gathered as
    (indices, values) padded to the longest, then summed. Every rank must call this with the same set
    of parameters having gradients (the gradient of a parameter a rank did not use must be zeros).
    """
    if not is_distributed():
        return
    g = world_size()
    dense: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
    for p in module.parameters():
        grad = p.grad
        if grad is None:
            continue
        if grad.is_sparse:
            p.grad = _sparse_mean(grad, g)
        else:
            dense.setdefault((grad.device, grad.dtype), []).append(grad)
    for grads in dense.values():
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        dist.all_reduce(flat)
        flat /= g
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()


def _sparse_mean(grad: Tensor, g: int) -> Tensor:
    grad = grad.coalesce()
    indices, values = grad.indices(), grad.values()
    count = torch.tensor([indices.shape[1]], device=indices.device)
    counts = [torch.zeros_like(count) for _ in range(g)]
    dist.all_gather(counts, count)
    longest = int(max(int(c) for c in counts))
    pad = longest - indices.shape[1]
    indices = torch.cat([indices, indices.new_zeros(indices.shape[0], pad)], dim=1)
    values = torch.cat([values, values.new_zeros(pad, *values.shape[1:])])
    all_indices = [torch.empty_like(indices) for _ in range(g)]
    all_values = [torch.empty_like(values) for _ in range(g)]
    dist.all_gather(all_indices, indices)
    dist.all_gather(all_values, values)
    kept = [int(c) for c in counts]
    total = torch.sparse_coo_tensor(
        torch.cat([i[:, :k] for i, k in zip(all_indices, kept, strict=True)], dim=1),
        torch.cat([v[:k] for v, k in zip(all_values, kept, strict=True)]) / g,
        grad.shape,
    )
    return total.coalesce()


def _collective_device() -> torch.device | None:
    """The device object collectives run on: the current GPU with nccl, else the CPU (None)."""
    return torch.device("cuda", torch.cuda.current_device()) if backend_name() == "nccl" else None
