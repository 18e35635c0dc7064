"""Batch pretraining of GDP's policy over a corpus of graphs, choosing the checkpoint on
validation graphs (Zhou et al., section 4.3, "GDP-batch" used as pre-training).

:func:`pretrain` trains one policy on every training problem of a corpus
(:mod:`tf_autoplace.zoo.corpora.gdp`) in two phases, each followed by a choice of checkpoint:

1. with an :class:`Imitation`, the policy first imitates Post's searches on the training
   problems (:mod:`tf_autoplace.placers.gdp.imitation`), and keeps the epoch that scored best;
2. then PPO, ``graphs_per_step`` graphs per update (:func:`tf_autoplace.placers.gdp.train.train`,
   the paper's batch training).

The score is zero-shot on the validation problems: each one's best of the greedy placement
and a few sampled ones, against the best fast heuristic's, as the ratio of their
memory-penalised runtimes R (below 1: the policy's own placement is faster). PPO is scored
every ``select_every`` updates and before the first (the policy as phase 1 left it) and after
the last; the policy ends with the weights of the best mean ratio, so which checkpoint ships is
decided without the held-out graphs. Last, the weight the policy gives the hint is calibrated
on the same validation graphs (:func:`calibrate_keep`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.placers.gdp import imitation as gdp_imitation
from tf_autoplace.placers.gdp import train as gdp_train
from tf_autoplace.placers.gdp.features import FeatureConfig, GdpGraph, graph_features
from tf_autoplace.placers.gdp.policy import GdpPolicy, greedy, sample
from tf_autoplace.placers.post import search as post_search


def heuristic_score(problem: PlacementProblem, evaluator: Evaluator) -> float:
    """R of the best fast heuristic's placement."""
    devices = BestHeuristicPlacer().propose(problem)
    return float(evaluator.evaluate(devices[None]).scores[0])


@dataclasses.dataclass
class Scored:
    """Problems a policy is scored on zero-shot, with what it is compared to."""

    names: list[str]
    graphs: list[GdpGraph]
    evaluators: list[Evaluator]
    reference: np.ndarray  # [P] the best heuristic's R per problem
    samples: int = 16

    @classmethod
    def build(cls, names: Sequence[str], problems: Sequence[PlacementProblem],
              features: FeatureConfig, memory_penalty: float, *, hint: bool) -> "Scored":
        evaluators = [Evaluator(p, memory_penalty=memory_penalty) for p in problems]
        return cls(list(names), [graph_features(p, features, hint=hint) for p in problems],
                   evaluators,
                   np.array([heuristic_score(p, e) for p, e in zip(problems, evaluators)]))

    def ratios(self, policy: GdpPolicy) -> np.ndarray:
        """[P] per problem: the best R of the greedy placement and ``samples`` drawn ones (from
        ``default_rng([0, problem index])``), over the best heuristic's R."""
        best = []
        for i, (graph, evaluator) in enumerate(zip(self.graphs, self.evaluators)):
            logits = policy.graph_logits(graph)
            actions = np.concatenate([greedy(logits)[None],
                                      sample(logits, np.random.default_rng([0, i]),
                                             self.samples)])
            best.append(evaluator.evaluate(graph.op_placement(actions)).scores.min())
        return np.array(best) / self.reference


@dataclasses.dataclass(frozen=True)
class Imitation:
    """Phase 1 of :func:`pretrain`: Post's search (``post``) on every training problem, seeded
    from ``seed``, then ``clone.epochs`` epochs of imitation, scored every ``select_every``."""

    post: post_search.PostConfig = post_search.PostConfig()
    clone: gdp_imitation.CloneConfig = gdp_imitation.CloneConfig()
    select_every: int = 5
    seed: int = 0


def imitate(policy: GdpPolicy, graphs: Sequence[GdpGraph],
            problems: Sequence[PlacementProblem], validation: Scored, imitation: Imitation, *,
            progress: bool = False) -> dict:
    """Phase 1 of :func:`pretrain` on ``policy`` in place: it ends with the weights of the
    epoch (0: as it started) whose mean validation ratio is lowest. Returns what the manifest
    records of it."""
    t = time.perf_counter()
    targets = gdp_imitation.search_targets(problems, graphs, imitation.post,
                                           seed=imitation.seed, progress=progress)
    search_seconds = time.perf_counter() - t
    curve: list[tuple[int, float]] = []
    best = {"ratio": np.inf}

    def select(epoch: int) -> None:
        if epoch % imitation.select_every and epoch != imitation.clone.epochs:
            return
        ratio = float(validation.ratios(policy).mean())
        curve.append((epoch, ratio))
        if ratio < best["ratio"]:
            best.update(ratio=ratio, epoch=epoch, weights=policy.get_weights())

    select(0)
    t = time.perf_counter()
    losses = gdp_imitation.clone(policy, graphs, targets, imitation.clone, on_epoch=select,
                                 progress=progress)
    policy.set_weights(best["weights"])
    return dict(search_seconds=search_seconds, clone_seconds=time.perf_counter() - t,
                post_config=repr(imitation.post), clone_config=repr(imitation.clone),
                target_ratio_to_hint=float(np.mean([x.score / x.hint_score for x in targets])),
                groups_moved=float(np.mean([x.moved for x in targets])), losses=losses,
                selection_curve=curve, chosen_epoch=best["epoch"],
                chosen_mean_ratio=best["ratio"])


def pretrain(policy: GdpPolicy, train_names: Sequence[str],
             train_problems: Sequence[PlacementProblem], validation: Scored,
             config: gdp_train.PPOConfig, features: FeatureConfig, *, select_every: int,
             imitation: Imitation | None = None, keep_offsets: Sequence[float] = (),
             progress: bool = False) -> dict:
    """Train ``policy`` in place (module doc); returns what the manifest records: seconds,
    updates, samples, the selection curve ``(step, mean validation ratio)``, the chosen step,
    each training problem's best R against the best heuristic's, with ``imitation`` phase 1's
    figures (:func:`imitate`), with ``keep_offsets`` the calibration's (:func:`calibrate_keep`),
    and the final policy's per-problem validation ratios."""
    t = time.perf_counter()
    graphs = [graph_features(p, features, hint=policy.config["hint"]) for p in train_problems]
    evaluators = [Evaluator(p, memory_penalty=config.memory_penalty) for p in train_problems]
    reference = [heuristic_score(p, e) for p, e in zip(train_problems, evaluators)]
    setup_seconds = time.perf_counter() - t
    phase1 = None if imitation is None else imitate(policy, graphs, train_problems, validation,
                                                    imitation, progress=progress)
    curve: list[tuple[int, float]] = []
    best = {"ratio": np.inf}

    def select(state: gdp_train.TrainState) -> None:
        if state.step % select_every and state.step != config.steps:
            return
        ratios = validation.ratios(policy)
        curve.append((state.step, float(ratios.mean())))
        if ratios.mean() < best["ratio"]:
            best.update(ratio=float(ratios.mean()), step=state.step, ratios=ratios,
                        weights=policy.get_weights())

    select(gdp_train.TrainState())
    t = time.perf_counter()
    state = gdp_train.train(policy, graphs, evaluators, config, on_step=select,
                            progress=progress)
    seconds = time.perf_counter() - t
    policy.set_weights(best["weights"])
    final = best["ratios"]
    calibration = None
    if keep_offsets and policy.keep is not None:
        calibration = calibrate_keep(policy, validation, keep_offsets)
        final = calibration.pop("ratios")
    return dict(
        setup_seconds=setup_seconds, train_seconds=seconds, steps=state.step,
        samples=state.samples, selection_curve=curve, chosen_step=best["step"],
        chosen_mean_ratio=best["ratio"],
        validation={n: float(r) for n, r in zip(validation.names, final)},
        final_mean_ratio=float(np.mean(final)),
        train_best_ratio={train_names[g]: state.best_scores[g] / reference[g]
                          for g in sorted(state.best_scores)},
        imitation=phase1, keep_calibration=calibration)


def calibrate_keep(policy: GdpPolicy, validation: Scored, offsets: Sequence[float]) -> dict:
    """Add to the policy's ``keep`` (the hint's logit weight) the offset among ``offsets``
    whose mean validation ratio is lowest (ties: the first listed), and return the curve
    ``(offset, mean ratio)``, the offset chosen and its per-problem ``ratios``.

    Imitation leaves a policy unsure of many groups (which groups a search moves is only
    partly predictable from the features), so its samples move a fifth of the groups at once
    and its greedy placement takes moves it is barely sure of. A larger ``keep`` is a
    confidence threshold: the greedy placement keeps only the moves the network is sure of,
    and samples stay near it, a local search around the learned placement, which is what
    fine-tuning needs. One scalar, chosen on the validation graphs."""
    start = float(policy.keep.numpy())
    curve, best = [], None
    for offset in offsets:
        policy.keep.assign(start + offset)
        ratios = validation.ratios(policy)
        curve.append((float(offset), float(ratios.mean())))
        if best is None or ratios.mean() < best[1].mean():
            best = (float(offset), ratios)
    policy.keep.assign(start + best[0])
    return dict(curve=curve, offset=best[0], keep=start + best[0], ratios=best[1])
