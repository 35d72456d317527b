"""DEXA Module II: per-label classifiers trained on a frozen encoder, and the fusion weight of inference.

Once the encoder E_θ is trained, it is frozen and every classifier starts at its label's augmented
embedding, w_l ← ẑ_l = N(E_θ(z_l) + a_C(l)) (DEXA Sec. 4, "Classifier Training – Module II"); the
classifiers are then learnt with

    min_W Σ_i Σ_{l: y_il = +1, m ∈ N̂_i} [w_mᵀ E_θ(x_i) − w_lᵀ E_θ(x_i) + γ]_+                    (Eq. 6)

over fixed document features E_θ(x_i), so an epoch costs one gather and one small matrix product per
batch. At inference DEXA combines the classifier scores with the label-similarity scores; here the
two are fused as α·w_lᵀx + (1 − α)·E_θ(z_l)ᵀx, with α chosen on held-out documents
(:func:`choose_fusion`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from xdex.index.retrieval import retrieve
from xdex.losses import build_loss
from xdex.methods.schema import ClassifierTraining, MiningIndexConfig
from xdex.metrics.measures import compute_metrics
from xdex.metrics.ranking import depth_with_filter, remove_pairs
from xdex.sampling import Batch, HardNegatives, PoolStats, QueryBatcher, seeded_batch
from xdex.train import Trainer, TrainerConfig
from xdex.train.optim import OptimConfig

log = logging.getLogger(__name__)

FUSION_GRID: tuple[float, ...] = tuple(i / 10 for i in range(11))


class ClassifierObjective:
    """Trainer objective of DEXA Module II: the classifier table W over fixed document features.

    Each batch holds random training documents (an order fixed by (seed, epoch)); its label pool is
    β sampled positives per document plus η hard negatives per document drawn from its shortlist,
    every in-pool positive masked, and the loss is applied to the scores X[q]·W[pool]ᵀ. With the
    :class:`~xdex.losses.Triplet` loss (margin γ) this is Eq. 6 with N̂_i the pool's negatives of
    document i (its hardest ``num_negatives`` of them), averaged over the batch's documents.

    ``model`` holds ``classifiers`` (an ``nn.Embedding(L, D, sparse=True)`` starting exactly at
    ``init``, so the trainer gives it SparseAdam and ``group_lr`` can address it by that prefix) and
    the loss. The features, the shortlists and the batch order never change, so the objective has no
    state of its own to checkpoint: :meth:`state_dict` is empty.
    """

    def __init__(
        self,
        doc_embeddings: torch.Tensor,
        init: torch.Tensor,
        train_labels: sp.csr_matrix,
        loss: nn.Module,
        batch_size: int = 256,
        beta: int = 1,
        hard_negatives: int = 0,
        shortlist: np.ndarray | None = None,
        seed: int = 0,
    ):
        features = torch.as_tensor(doc_embeddings).detach().float()
        weights = torch.as_tensor(init).detach().float()
        y = sp.csr_matrix(train_labels)
        if features.ndim != 2 or weights.ndim != 2 or features.shape[1] != weights.shape[1]:
            raise ValueError(f"document embeddings {tuple(features.shape)} and initial classifiers "
                             f"{tuple(weights.shape)} must be [N, D] and [L, D]")
        if y.shape != (features.shape[0], weights.shape[0]):
            raise ValueError(f"{features.shape[0]} documents and {weights.shape[0]} classifiers for a "
                             f"{y.shape} label matrix")
        if beta < 1 or hard_negatives < 0:
            raise ValueError(f"beta must be >= 1 and hard_negatives >= 0, got {beta} and {hard_negatives}")
        self.negatives: HardNegatives | None = None
        if hard_negatives > 0:
            self.negatives = HardNegatives(_check_shortlist(shortlist, *y.shape))
        self.features = features
        self.y = y
        self.loss_fn = loss
        self.beta = beta
        self.hard_negatives = hard_negatives
        self.seed = seed
        self.batcher = QueryBatcher(len(features), batch_size, seed=seed)
        table = nn.Embedding.from_pretrained(weights.clone(), freeze=False, sparse=True)
        self.model = nn.ModuleDict({"classifiers": table, "loss": loss})
        self.pool_stats = PoolStats()

    @property
    def classifiers(self) -> nn.Embedding:
        """The classifier table W (row l = w_l)."""
        return cast(nn.Embedding, self.model["classifiers"])

    def weights(self) -> torch.Tensor:
        """A float32 CPU copy of W, e.g. for :class:`~xdex.modules.fusion.ClassifierFusionNet`."""
        return self.classifiers.weight.detach().float().cpu().clone()

    # -- trainer protocol ---------------------------------------------------------------------
    def steps_per_epoch(self) -> int:
        return len(self.batcher)

    def start_epoch(self, epoch: int) -> None:
        self.pool_stats.reset()

    def batches(self, epoch: int) -> list[tuple[int, int, np.ndarray]]:
        return [(epoch, i, q) for i, q in enumerate(self.batcher.epoch(epoch))]

    def loss(self, item: tuple[int, int, np.ndarray]) -> torch.Tensor:
        batch = self.make_batch(item)
        self.pool_stats.add(batch)
        table = self.classifiers
        device = table.weight.device
        x = self.features[torch.from_numpy(batch.query_ids)].to(device)
        w = table(torch.from_numpy(batch.label_ids).to(device))
        scores = x @ w.T
        return self.loss_fn(scores, torch.from_numpy(batch.positives).to(device))

    def epoch_stats(self) -> dict[str, float]:
        return self.pool_stats.summary()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"the classifier objective keeps no state, got keys {sorted(state)}")

    # -- pieces ---------------------------------------------------------------------------------
    def make_batch(self, item: tuple[int, int, np.ndarray]) -> Batch:
        """Label pool and mask of batch ``i`` of ``epoch``; its randomness depends only on (seed, epoch, i)."""
        epoch, i, query_ids = item
        return seeded_batch(self.y, query_ids, [self.seed, epoch, i, 1], self.beta, self.negatives,
                            self.hard_negatives)


def train_classifier_table(
    features: torch.Tensor, start: torch.Tensor, train_labels: sp.csr_matrix, config: ClassifierTraining,
    trainer_config: TrainerConfig, workdir: Path, resume: bool = False, mining: MiningIndexConfig | None = None,
) -> torch.Tensor:
    """Per-label classifiers W [L, d] started at ``start`` and trained over the fixed document ``features`` on hard
    negatives from a search of ``start`` (Eq. 6; DEXA Module II, NGAME M2, OAK stage 3) by the ``mining`` index
    (``sampling.mining_index``; None: exact), checkpointed in ``workdir`` so that ``resume`` continues them."""
    shortlist = hard_negative_shortlist(features.numpy(), start.numpy(), train_labels, config.shortlist_size, mining,
                                        seed=trainer_config.seed)
    objective = ClassifierObjective(
        features, start, train_labels, build_loss(**config.loss), config.batch_size, config.beta,
        config.hard_negatives, shortlist, seed=trainer_config.seed,
    )
    stage = dataclasses.replace(
        trainer_config, epochs=config.epochs, eval_every=max(1, config.epochs),
        optim=OptimConfig(lr=config.lr, lr_sparse=config.lr, warmup_ratio=0.0, schedule="linear", grad_clip=None),
    )
    Trainer(objective, stage, workdir).fit(resume=resume)
    return objective.weights()


def _check_shortlist(shortlist: np.ndarray | None, n_docs: int, n_labels: int) -> np.ndarray:
    if shortlist is None:
        raise ValueError("hard_negatives > 0 needs a shortlist of hard-negative labels per document")
    ids = np.asarray(shortlist)
    if ids.ndim != 2 or ids.shape[0] != n_docs or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"the shortlist must be an integer array [{n_docs}, S], got {ids.dtype} {ids.shape}")
    if ids.size and (ids.min() < -1 or ids.max() >= n_labels):
        raise ValueError(f"the shortlist holds label ids outside [-1, {n_labels})")
    return ids


def hard_negative_shortlist(
    doc_embeddings: np.ndarray, label_vectors: np.ndarray, train_labels: sp.csr_matrix, size: int,
    mining: MiningIndexConfig | None = None, seed: int = 0,
) -> np.ndarray:
    """N̂_i of Eq. 6: the ``size`` labels of highest inner product with each document, its positives
    removed (``[N, size]``, best first, ``-1``-padded), by a search over ``label_vectors`` (ẑ) with the
    ``mining`` index (None: exact; an HNSW graph is built from ``seed``)."""
    settings = (mining or MiningIndexConfig()).settings()
    return HardNegatives.mine(doc_embeddings, label_vectors, train_labels, size, seed=seed, **settings).shortlist


def choose_fusion(
    doc_embeddings_valid: np.ndarray,
    label_embeddings: np.ndarray,
    classifiers: np.ndarray,
    valid_labels: sp.csr_matrix,
    valid_filter: sp.csr_matrix | None = None,
    grid: Sequence[float] = FUSION_GRID,
    metric: str = "P@1",
    k: int = 5,
) -> tuple[float, dict[float, float]]:
    """The α of the fused label vectors v_l = α·w_l + (1 − α)·E(z_l) that maximises ``metric`` on
    held-out documents (their query vectors N(E(x)) in ``doc_embeddings_valid``), and the metric of
    every α in ``grid``.

    A query x scores label l as v_lᵀx = α·w_lᵀx + (1 − α)·E(z_l)ᵀx, DEXA's combination of classifier
    and label-similarity scores. Rankings are scored as validation during training is: the top
    labels are retrieved, the filter pairs removed, then ``metric`` (any ``P@j``, ``nDCG@j`` or
    ``R@j`` with j ≤ ``k``) is computed. Ties go to the smallest α.
    """
    x = np.asarray(doc_embeddings_valid, dtype=np.float32)
    z = np.asarray(label_embeddings, dtype=np.float32)
    w = np.asarray(classifiers, dtype=np.float32)
    alphas = sorted(float(a) for a in grid)
    if not alphas or alphas[0] < 0.0 or alphas[-1] > 1.0:
        raise ValueError(f"the fusion grid must be a non-empty list of values in [0, 1], got {list(grid)}")
    if z.ndim != 2 or z.shape != w.shape or x.ndim != 2 or x.shape[1] != z.shape[1]:
        raise ValueError(f"documents {x.shape}, label embeddings {z.shape} and classifiers {w.shape} "
                         "must be [n, D], [L, D] and [L, D]")
    if valid_labels.shape != (len(x), len(z)):
        raise ValueError(f"{len(x)} documents and {len(z)} labels for a {valid_labels.shape} label matrix")
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    depth = min(len(z), depth_with_filter(k, valid_filter))
    results: dict[float, float] = {}
    for alpha in alphas:
        ranking = retrieve(x, alpha * w + (1.0 - alpha) * z, depth)
        if valid_filter is not None:
            ranking = remove_pairs(ranking, valid_filter)
        metrics = compute_metrics(ranking, valid_labels, range(1, k + 1))
        if metric not in metrics:
            raise ValueError(f"unknown fusion metric {metric!r}; choose one of {', '.join(metrics)}")
        results[alpha] = metrics[metric]
        log.debug("fusion alpha %.3g: %s = %.2f", alpha, metric, metrics[metric])
    best = max(alphas, key=lambda a: (results[a], -a))
    return best, results
