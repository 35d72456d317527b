"""The dual-encoder training objective shared by the NGAME and DEXML recipes.

Each epoch: (1) at refresh epochs, one embedding pass over the training queries (and the labels
when hard negatives are mined) feeds the refresh hooks: balanced 2-means clusters of the queries
become NGAME's negative-mining-aware batches, and an index search (exact, or an HNSW graph of the label
vectors: ``sampling.mining_index``) gives each query a shortlist of hard negatives (DEXML Sec. 5.4);
(2) each batch's label pool is the sampled positives of its queries plus η sampled hard negatives per
query (and, with ``cache_negatives``, the hardest negatives against a label-embedding cache, DEXML
Appendix C.3), with every in-pool positive masked (UniDEC Fig. 2);
(3) the loss is applied to S = Φ(x)·Φ(z)ᵀ over the pool. With DEXA's auxiliary vectors the label
side is the augmented embedding N(Φ(z_l) + a_{C(l)}) (DEXA Eq. 5), in the loss and in the index the
hard negatives come from; documents get no auxiliary vector.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from xdex.cluster import balanced_kmeans, clusters_to_lists
from xdex.methods.schema import SamplingConfig
from xdex.modules.auxiliary import AuxiliaryVectors
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.unidec import UniDECNet
from xdex.sampling import Batch, ClusterSchedule, HardNegatives, PoolStats, QueryBatcher, seeded_batch
from xdex.sampling.batch import positives_mask
from xdex.sampling.embedding_cache import EmbeddingCache
from xdex.text.tokens import TokenizedTexts
from xdex.train.distributed import embed_sharded, encode_together

log = logging.getLogger(__name__)


class DualEncoderObjective:
    """Trainer objective for a :class:`DualEncoder` (or a :class:`UniDECNet`, see its objective) and any engine
    loss."""

    def __init__(
        self,
        net: DualEncoder | UniDECNet,
        loss: nn.Module,
        queries: TokenizedTexts,
        labels: TokenizedTexts,
        train_labels: sp.csr_matrix,
        config: SamplingConfig,
        seed: int = 0,
        aux: AuxiliaryVectors | None = None,
        recluster: Callable[[np.ndarray], np.ndarray] | None = None,
        recluster_every: int = 0,
    ):
        """``aux``: DEXA's auxiliary vectors for the label side (None: plain label embeddings);
        ``recluster``: label embeddings -> new cluster assignment, applied every ``recluster_every``-th
        refresh after the first (DEXA's "dynamic clusters"; 0: fixed clusters)."""
        if len(queries) != train_labels.shape[0] or len(labels) != train_labels.shape[1]:
            raise ValueError(
                f"{len(queries)} queries and {len(labels)} labels for a {train_labels.shape} label matrix"
            )
        self.net = net
        self.loss_fn = loss
        self.aux: AuxiliaryVectors | None = None
        self.recluster: Callable[[np.ndarray], np.ndarray] | None = None
        self.recluster_every = 0
        self.model = nn.ModuleDict({"net": net, "loss": loss})  # everything the optimisers train
        if aux is not None:
            self.attach_aux(aux, recluster, recluster_every)
        self.queries = queries
        self.labels = labels
        self.y = sp.csr_matrix(train_labels)
        self.cfg = config
        self.seed = seed
        self.batcher = QueryBatcher(len(queries), config.batch_size, seed=seed)
        self.schedule = ClusterSchedule(config.cluster_size, config.cluster_growth, config.cluster_max)
        self.clusters: list[np.ndarray] | None = None
        self.negatives: HardNegatives | None = None
        self.pool_stats = PoolStats()
        self.cache: EmbeddingCache | None = None  # label embeddings for cache negatives, built at the first step

    def attach_aux(self, aux: AuxiliaryVectors, recluster: Callable[[np.ndarray], np.ndarray] | None = None,
                   recluster_every: int = 0) -> None:
        """Put DEXA's auxiliary vectors on the label side (see ``__init__``); before training starts."""
        self.aux = aux
        self.recluster = recluster
        self.recluster_every = recluster_every
        self.model["aux"] = aux

    # -- trainer protocol ---------------------------------------------------------------------
    def steps_per_epoch(self) -> int:
        return len(self.batcher)

    def is_refresh_epoch(self, epoch: int) -> bool:
        c = self.cfg
        return epoch >= c.first_refresh and (epoch - c.first_refresh) % c.refresh_every == 0

    @property
    def reclusters(self) -> bool:
        """Whether refreshes re-cluster the labels of the auxiliary vectors (DEXA's dynamic clusters)."""
        return self.aux is not None and self.recluster is not None and self.recluster_every > 0

    def start_epoch(self, epoch: int) -> None:
        self.pool_stats.reset()
        if (self.cfg.clustered or self.cfg.hard_negatives or self.reclusters) and self.is_refresh_epoch(epoch):
            self.refresh((epoch - self.cfg.first_refresh) // self.cfg.refresh_every)

    def batches(self, epoch: int) -> list[tuple[int, int, np.ndarray]]:
        return [(epoch, i, q) for i, q in enumerate(self.batcher.epoch(epoch, self.clusters))]

    def loss(self, item: tuple[int, int, np.ndarray]) -> torch.Tensor:
        batch = self.make_batch(item)
        q, z = encode_together(self.net, [(self.queries, batch.query_ids), (self.labels, batch.label_ids)])
        z = self.label_side(batch.label_ids, z)
        if self.cfg.cache_negatives > 0:
            batch, z = self.add_cache_negatives(batch, q, z)
        self.pool_stats.add(batch)
        scores = q @ z.T
        return self.loss_fn(scores, torch.from_numpy(batch.positives).to(scores.device))

    def epoch_stats(self) -> dict[str, float]:
        return self.pool_stats.summary()

    def state_dict(self) -> dict:
        return {"clusters": self.clusters,
                "shortlist": None if self.negatives is None else self.negatives.shortlist}

    def load_state_dict(self, state: dict) -> None:
        self.clusters = state["clusters"]
        self.negatives = None if state["shortlist"] is None else HardNegatives(state["shortlist"])

    # -- pieces ---------------------------------------------------------------------------------
    def label_side(self, label_ids: np.ndarray, z: torch.Tensor) -> torch.Tensor:
        """The pool's label embeddings as the loss sees them: ``z``, or N(z + a_{C(l)}) with auxiliary vectors."""
        if self.aux is None:
            return z
        return self.aux(torch.from_numpy(np.asarray(label_ids, dtype=np.int64)).to(z.device), z)

    def add_cache_negatives(self, batch: Batch, q: torch.Tensor, z: torch.Tensor) -> tuple[Batch, torch.Tensor]:
        """DEXML C.3: the pool's fresh embeddings ``z`` update the label-embedding cache, whose
        ``cache_negatives`` hardest negatives per query join the pool (encoded with the graph, cached too)."""
        if self.cache is None:  # one embedding pass; a resumed run starts a fresh cache
            z_all = self.net.embed(self.labels, self.cfg.embed_batch_size)
            self.cache = EmbeddingCache((z_all if self.aux is None else self.aux.augment_all(z_all)).to(z.device))
        self.cache.update(batch.label_ids, z)
        mined = self.cache.hardest(self.loss_fn, q, self.y[batch.query_ids], batch.label_ids, self.cfg.cache_negatives)
        extra = np.unique(mined[mined >= 0])
        if len(extra) == 0:
            return batch, z
        z_extra = self.label_side(extra, self.net(self.labels[extra]))
        self.cache.update(extra, z_extra)
        label_ids = np.concatenate([batch.label_ids, extra])
        order = np.argsort(label_ids, kind="stable")
        z = torch.cat([z, z_extra])[torch.from_numpy(order).to(z.device)]
        label_ids = label_ids[order]
        return Batch(batch.query_ids, label_ids, positives_mask(self.y, batch.query_ids, label_ids)), z

    def make_batch(self, item: tuple[int, int, np.ndarray]) -> Batch:
        """Label pool and mask of batch ``i`` of ``epoch``; its randomness depends only on (seed, epoch, i)."""
        epoch, i, query_ids = item
        return seeded_batch(self.y, query_ids, [self.seed, epoch, i, 1], self.cfg.beta, self.negatives,
                            self.cfg.hard_negatives)

    def refresh(self, r: int) -> None:
        """The r-th refresh: one embedding pass shared by the clustering and hard-negative hooks."""
        q = embed_sharded(self.net, self.queries, self.cfg.embed_batch_size).numpy()
        if self.cfg.clustered:
            k = min(self.schedule.num_clusters(len(q), r), _floor_pow2(len(q)))
            assign = balanced_kmeans(q, num_clusters=k, seed=self.seed + r)
            self.clusters = clusters_to_lists(assign)
            log.info("refresh %d: %d query clusters of ~%d", r, k, len(q) // k)
        recluster = self.reclusters and r > 0 and r % self.recluster_every == 0
        if not (recluster or self.cfg.hard_negatives > 0):
            return
        z = embed_sharded(self.net, self.labels, self.cfg.embed_batch_size)
        if recluster:
            assert self.aux is not None and self.recluster is not None  # self.reclusters says so
            self.aux.reassign(self.recluster(z.numpy()))
            log.info("refresh %d: labels re-clustered into %d clusters", r, self.aux.num_clusters)
        if self.cfg.hard_negatives > 0:
            size = self.cfg.shortlist_size or self.cfg.hard_negatives * self.cfg.refresh_every
            vectors = (z if self.aux is None else self.aux.augment_all(z)).numpy()
            self.negatives = HardNegatives.mine(q, vectors, self.y, size, seed=self.seed + r,
                                                **self.cfg.mining_index.settings())
            log.info("refresh %d: hard-negative shortlists of %d labels (%s search)", r, size, self.negatives.index)


def _floor_pow2(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)
