"""DEXA's auxiliary vectors: one shared correction a_k per label cluster (DEXA Sec. 4, Eq. 5).

A label's embedding is augmented as ẑ_l = N(E(z_l) + a_{C(l)}) in Module I training (Eq. 5) and,
with the trained vectors, once for all labels to initialise Module II's classifiers. The vectors
start at zero, so training starts from the plain label embeddings.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_CHUNK_ELEMENTS = 1 << 22  # rows x dim per chunk of augment_all (16 MiB of float32)


class AuxiliaryVectors(nn.Module):
    """Table ``vectors`` of K auxiliary vectors a_k ``[dim]`` and the buffer ``assignment`` C(l) ``[L]``.

    ``sparse`` tables get sparse gradients (SparseAdam). The assignment is a persistent buffer, so
    it is saved and restored with the state dict.
    """

    assignment: torch.Tensor

    def __init__(
        self, assignment: np.ndarray | torch.Tensor, dim: int, sparse: bool = True, num_clusters: int | None = None
    ):
        """``num_clusters``: rows of the table (default: the largest id + 1), so that re-clustering into ids an
        initial clustering left empty never has to grow it."""
        super().__init__()
        if dim < 1:
            raise ValueError(f"the auxiliary vector dimension must be positive, got {dim}")
        ids = _as_assignment(assignment)
        rows = int(ids.max()) + 1 if num_clusters is None else int(num_clusters)
        if rows <= int(ids.max()):
            raise ValueError(f"num_clusters is {rows} but the assignment uses cluster id {int(ids.max())}")
        self.register_buffer("assignment", ids)
        self.vectors = nn.Embedding(rows, dim, sparse=sparse)
        nn.init.zeros_(self.vectors.weight)

    @property
    def num_clusters(self) -> int:
        """K, the number of auxiliary vectors."""
        return self.vectors.num_embeddings

    @property
    def num_labels(self) -> int:
        """L, the number of labels assigned to clusters."""
        return len(self.assignment)

    @property
    def dim(self) -> int:
        return self.vectors.embedding_dim

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}, num_clusters={self.num_clusters}, dim={self.dim}"

    def forward(self, label_ids: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """N(z_p + a_{C(label_ids[p])}) for each row p of the label embeddings ``z`` ``[P, dim]`` (Eq. 5)."""
        if label_ids.ndim != 1 or z.shape != (len(label_ids), self.dim):
            raise ValueError(f"expected label ids [P] and embeddings [P, {self.dim}], "
                             f"got {tuple(label_ids.shape)} and {tuple(z.shape)}")
        return F.normalize(z + self.vectors(self.assignment[label_ids]), dim=-1)

    @torch.no_grad()
    def augment_all(self, z: torch.Tensor) -> torch.Tensor:
        """ẑ_l = N(z_l + a_{C(l)}) for all labels, ``z`` ``[L, dim]`` in label order, no graph, in row chunks."""
        if z.shape != (self.num_labels, self.dim):
            raise ValueError(f"expected the embeddings of all {self.num_labels} labels [L, {self.dim}], "
                             f"got {tuple(z.shape)}")
        weight = self.vectors.weight
        out = torch.empty(z.shape, dtype=torch.result_type(z, weight), device=z.device)
        rows = max(1, _CHUNK_ELEMENTS // self.dim)
        for start in range(0, len(z), rows):
            part = slice(start, start + rows)
            a = weight[self.assignment[part]].to(z.device)
            out[part] = F.normalize(z[part] + a, dim=-1)
        return out

    @torch.no_grad()
    def reassign(self, assignment: np.ndarray | torch.Tensor) -> None:
        """Move the labels to new clusters C' (DEXA's dynamic clusters); K grows if C' needs more ids, and
        never shrinks (an id no label takes keeps a zero vector), so an optimiser's state keeps its shape.

        New vector a'_k is the mean of the old a_{C(l)} over the labels l with C'(l) = k (zero for an id
        no label takes), so the augmented embeddings move as little as possible. The table keeps its
        parameter object, so optimisers built before keep training it; any optimiser state of the
        table (Adam moments, shaped ``[K, dim]``) still describes the old clusters and should be reset.
        """
        new = _as_assignment(assignment).to(self.assignment.device)
        if len(new) != self.num_labels:
            raise ValueError(f"the new assignment covers {len(new)} labels, expected {self.num_labels}")
        k = max(int(new.max()) + 1, self.num_clusters)
        weight = self.vectors.weight
        pairs = torch.sparse_coo_tensor(
            torch.stack([new, self.assignment]).to(weight.device),
            torch.ones(self.num_labels, dtype=weight.dtype, device=weight.device),
            (k, self.num_clusters),
            check_invariants=False,  # both rows of ids are in range by construction
        )  # entry (k, j): how many labels move from old cluster j to new cluster k
        counts = torch.bincount(new, minlength=k).to(weight.device, weight.dtype)
        means = torch.sparse.mm(pairs, weight) / counts.clamp_min(1).unsqueeze(1)
        self._resize(k)
        weight.copy_(means)
        self.assignment = new

    def _resize(self, k: int) -> None:
        """Give the table ``k`` zero rows in place (same parameter object, dtype and device)."""
        weight = self.vectors.weight
        weight.data = weight.new_zeros(k, self.dim)
        weight.grad = None
        self.vectors.num_embeddings = k

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Resize the table first when the saved one has another K (e.g. after :meth:`reassign`)."""
        saved = state_dict.get(prefix + "vectors.weight")
        if isinstance(saved, torch.Tensor) and saved.ndim == 2 and saved.shape[1] == self.dim \
                and saved.shape[0] != self.num_clusters:
            self._resize(saved.shape[0])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _as_assignment(assignment: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A non-empty 1-D array of non-negative integer cluster ids as an int64 CPU tensor."""
    ids = torch.as_tensor(assignment)
    if ids.ndim != 1 or len(ids) == 0 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"the cluster assignment must be a non-empty 1-D array of integer cluster ids, "
                         f"got {ids.dtype} {tuple(ids.shape)}")
    ids = ids.to(torch.int64)
    if int(ids.min()) < 0:
        raise ValueError(f"cluster ids must be non-negative, got {int(ids.min())}")
    return ids.detach().clone().cpu()
