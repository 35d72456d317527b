"""Embedding-cache hard negatives (DEXML Appendix C.3, after Lindgren et al. 2021): fresh negatives every step.

An L x d cache holds an embedding of every label, filled by one embedding pass. Each step

1. overwrites the rows of the batch's labels with their fresh embeddings (no graph);
2. scores the batch's queries against the whole cache and computes the loss ℓ over all L labels, every
   positive of each query marked;
3. takes, for each query, the n labels with the largest |∂ℓ/∂s_ij| — the negatives the loss would push down
   hardest — leaving out its positives and the labels already in the batch's pool.

The chosen labels join the pool as hard negatives of that same step. For softmax-type losses
∂ℓ/∂s_ij grows with s_ij, so they are the top-scored negatives; for SoftTop-k they are the negatives
nearest the top-k threshold. Unlike ANN shortlists refreshed every τ epochs, the negatives are at most as
stale as the cache rows they come from.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from xdex.losses.base import PoolLoss

BLOCK_ELEMENTS = 1 << 22  # score entries per block of query rows (16 MB of float32)


class EmbeddingCache:
    """Label embeddings ``vectors`` [L, d], kept up to date with the labels each step encodes."""

    def __init__(self, vectors: Tensor):
        if vectors.dim() != 2:
            raise ValueError(f"the cache needs an [L, d] matrix of label embeddings, got shape {tuple(vectors.shape)}")
        self.vectors = vectors.detach().float().clone()

    def update(self, label_ids: np.ndarray, vectors: Tensor) -> None:
        """Step 1: rows ``label_ids`` become ``vectors`` (no graph)."""
        rows = torch.as_tensor(np.asarray(label_ids, dtype=np.int64), device=self.vectors.device)
        self.vectors[rows] = vectors.detach().to(self.vectors)

    def hardest(
        self,
        loss_fn: torch.nn.Module,
        queries: Tensor,
        positives: sp.csr_matrix,
        exclude: np.ndarray,
        n: int,
        block_elements: int = BLOCK_ELEMENTS,
    ) -> np.ndarray:
        """Steps 2-3: for each query (row of ``queries``, its positives the row of ``positives`` [B, L]) the ``n``
        labels of largest |∂ℓ/∂s| against the cache, largest first, never a positive nor one of ``exclude``
        (the pool). ``[B, n]`` label ids, ``-1`` where fewer labels are left. ``loss_fn`` must be a
        :class:`~xdex.losses.base.PoolLoss` (``ValueError`` otherwise)."""
        if not isinstance(loss_fn, PoolLoss):
            raise ValueError(f"cache negatives need an engine loss with per-row losses, got {type(loss_fn).__name__}")
        if n < 1:
            raise ValueError(f"the number of cache negatives must be positive, got {n}")
        num_labels = len(self.vectors)
        if positives.shape != (len(queries), num_labels):
            raise ValueError(f"positives has shape {positives.shape} for {len(queries)} queries, {num_labels} labels")
        positives = sp.csr_matrix(positives)
        excluded = torch.zeros(num_labels, dtype=torch.bool, device=self.vectors.device)
        excluded[torch.as_tensor(np.asarray(exclude, dtype=np.int64), device=excluded.device)] = True
        q = queries.detach().to(self.vectors)
        k = min(n, num_labels)
        out = np.full((len(q), n), -1, dtype=np.int64)
        rows = max(1, block_elements // max(num_labels, 1))
        for r0 in range(0, len(q), rows):
            scores = (q[r0 : r0 + rows] @ self.vectors.T).requires_grad_()
            mask = torch.from_numpy(positives[r0 : r0 + rows].toarray() != 0).to(scores.device)
            with torch.enable_grad(), torch.autocast(scores.device.type, enabled=False):
                (grad,) = torch.autograd.grad(loss_fn.row_losses(scores, mask).sum(), scores)
            magnitude = grad.abs().masked_fill(mask | excluded, -1.0)
            values, ids = torch.topk(magnitude, k, dim=1)
            ids[values < 0] = -1
            out[r0 : r0 + rows, :k] = ids.cpu().numpy()
        return out
