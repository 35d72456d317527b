"""The ranking stage on the pipeline (``ranking/``), for every recipe with a ``ranker`` section (``configs/base.yaml``
gives every recipe one; ``ranker: null`` turns it off): before the fit, the lexical channel is fitted on the
training documents, and each validation of the fit scores the fused ranking, so the epoch kept is the one whose
served ranking is best; after the fit, the fusion is fitted on the validation documents' candidates and the
model's default ranking chosen (the fused one, unless a channel alone does better on validation); then the
lexical channel and the labels' priors are refitted on the training and validation documents together
(``ranker.refit``). The refit depends on neither the network nor the fusion, so where the first fit took
``BACKGROUND_REFIT_S`` or more it starts before the training, in a child process that works beside it
(:class:`xdex.ranking.background.BackgroundFit`), and the after-fit stage collects it.

Every input of the fusion is honest: the network and the lexical model are fitted without the validation
documents, so their scores on them look like their scores on new texts. The validation figures it records are
cross-fitted (fusion fitted on one half of the validation documents, scored on the other, and the other way
round), so they estimate the served ranking's quality; the fusion served is then fitted on all of them. Only
then, when every choice is made, does the lexical channel see the validation documents: refitted on them too,
it has up to a fifth more documents to learn from (on held-out training documents of foldoc-links that lifted
the fused P@1 by 1.3 points on average; docs/benchmarks.md), and its scores keep the scale the fusion was
fitted on.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from xdex.jsonfile import read_json, write_json
from xdex.methods.plugin import Plugin, Run, Validation, register
from xdex.methods.run import ranking_metrics, validation_metrics
from xdex.methods.schema import RankerConfig, RecipeConfig
from xdex.metrics.propensity import inverse_propensity
from xdex.metrics.ranking import PAD, Ranking, positive_csr
from xdex.ranking.background import BackgroundFit
from xdex.ranking.encoder_channel import EncoderChannel, sentence_encoder
from xdex.ranking.fusion import FEATURES, FORMS, Candidates, LogisticFusion, label_prior
from xdex.ranking.lexical import LexicalConfig, LexicalModel, fit_choosing_features
from xdex.ranking.ranker import Ranker, top_k
from xdex.train.distributed import is_main

log = logging.getLogger(__name__)

LEXICAL_DIR = "lexical"  # the lexical channel of an unfinished run, in its training folder
LEXICAL_CHOICE = "lexical_features.json"  # beside it: the feature sets tried on validation, for meta.json
BACKGROUND_REFIT_S = 10.0  # a first fit at least this long has its refit run beside the training (a process start
# and its imports take about 2 s of the other core)


def check_ranker(config: RecipeConfig) -> None:
    """Refuse shortlist sizes and lexical settings the stage cannot fit with, before anything trains."""
    section = config.section("ranker")
    sizes = (section.dense_candidates, section.lexical_candidates, section.mention_candidates)
    if min(sizes) < 0 or section.lexical_beam < 0:
        raise ValueError("ranker.dense_candidates, ranker.lexical_candidates, ranker.mention_candidates and "
                         "ranker.lexical_beam must be >= 0")
    if sum(sizes) == 0:
        raise ValueError("ranker.dense_candidates, ranker.lexical_candidates and ranker.mention_candidates are all 0: "
                         "no candidates to rank (set ranker: null to train without the ranking stage)")
    if section.fusion not in FORMS:
        raise ValueError(f"ranker.fusion must be one of {', '.join(FORMS)}, not {section.fusion!r}")
    if not section.fusion_c > 0:
        raise ValueError(f"ranker.fusion_c must be > 0, not {section.fusion_c}")
    if section.encoder is not None:
        sentence_encoder(section.encoder)
        if section.encoder_candidates < 0:
            raise ValueError("ranker.encoder_candidates must be >= 0")
    try:
        LexicalConfig.from_dict(section.lexical)
    except (TypeError, ValueError) as e:
        raise ValueError(f"ranker.lexical: {e}") from None


def prepare_ranker(run: Run) -> None:
    """The before-fit stage: fit the lexical channel (it does not depend on the network) and have every validation
    of the fit score the ranking the model will serve, so the epoch is chosen on it (:func:`validation_scorer`)."""
    config = run.config.section("ranker")
    assert config is not None  # the plug-in is active
    valid = run.validation
    if not is_main() or valid is None:  # rank 0 alone validates and writes the model
        return
    folder = run.training_folder() / LEXICAL_DIR  # a resumed run goes on with the lexical model it fitted
    choice = run.training_folder() / LEXICAL_CHOICE
    if run.resume and (folder / "meta.json").is_file():
        lexical = LexicalModel.load(folder)
        log.info("lexical channel read from %s", folder)
        if choice.is_file():  # and records the choice it made
            run.meta["lexical_features"] = read_json(choice)
    else:
        lexical_config = LexicalConfig.from_dict({"seed": run.config.trainer.seed, **config.lexical})
        figures: dict[str, dict[str, float]] = {}

        def rank(model: LexicalModel) -> tuple[float, ...]:  # the feature sets' lexical rankings of validation
            figures["+".join(model.blocks)] = lexical_figures(model, valid, run.config.data.eval_ks)
            return rank_key(figures["+".join(model.blocks)], run.config.trainer.select_metric)

        lexical, tried = fit_choosing_features(lexical_config, run.query_texts, run.train_labels, rank)
        if tried:
            run.meta["lexical_features"] = {"kept": "+".join(lexical.blocks), "validation": figures}
            write_json(choice, run.meta["lexical_features"])
        lexical.save(folder)
    run.checkpoints += [folder, choice]  # removed once the model directory (ranker/lexical) is written
    if config.refit and lexical.training.get("seconds", 0.0) >= BACKGROUND_REFIT_S:
        texts, labels = refit_documents(run)
        try:
            run.shared["lexical_refit"] = BackgroundFit(lexical.refit_config(), texts, labels)
            log.info("the lexical channel is refitted on %d training and validation documents in a background "
                     "process while the network trains", len(texts))
        except (OSError, ValueError) as e:  # e.g. no room in the temporary folder: refitted after the training
            log.warning("the lexical refit could not start in a background process (%s); it runs after the training",
                        e)
    encoder = None  # the text channels read the label texts the model will hold (data.label_text), as served
    if config.encoder is not None:
        encoder = EncoderChannel.fit(config.encoder, run.label_texts)
        log.info("encoder channel: %s, %d label texts embedded", config.encoder, encoder.n_labels)
    ranker = Ranker(lexical, label_prior(run.train_labels), dense_candidates=config.dense_candidates,
                    lexical_candidates=config.lexical_candidates, mention_candidates=config.mention_candidates,
                    lexical_beam=config.lexical_beam,
                    encoder=encoder, encoder_candidates=config.encoder_candidates if encoder is not None else 0)
    run.shared["ranker"] = ranker
    run.shared["channels"] = ranker.text_channels(run.label_texts)
    if config.select_epoch:
        run.validation_scorer = validation_scorer(run, ranker)


def validation_scorer(run: Run, ranker: Ranker):
    """Validation metrics of the fused ranking (cross-fitted) from validation query vectors ``q`` and label
    vectors ``z``; the network's own ranking's metrics are added as ``dense_<metric>``."""
    config, valid = run.config.section("ranker"), run.validation
    assert valid is not None
    lexical_shortlist = ranker.lexical_shortlist(valid.texts)  # the same at every epoch: computed once
    channels = run.shared.get("channels")
    evidence = channels.read(valid.texts) if channels is not None else None  # so is what the text channels see
    inv_propensity = inverse_propensity(run.train_labels)

    def score(q: np.ndarray, z: np.ndarray) -> dict[str, float]:
        heads = run.net.head_scores if run.net is not None else None  # the network being trained
        found = ranker.candidates(valid.texts, q, z, lambda ids: z[ids], lexical=lexical_shortlist, heads=heads,
                                  channels=channels, evidence=evidence)
        try:
            figures = cross_fitted(found, valid, run.config.data.eval_ks, config.fusion_c, run.config.trainer.seed,
                                   inv_propensity, config.fusion)
        except ValueError as e:  # no relevant label among the candidates of one half: the network's own figures
            log.warning("the fused ranking is not scored at this epoch: %s", e)
            figures = {"fused": validation_metrics(q, z, valid, run.config.data.eval_ks), "dense": {}}
        return {**figures["fused"], **{f"dense_{name}": value for name, value in figures["dense"].items()}}

    return score


def fit_ranker(run: Run) -> None:
    """The after-fit stage: ``run.ranker`` from the trained ``run.net`` (module docstring)."""
    config = run.config.section("ranker")
    assert config is not None and run.net is not None  # the plug-in is active; the network is trained
    ranker, valid = run.shared.get("ranker"), run.validation
    if ranker is None or valid is None:
        if is_main() and valid is None:
            log.warning("no validation documents (data.validation_size is 0): the ranking stage is not fitted")
        return
    _, _, label_tokens = run.inputs()
    batch = run.config.sampling.embed_batch_size
    z = run.net.label_vectors(label_tokens, batch).numpy()  # what the model directory's index will hold
    found = ranker.candidates(valid.texts, run.net.text_vectors(valid.texts, batch).numpy(), z, lambda ids: z[ids],
                              heads=run.net.head_scores, channels=run.shared.get("channels"))
    try:
        figures = cross_fitted(found, valid, run.config.data.eval_ks, config.fusion_c, run.config.trainer.seed,
                               inverse_propensity(run.train_labels), config.fusion)
        ranker.fusion = LogisticFusion.fit(scored_only(found, valid.pairs), valid.labels, config.fusion_c,
                                           config.fusion)
    except ValueError as e:  # e.g. no validation document has a relevant label among its candidates
        log.warning("the ranking stage is left out of the model: %s", e)
        if "lexical_refit" in run.shared:
            run.shared.pop("lexical_refit").cancel()
        return
    run.meta["ranker"] = figures
    ranker.served = served(figures, run.config.trainer.select_metric, len(valid.texts))
    log.info("the model serves its %s ranking (chosen on validation by %s)", ranker.served,
             run.config.trainer.select_metric)
    if config.refit:
        texts, labels = refit_documents(run)
        refitted = collected_refit(run)
        ranker.lexical = refitted if refitted is not None else ranker.lexical.refit(texts, labels)
        ranker.prior = label_prior(labels)
        log.info("lexical channel and label priors refitted on %d training and validation documents", len(texts))
    run.ranker = ranker


def collected_refit(run: Run) -> LexicalModel | None:
    """The background refit's model, if one was started and succeeded; a failure is logged and the caller refits
    inline, so the training still ends with its model."""
    background = run.shared.pop("lexical_refit", None)
    if background is None:
        return None
    try:
        return background.result()
    except (RuntimeError, OSError, ValueError) as e:
        log.warning("%s; the lexical channel is refitted here instead", e)
        return None


def refit_documents(run: Run) -> tuple[list[str], sp.csr_matrix]:
    """What the lexical channel and the label priors are refitted on: every labelled training document, the
    validation documents with all their labels."""
    assert run.dataset is not None  # a pipeline run has its dataset
    rows = np.flatnonzero(np.diff(run.dataset.train.labels.indptr) > 0)
    return [run.dataset.train.texts[i] for i in rows], run.dataset.train.labels[rows]


def scored_only(found: Candidates, pairs: sp.csr_matrix | None) -> Candidates:
    """``found`` without its (text, label) filter ``pairs`` (a same-universe document and the label that is itself):
    they are removed from every ranking before it is scored, so the fusion is not fitted on them (it would learn
    that a text naming a label at its start is evidence against the label)."""
    if pairs is None:
        return found
    mask = found.mask
    rows = np.broadcast_to(np.arange(len(found.ids))[:, None], found.ids.shape)
    hit = np.asarray(positive_csr(pairs)[rows[mask], found.ids[mask]]).ravel() > 0
    ids = found.ids.copy()
    ids.flat[np.flatnonzero(mask)[hit]] = PAD
    return Candidates(ids, found.features)


TIE_BREAKERS = ("P@3", "P@5", "nDCG@5")  # compared, in turn, where the select metric ties


def rank_key(figures: dict[str, float], metric: str) -> tuple[float, ...]:
    """Validation ``figures`` as a key to compare rankings by: ``metric``, then :data:`TIE_BREAKERS` in turn (a few
    hundred validation documents tie often)."""
    return tuple(figures.get(m, float("-inf")) for m in (metric, *TIE_BREAKERS))


def lexical_figures(model: LexicalModel, valid: Validation, ks: list[int]) -> dict[str, float]:
    """Validation metrics of ``model``'s ranking alone (filter pairs removed, as every ranking is scored)."""
    return {k: round(v, 2) for k, v in ranking_metrics(Ranking(*model.predict(valid.texts, valid.depth)), valid,
                                                        ks).items()}


def served(figures: dict[str, dict], metric: str, documents: int = 0) -> str:
    """The ranking a model serves: the fused one, unless the better channel alone (the network's own on a tie,
    compared by :func:`rank_key`) beats it on ``metric`` over the ``documents`` validation documents by more than
    :func:`sampling_noise`; with no count, the fused one only where it beats each channel by :func:`rank_key`.

    The fused ranking holds the channels' evidence, and a near-tie with one of them is noise: on debian-debtags the
    same model's fused P@1 moved by 0.6 between two cross-fitted scorings, and serving the lexical channel there,
    0.3 ahead on validation, gave up 3 PSP@5 for no P@1 (docs/benchmarks.md, "Reading the quality table")."""
    score = {name: rank_key(figures[name], metric) for name in ("fused", "dense", "lexical")}
    channel = "lexical" if score["lexical"] > score["dense"] else "dense"
    fused = figures["fused"].get(metric, float("-inf"))
    noise = sampling_noise(fused, documents)
    if noise is None:
        return "fused" if score["fused"] > score[channel] else channel
    return channel if figures[channel].get(metric, float("-inf")) > fused + noise else "fused"


def sampling_noise(value: float, documents: int) -> float | None:
    """One standard error of a validation metric of ``value`` percent over ``documents`` documents, at most
    ``100 · sqrt(p (1 − p) / n)`` with p = value / 100 for any mean of per-document values in [0, 1] (P@k, nDCG@k,
    R@k); None without documents or for a value outside [0, 100]."""
    if documents < 1 or not 0.0 <= value <= 100.0:
        return None
    p = value / 100.0
    return 100.0 * float(np.sqrt(p * (1.0 - p) / documents))


def cross_fitted(found: Candidates, valid: Validation, ks: list[int], c: float, seed: int,
                 inv_propensity: np.ndarray | None = None, form: str = "trees") -> dict[str, dict]:
    """Validation metrics of the fused ranking (two-fold cross-fitted), the dense shortlist and the lexical one
    (PSP@k too, given the labels' inverse propensities)."""
    n_known = int(found.ids.max(initial=0)) + 1  # every validation candidate is a trained label
    rng = np.random.default_rng([seed, 23])
    half = rng.permutation(len(found.ids)) < len(found.ids) // 2
    scores = np.full(found.ids.shape, -np.inf, np.float32)
    fitted = scored_only(found, valid.pairs)
    for part in (half, ~half):
        fold = Candidates(fitted.ids[~part], fitted.features[~part])
        if len(fold.ids) == 0:
            continue
        fusion = LogisticFusion.fit(fold, valid.labels[np.flatnonzero(~part)], c, form)
        scores[part] = fusion.score(Candidates(found.ids[part], found.features[part]), n_known)
    column = {name: i for i, name in enumerate(FEATURES)}
    dense = found.features[..., column["dense"]] + 1e-3 * found.features[..., column["dense_rrank"]]  # rank: ties
    lexical = np.where(found.features[..., column["in_lexical"]] > 0, found.features[..., column["lexical"]], -np.inf)

    def measure(values: np.ndarray) -> dict[str, float]:
        return {k: round(v, 2) for k, v in ranking_metrics(top_k(found, values, valid.depth), valid, ks,
                                                            inv_propensity).items()}

    figures = {"fused": measure(scores), "dense": measure(dense), "lexical": measure(lexical)}
    log.info("ranking stage on validation (cross-fitted): %s",
             "; ".join(f"{name} P@1 {m.get('P@1', float('nan')):.2f}" for name, m in figures.items()))
    return figures


register(Plugin("ranker", RankerConfig, check=check_ranker, before_fit=(prepare_ranker,), after_fit=(fit_ranker,)))
