"""DEXML-Full: every step scores the batch's queries against all L labels, with a gradient cache (DEXML Sec. 4.2,
Appendix B.5).

One step, for B queries:

1. q = Φ(queries) with the graph (a batch, small);
2. Z = Φ(labels) for all L labels, in chunks of η = ``label_chunk`` without a graph (:mod:`xdex.train.grad_cache`);
3. ℓ = the engine loss over S = q Zᵀ with *every* positive of each query marked, and its gradients G = ∂ℓ/∂S,
   ∂ℓ/∂q = G Z, ∂ℓ/∂Z = Gᵀ q and ∂ℓ/∂θ of the loss's own parameters (a learnable temperature);
4. ``loss.backward()``, called by the trainer, sends the cached ∂ℓ/∂q into q's graph and replays the label chunks
   with the graph, back-propagating their rows of ∂ℓ/∂Z.

Memory (Appendix B.5.1): O(B·M_q + L·d + η·M_l + B·L): the [B, L] scores are one float32 buffer, overwritten
by G; the loss runs on blocks of rows with about :data:`BLOCK_ELEMENTS` entries, so its intermediates
(masks, logits, the SoftTop-k bisection) never exceed a few such blocks. The engine losses compute ℓ_i from
row i alone (:mod:`xdex.losses.base`), which is what makes the row blocks exact. Scores and the loss are float32
even under bf16 autocast. The value returned by :meth:`FullLabelObjective.loss` is the exact loss; its
backward is a custom autograd function that routes the cached gradients.

Under ``torchrun`` (Appendix B.5 with G ranks) each rank encodes 1/G of the label chunks, twice, and 1/G of the
queries; the label embeddings are all-gathered (no graph), each rank computes the loss rows of its own queries
against all L labels, and ∂ℓ/∂Z is summed over ranks. Rows being independent, SoftTop-k's threshold search
(Appendix B.7) needs no collective; the price is the full L x d matrix on every rank instead of 1/G of it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn
from torch.autograd import Function

from xdex.losses import build_loss
from xdex.losses.base import PoolLoss
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.methods.plugin import Plugin, Run, register
from xdex.methods.schema import RecipeConfig
from xdex.modules.dual_encoder import DualEncoder
from xdex.text.tokens import TokenizedTexts
from xdex.train import distributed as dist
from xdex.train.grad_cache import encode_chunks, replay_chunks

BLOCK_ELEMENTS = 1 << 22  # score entries per row block of the loss pass (16 MB of float32)


def full_label_loss(
    loss_fn: nn.Module,
    q: Tensor,
    z: Tensor,
    positives: sp.csr_matrix,
    divisor: int | None = None,
    block_elements: int = BLOCK_ELEMENTS,
) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    """Step 3: ℓ, ∂ℓ/∂q, ∂ℓ/∂z and ∂ℓ/∂θ (θ: the loss's trainable parameters) of
    ``loss_fn(q @ z.T, positives)`` with ``positives[i, j]`` = label j is a positive of query i ([B, L], sparse).

    ℓ = Σ_i ℓ_i / ``divisor``, by default the number of rows with a positive, which makes it the engine
    loss (:func:`xdex.losses.base.mean_over_rows_with_positives`); a rank that holds a share of a batch's
    rows passes the batch's count. Computed over blocks of rows without ever building the [B, L] mask or
    more than one [B, L] float buffer. ``loss_fn`` must be a :class:`~xdex.losses.base.PoolLoss`.
    """
    if not isinstance(loss_fn, PoolLoss):
        raise ValueError(f"the full label space needs an engine loss with per-row losses, got {type(loss_fn).__name__}")
    if positives.shape != (len(q), len(z)):
        raise ValueError(f"positives has shape {positives.shape} for {len(q)} queries and {len(z)} labels")
    positives = sp.csr_matrix(positives)
    has_positive = torch.from_numpy(np.diff(positives.indptr) > 0).to(q.device)
    divisor = max(int(has_positive.sum()) if divisor is None else divisor, 1)
    params = [p for p in loss_fn.parameters() if p.requires_grad]
    q, z = q.detach().float(), z.detach().float()
    with torch.autocast(q.device.type, enabled=False):
        scores = q @ z.T  # overwritten block by block with G = ∂ℓ/∂S
    total = torch.zeros((), device=q.device)
    param_grads = [torch.zeros_like(p) for p in params]
    rows = max(1, block_elements // max(len(z), 1))
    for r0 in range(0, len(q), rows):
        block = scores[r0 : r0 + rows].detach().requires_grad_()
        mask = torch.from_numpy(positives[r0 : r0 + rows].toarray() != 0).to(q.device)
        with torch.enable_grad(), torch.autocast(q.device.type, enabled=False):
            row_losses = loss_fn.row_losses(block, mask).masked_fill(~has_positive[r0 : r0 + rows], 0.0)
            part = row_losses.sum() / divisor
            grads = torch.autograd.grad(part, [block, *params])
        total += part.detach()
        scores[r0 : r0 + rows] = grads[0]
        for acc, g in zip(param_grads, grads[1:], strict=True):
            acc += g
    with torch.autocast(q.device.type, enabled=False):
        return total, scores @ z, scores.T @ q, param_grads


class _CachedGradients(Function):
    """Forward: the loss value; backward: the cached ∂ℓ/∂q and ∂ℓ/∂θ times the incoming gradient, after
    ``replay(g)`` has back-propagated g·∂ℓ/∂Z through the label encoder."""

    @staticmethod
    def forward(ctx, value: Tensor, replay: Callable[[Tensor], None], grads: list[Tensor], q: Tensor,
                *params: Tensor) -> Tensor:
        ctx.replay, ctx.grads = replay, grads
        return value.clone()

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, ...]:
        replay, grads = ctx.replay, ctx.grads
        ctx.replay = ctx.grads = None  # the cached L x d tensors go now, not when the loss tensor does
        replay(g)
        return (None, None, None, *(g * grad for grad in grads))


class FullLabelObjective(DualEncoderObjective):
    """Trainer objective of DEXML-Full: the batches of :class:`DualEncoderObjective`, the loss over all L labels.

    Query batches (random, or NGAME clusters when ``config.clustered``) are built as for the pool objective;
    the label pool of every step is the whole label set, so every positive of a query is in it and there are
    no sampled or hard negatives to add. A plain :class:`DualEncoder` only (no auxiliary vectors or heads).
    """

    nested_backward = True  # the label replay back-propagates inside loss.backward(): the trainer averages
    # gradients over ranks after the backward pass rather than with DDP hooks during it

    def __init__(
        self,
        net: DualEncoder,
        loss: nn.Module,
        queries: TokenizedTexts,
        labels: TokenizedTexts,
        train_labels: sp.csr_matrix,
        config: SamplingConfig,
        seed: int = 0,
    ):
        if not isinstance(loss, PoolLoss):
            raise ValueError(f"sampling.label_space=full needs an engine loss with per-row losses (decoupled_softmax, "
                             f"soft_topk, softmax, ...), not {type(loss).__name__}")
        if config.hard_negatives or config.cache_negatives:
            raise ValueError("sampling.label_space=full already scores every label: set sampling.hard_negatives "
                             "and sampling.cache_negatives to 0")
        if config.label_chunk < 1:
            raise ValueError(f"sampling.label_chunk must be a positive number of labels, got {config.label_chunk}")
        super().__init__(net, loss, queries, labels, train_labels, config, seed)
        self._positives_seen: list[float] = []

    def start_epoch(self, epoch: int) -> None:
        super().start_epoch(epoch)
        self._positives_seen = []

    def loss(self, item: tuple[int, int, np.ndarray]) -> Tensor:
        """The loss of the batch over all labels; under ``torchrun`` each of the G ranks encodes its share of
        the batch's queries and of the labels (:func:`xdex.train.distributed.shard`), gathers the label
        embeddings, computes the loss rows of its queries and the sum over ranks of the label gradients, and
        every rank returns the same global loss.

        Gradient scaling: the trainer averages parameter gradients over ranks, so rank r back-propagates
        G·∂ℓ/∂q_r and G·∂ℓ/∂Z_r for the rows it encoded (the mean over ranks then sums each row's
        contribution once) and the full ∂ℓ/∂θ of the loss's parameters, equal on every rank."""
        _, _, query_ids = item
        positives = self.y[query_ids]
        self._positives_seen.append(positives.nnz / max(len(query_ids), 1))
        g = dist.world_size()
        mine, labels_mine = dist.shard(len(query_ids)), dist.shard(len(self.labels))
        with dist.random_per_rank(self.net):
            q = self.net(self.queries[query_ids[mine]])
            labels = encode_chunks(self.net, self.labels, self.cfg.label_chunk,
                                   np.arange(labels_mine.start, labels_mine.stop))
        z = dist.gather_rows(labels.vectors, len(self.labels))
        divisor = int((np.diff(positives.indptr) > 0).sum())
        part, grad_q, grad_z, grad_params = full_label_loss(self.loss_fn, q, z, positives[mine], divisor)
        value = dist.all_reduce_sum(part)
        grad_z = dist.all_reduce_sum(grad_z)[labels_mine]
        grad_params = [dist.all_reduce_sum(t) for t in grad_params]
        params = [p for p in self.loss_fn.parameters() if p.requires_grad]

        def replay(scale: Tensor) -> None:
            replay_chunks(self.net, self.labels, labels, grad_z * (g * scale))

        return _CachedGradients.apply(value, replay, [g * grad_q, *grad_params], q, *params)

    def epoch_stats(self) -> dict[str, float]:
        """The pool is every label: its size is L, and every positive of a query is in it."""
        if not self._positives_seen:
            return {}
        return {"avg_pool_size": float(len(self.labels)), "avg_positives_in_pool": float(np.mean(self._positives_seen))}


def build_full_label(run: Run) -> tuple[DualEncoder, FullLabelObjective]:
    """DEXML-Full's network (a plain dual encoder) and objective (the loss over every label)."""
    encoder, queries, labels = run.inputs()
    config = run.config
    loss = build_loss(**config.loss)
    net = DualEncoder(encoder)
    return net, FullLabelObjective(net, loss, queries, labels, run.train_labels, config.sampling, config.trainer.seed)


def check_full_label(config: RecipeConfig) -> None:
    if config.heads is not None or config.aux is not None:
        raise ValueError("sampling.label_space=full trains a plain dual encoder: remove the heads and aux sections")


register(Plugin("full_label", active=lambda config: config.sampling.label_space == "full", check=check_full_label,
                build=build_full_label))
