"""UniDEC / DePSL: dual-encoder and classifier heads trained together over one label pool.

UniDEC Algorithm 1: per batch the pool L_B (β sampled positives + η hard negatives per query, every
in-pool positive masked) is scored twice over one encoder pass,

    S_D = Φ_D(x)·Φ_D(z)ᵀ (unit vectors)      and      S_C = Φ_C(x)·Ψᵀ (not normalised),

each with the configured loss (``symmetric`` for λ_D / λ_C mixes of q2l and l2q), and

    L = λ · L_D + (1 − λ) · L_C              (Sec. 3.2; DePSL / SupConDE: L = L_D, no g2, no Ψ).

Options: an auxiliary OvA BCE term on S_C (second paper, Table 3) and "POS-CLF" (Table 6/7): β_E
extra sampled positives added to the classifier's pool only. Hard negatives and query clusters come
from Φ_D, refreshed every τ epochs (:class:`DualEncoderObjective`).
"""

from __future__ import annotations

import logging
from typing import cast

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from xdex.losses import BCE, WeightedSum, build_loss
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.methods.plugin import Plugin, Run, register
from xdex.methods.schema import HeadsConfig, RecipeConfig
from xdex.modules.unidec import UniDECNet
from xdex.sampling import positives_mask, sample_positives
from xdex.text.tokens import TokenizedTexts
from xdex.train.distributed import encode_together

log = logging.getLogger(__name__)


class UniDECObjective(DualEncoderObjective):
    """Trainer objective for a :class:`UniDECNet` (see the module docstring)."""

    def __init__(
        self,
        net: UniDECNet,
        de_loss: nn.Module,
        queries: TokenizedTexts,
        labels: TokenizedTexts,
        train_labels: sp.csr_matrix,
        config: SamplingConfig,
        heads: HeadsConfig,
        clf_loss: nn.Module | None = None,
        seed: int = 0,
    ):
        """DEXA's auxiliary vectors join the DE label side through :meth:`attach_aux` (an ``aux`` section)."""
        super().__init__(net, de_loss, queries, labels, train_labels, config, seed=seed)
        if not 0.0 <= heads.de_weight <= 1.0:
            raise ValueError(f"heads.de_weight must be in [0, 1], got {heads.de_weight}")
        if heads.classifier != net.has_classifier:
            raise ValueError("heads.classifier does not match the network (classifiers present or not)")
        if heads.classifier and clf_loss is None:
            raise ValueError("a classifier loss is needed when the network has classifiers")
        if heads.extra_positives < 0 or heads.bce_weight < 0:
            raise ValueError("heads.extra_positives and heads.bce_weight must be >= 0")
        self.heads = heads
        self.clf_loss = clf_loss
        self.bce = BCE() if heads.bce_weight > 0 else None
        if clf_loss is not None:
            self.model["clf_loss"] = clf_loss
        lam = heads.de_weight if net.has_classifier else 1.0  # DePSL: the DE head's loss alone
        self.loss_terms = WeightedSum({"de": lam, "clf": 1.0 - lam, "bce": (1.0 - lam) * heads.bce_weight})

    @torch.no_grad()
    def init_classifiers(self) -> None:
        """Ψ_l ← Φ_C(z_l) (eval mode): every classifier starts where its label text points."""
        net = cast(UniDECNet, self.net)  # the network given to __init__
        if not net.has_classifier or self.heads.classifier_init != "labels":
            return
        phi = net.encoder.embed(self.labels, batch_size=self.cfg.embed_batch_size)
        was_training = net.training
        net.eval()
        try:
            assert net.classifier is not None  # net.has_classifier
            weight = net.classifier.weight
            weight.copy_(net.clf(phi.to(weight.device)).to(weight.dtype))
        finally:
            net.train(was_training)

    def loss(self, item: tuple[int, int, np.ndarray]) -> torch.Tensor:
        batch = self.make_batch(item)
        self.pool_stats.add(batch)
        net = cast(UniDECNet, self.net)  # the network given to __init__
        phi_q, phi_z = encode_together(net.encoder, [(self.queries, batch.query_ids), (self.labels, batch.label_ids)])
        de_scores = net.de(phi_q) @ self.label_side(batch.label_ids, net.de(phi_z)).T
        device = de_scores.device
        loss_de = self.loss_fn(de_scores, torch.from_numpy(batch.positives).to(device))
        if not net.has_classifier:
            return self.loss_terms(de=loss_de)
        pool, mask = batch.label_ids, batch.positives
        if self.heads.extra_positives:
            pool, mask = self.classifier_pool(item, batch.query_ids, batch.label_ids)
        clf_scores = net.clf(phi_q) @ net.classifiers(torch.from_numpy(pool).to(device)).T
        clf_mask = torch.from_numpy(mask).to(device)
        assert self.clf_loss is not None  # __init__ requires one when the network has classifiers
        terms = {"de": loss_de, "clf": self.clf_loss(clf_scores, clf_mask)}
        if self.bce is not None:
            terms["bce"] = self.bce(clf_scores, clf_mask)
        return self.loss_terms(**terms)

    def classifier_pool(
        self, item: tuple[int, int, np.ndarray], query_ids: np.ndarray, pool: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """POS-CLF (UniDEC Tables 6-7): the pool plus β_E more sampled positives per query, and its mask."""
        epoch, i, _ = item
        rng = np.random.default_rng([self.seed, epoch, i, 2])
        extra = sample_positives(self.y, query_ids, self.heads.extra_positives, rng)
        pool = np.union1d(pool, extra).astype(np.int64)
        return pool, positives_mask(self.y, query_ids, pool)


def build_unidec(run: Run) -> tuple[UniDECNet, UniDECObjective]:
    """The ``heads`` section's network (encoder + g1, and with ``heads.classifier`` g2 and Ψ) and objective."""
    encoder, queries, labels = run.inputs()
    config = run.config
    heads = config.heads
    assert heads is not None  # the plug-in is active
    loss = build_loss(**config.loss)
    n_labels = run.train_labels.shape[1] if heads.classifier else None
    net = UniDECNet(encoder, heads.dim, n_labels, heads.dropout, search=heads.search)
    clf_loss = build_loss(**(heads.classifier_loss or config.loss)) if heads.classifier else None
    objective = UniDECObjective(net, loss, queries, labels, run.train_labels, config.sampling, heads, clf_loss,
                                seed=config.trainer.seed)
    objective.init_classifiers()
    return net, objective


def check_unidec(config: RecipeConfig) -> None:
    if config.sampling.cache_negatives:
        raise ValueError("sampling.cache_negatives (embedding-cache negatives) needs a plain dual encoder, not heads")


register(Plugin("heads", HeadsConfig, check=check_unidec, build=build_unidec))
