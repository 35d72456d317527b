"""DEXA: auxiliary vectors for label clusters (Module I) and per-label classifiers (Module II).

Module I (DEXA Sec. 3, Eq. 5) trains the encoder with augmented label embeddings N(E(z_l) + a_{C(l)}),
one auxiliary vector per cluster of labels; any recipe takes an ``aux`` section (NGAME's triplet,
DEXML's or UniDEC's losses alike), and the vectors are dropped once the encoder is trained. The label
embeddings it leaves are ẑ_l (DEXA Sec. 4 keeps them) unless E(z_l), the encoder's own, rank the
validation documents better (``aux.label_embeddings``): where the cluster vectors fit the training
documents more than they help unseen ones. Module II (Eq. 6) freezes the encoder, starts one classifier
per label from that embedding and trains the classifiers on hard negatives from the index over it. At
inference the classifier and the label-embedding scores are fused: score(x, l) = α·w_lᵀE(x) + (1 − α)·ẑ_lᵀE(x),
with α chosen on the validation split unless given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from xdex.cluster.label_clusters import cluster_labels, clusters_for_ratio
from xdex.methods.classifiers import choose_fusion, train_classifier_table
from xdex.methods.objective import DualEncoderObjective
from xdex.methods.plugin import Plugin, Run, register
from xdex.methods.schema import AuxConfig, ClassifierConfig, MiningIndexConfig, RecipeConfig
from xdex.modules.auxiliary import AuxiliaryVectors
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.fusion import ClassifierFusionNet
from xdex.modules.unidec import UniDECNet
from xdex.text.tokens import TokenizedTexts
from xdex.train import TrainerConfig
from xdex.train.trainer import CHECKPOINT

log = logging.getLogger(__name__)

CLASSIFIERS = "classifiers"  # the training sub-folder of Module II


def num_clusters(config: AuxConfig, n_labels: int) -> int:
    return config.clusters if config.clusters is not None else clusters_for_ratio(n_labels, config.labels_per_cluster)


def head_threshold(threshold: int, train_labels: sp.csr_matrix, k: int) -> int:
    """The head-label threshold, raised when more than half of the K vectors would go to head labels, so
    that the other labels keep at least K/2 clusters (e.g. 560 labels, K = 64, 179 labels with >= 50 points)."""
    if threshold <= 0:
        return threshold
    positives = train_labels != 0  # type: ignore[comparison-overlap]  # scipy-stubs lack the sparse !=
    counts = np.sort(np.asarray(positives.sum(axis=0)).ravel())[::-1]  # type: ignore[attr-defined]  # as above
    if k < 2 or (counts >= threshold).sum() <= k // 2:
        return threshold if k >= 2 else 0
    raised = int(counts[k // 2]) + 1  # only the K/2 most popular labels (and fewer on ties) stay heads
    log.warning("%d labels have >= %d training points, more than half of the %d auxiliary vectors: head "
                "labels need >= %d points here", int((counts >= threshold).sum()), threshold, k, raised)
    return raised


def build_aux(
    config: AuxConfig, net: DualEncoder | UniDECNet, queries: TokenizedTexts, labels: TokenizedTexts,
    train_labels: sp.csr_matrix, embed_batch_size: int, seed: int,
) -> tuple[AuxiliaryVectors, Callable[[np.ndarray], np.ndarray]]:
    """Cluster the labels with the initial network's embeddings and make the (zero) auxiliary vectors.

    Returns the vectors and the re-clustering function used for dynamic clusters.
    """
    k = num_clusters(config, train_labels.shape[1])
    threshold = head_threshold(config.head_threshold, train_labels, k)
    docs = net.embed(queries, embed_batch_size).numpy() if config.clustering == "centroids" else None

    def assign(z: np.ndarray) -> np.ndarray:
        return cluster_labels(z, train_labels, k, threshold, config.clustering, docs, seed)

    assignment = assign(net.embed(labels, embed_batch_size).numpy())
    aux = AuxiliaryVectors(assignment, net.dim, num_clusters=k)
    log.info("auxiliary vectors: %d clusters for %d labels", aux.num_clusters, train_labels.shape[1])
    return aux, assign


ValidationSet = tuple[TokenizedTexts, sp.csr_matrix, sp.csr_matrix | None]  # texts, labels, filter pairs


def validation_set(run: Run) -> ValidationSet | None:
    """The run's validation documents as Module I's and Module II's choices read them (None without any)."""
    valid = run.validation
    return (valid.tokens, valid.labels, valid.pairs) if valid is not None else None


def module_i_labels(net: DualEncoder, aux: AuxiliaryVectors, labels: TokenizedTexts, choice: str,
                    validation: ValidationSet | None, embed_batch_size: int, metric: str = "P@1") -> torch.Tensor:
    """The label embeddings Module I leaves (``aux.label_embeddings``): ẑ_l = N(E(z_l) + a_{C(l)}) (``augmented``;
    DEXA Sec. 4 preserves them), E(z_l) (``encoder``), or (``validation``) E(z_l) where it ranks the validation
    documents better than ẑ_l by ``metric``, else ẑ_l (also without validation documents)."""
    z = net.embed(labels, embed_batch_size)
    if choice == "encoder":
        return z
    z_hat = aux.augment_all(z)
    if choice == "augmented" or validation is None:
        return z_hat
    tokens, y_valid, pairs = validation
    x = net.embed(tokens, embed_batch_size).numpy()
    _, by_side = choose_fusion(x, z_hat.numpy(), z.numpy(), y_valid, pairs, grid=(0.0, 1.0), metric=metric)
    keep_encoder = by_side[1.0] > by_side[0.0]
    log.info("label embeddings after Module I: %s (validation %s: %.2f with the auxiliary vectors, %.2f without)",
             "E(z_l), without the auxiliary vectors" if keep_encoder else "ẑ_l = N(E(z_l) + a_C(l))", metric,
             by_side[0.0], by_side[1.0])
    return z if keep_encoder else z_hat


def train_classifiers(
    net: DualEncoder,
    aux: AuxiliaryVectors | None,
    queries: TokenizedTexts,
    labels: TokenizedTexts,
    train_labels: sp.csr_matrix,
    config: ClassifierConfig,
    trainer_config: TrainerConfig,
    workdir: Path,
    embed_batch_size: int,
    validation: ValidationSet | None = None,
    resume: bool = False,
    label_embeddings: str = "validation",
    mining: MiningIndexConfig | None = None,
) -> ClassifierFusionNet:
    """Module II: classifiers w_l started from the label embeddings Module I leaves (:func:`module_i_labels`; ẑ_l
    in DEXA) and trained on hard negatives (Eq. 6) searched with the ``mining`` index (None: exact), then fused with
    those embeddings: α·w_l + (1 − α)·ẑ_l."""
    if not isinstance(net, DualEncoder):
        raise ValueError("Module II classifiers need a plain dual encoder (UniDEC has classifiers of its own)")
    x = net.embed(queries, embed_batch_size)
    z_hat = (net.embed(labels, embed_batch_size) if aux is None else
             module_i_labels(net, aux, labels, label_embeddings, validation, embed_batch_size,
                             trainer_config.select_metric))
    w = train_classifier_table(x, z_hat, train_labels, config, trainer_config, workdir, resume, mining)
    alpha = config.fusion
    if alpha is None and validation is not None:
        tokens, y_valid, pairs = validation
        alpha, by_alpha = choose_fusion(net.embed(tokens, embed_batch_size).numpy(), z_hat.numpy(), w.numpy(),
                                        y_valid, pairs)
        log.info("fusion weight α = %.1f chosen on validation (%s)", alpha,
                 ", ".join(f"{a:.1f}: {m:.2f}" for a, m in by_alpha.items()))
    elif alpha is None:
        alpha = 0.5
    return ClassifierFusionNet(net.encoder, z_hat, w, float(alpha))  # Module I's ẑ is kept (DEXA Sec. 4)


def attach_aux(run: Run) -> None:
    """Module I, before the fit: cluster the labels and put the cluster vectors on the objective's label side."""
    _, queries, labels = run.inputs()
    config = run.config
    assert config.aux is not None and run.net is not None  # the plug-in is active; the network is built
    if not isinstance(run.objective, DualEncoderObjective) or not isinstance(run.net, DualEncoder | UniDECNet):
        raise ValueError("DEXA's auxiliary vectors (the aux section) need a dual encoder or UniDEC heads")
    aux, recluster = build_aux(config.aux, run.net, queries, labels, run.train_labels,
                               config.sampling.embed_batch_size, config.trainer.seed)
    run.objective.attach_aux(aux, recluster, config.aux.recluster_every)
    if type(run.net) is DualEncoder:  # validation ranks the labels by ẑ, as the trained model will
        net, batch = run.net, config.sampling.embed_batch_size
        run.validation_labels = lambda: aux.augment_all(net.label_vectors(labels, batch)).numpy()


def keep_module_i_labels(run: Run) -> None:
    """After the fit, without Module II: the model keeps the label embeddings Module I leaves
    (:func:`module_i_labels`: ẑ_l = N(E(z_l) + a_{C(l)}) as DEXA Sec. 4 has it, unless E(z_l) ranks the validation
    documents better), stored as Module II with no epochs would leave them (w = ẑ). UniDEC heads keep their own
    label vectors."""
    _, _, labels = run.inputs()
    if run.config.classifiers is not None or type(run.net) is not DualEncoder:
        return
    assert isinstance(run.objective, DualEncoderObjective) and run.objective.aux is not None  # attach_aux's
    assert run.config.aux is not None  # the plug-in is active
    z_hat = module_i_labels(run.net, run.objective.aux, labels, run.config.aux.label_embeddings, validation_set(run),
                            run.config.sampling.embed_batch_size, run.config.trainer.select_metric)
    run.net = ClassifierFusionNet(run.net.encoder, z_hat, z_hat, alpha=0.0, search="de")


def aux_lr(config: RecipeConfig) -> dict[str, float]:
    """The auxiliary vectors' own learning rate (``aux.lr``; unset: the sparse rate of the optimiser)."""
    return {} if config.aux is None or config.aux.lr is None else {"aux.": config.aux.lr}


def module_ii(run: Run) -> None:
    """Module II, after the fit: per-label classifiers on the frozen encoder, fused with the label embeddings."""
    _, queries, labels = run.inputs()
    config = run.config
    assert config.classifiers is not None  # the plug-in is active
    if not isinstance(run.net, DualEncoder) or not isinstance(run.objective, DualEncoderObjective):
        raise ValueError("Module II classifiers need a plain dual encoder (UniDEC has classifiers of its own)")
    workdir = run.training_folder() / CLASSIFIERS
    run.net = train_classifiers(run.net, run.objective.aux, queries, labels, run.train_labels, config.classifiers,
                                config.trainer, workdir, config.sampling.embed_batch_size, validation_set(run),
                                run.resume, mining=config.sampling.mining_index,
                                # read only with auxiliary vectors (DEXA); NGAME's Module II starts from E(z_l)
                                label_embeddings=config.aux.label_embeddings if config.aux is not None else "encoder")
    run.checkpoints.append(workdir / CHECKPOINT)


def check_classifiers(config: RecipeConfig) -> None:
    if config.heads is not None:
        raise ValueError("a `classifiers` section (DEXA Module II) needs a plain dual encoder; this recipe has "
                         "UniDEC heads, whose classifiers train with the encoder (remove one of the two sections)")


register(Plugin("aux", AuxConfig, lr_groups=aux_lr, before_fit=(attach_aux,), after_fit=(keep_module_i_labels,)))
register(Plugin("classifiers", ClassifierConfig, check=check_classifiers, after_fit=(module_ii,)))
