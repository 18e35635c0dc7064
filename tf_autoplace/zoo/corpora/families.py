"""Placeto's training-graph families (Addanki et al. 2019, appendix A.3), generated from code.

Placeto trains and tests its policy on three families of N = 32 TensorFlow training graphs,
half for training and half for testing:

- ``cifar10``: image classifiers found by ENAS's convolutional ("micro") search on CIFAR-10,
  batch size drawn from [240, 360];
- ``ptb``: language models found by ENAS's recurrent-cell search on Penn Treebank, unrolled
  for L in [25, 40] steps, batch size drawn from [1536, 3072];
- ``nmt``: the 2-layer NMT encoder-decoder with attention, L in [16, 32], batch in [64, 128].

Their graphs were sampled from ENAS controllers during training. We have no controller, so
each graph draws its architecture uniformly from the same search spaces instead (every
architecture of the space is equally likely, rather than good ones more often). Graph ``i``
of a family is a function of ``numpy.random.default_rng([seed, family_index, i])`` and the
family's knobs only, so it is the same whatever ``num_graphs`` is.

cifar10 (ENAS micro search space, Pham et al. 2018, section 2.3)
    A stem (3x3 conv, batch norm) to ``3 * channels`` channels, then ``stacks`` stacks of
    ``cells_per_stack`` normal cells; between stacks a factorized reduction (stride-2 1x1
    conv) doubles the channels and halves the image, followed by one reduction cell. Each
    graph samples one normal-cell and one reduction-cell architecture, reused by every cell of
    that kind, as ENAS does. A cell has two inputs (the two previous cells' outputs, brought
    to the cell's size and width by a stride-2 or 1x1 conv where they differ) and ``blocks``
    blocks; block b takes two of the cell's earlier nodes and applies one op to each, drawn
    from {conv3x3, conv5x5, sep_conv3x3, max_pool3x3, avg_pool3x3, identity}, and adds the
    results. The cell's output is the concatenation of its nodes no block reads, mixed back to
    ``channels`` by a 1x1 conv. Convs are ReLU-conv-batch norm (batch statistics, learned
    scale and offset); sep_conv3x3 is one depthwise 3x3 + pointwise 1x1 (ENAS stacks two; we
    use one to keep the graphs in the size range). Head: ReLU, global average pool, dense to
    ``num_classes``. Optimizer: momentum SGD (Nesterov), as ENAS.

ptb (ENAS recurrent-cell search space, Pham et al. 2018, section 2.2)
    Embedding (width ``hidden``), a cell of ``nodes`` nodes unrolled for ``length`` steps
    (weights shared by the steps), softmax over ``vocab`` words. Node 0 computes
    ``f_0(W_0 [x_t, h_{t-1}])`` (the input projection), node j > 0 ``f_j(W_j s_i)`` of one
    earlier node i drawn at random, with each ``f_j`` drawn from {tanh, relu, sigmoid,
    identity}; the new hidden state ``h_t`` is the mean of the nodes no other node reads.
    ENAS also gates every node with a highway connection; we leave it out, which halves the
    ops per node and step. Loss: mean next-word cross-entropy; optimizer: SGD with gradients
    clipped to global norm 0.25, as ENAS.

nmt
    :func:`tf_autoplace.zoo.nmt.build_nmt` with ``layers=2``.

Default knobs, and how they relate to the paper's (see :data:`DEFAULT_KNOBS`; a knob given as
``(low, high)`` is drawn per graph, uniformly, both ends included):

- cifar10: ``batch=(240, 360)`` as the paper; 32x32x3 images, 10 classes; ``channels=20``,
  ``stacks=3`` (two reductions, as ENAS), ``cells_per_stack=(1, 2)`` and ``blocks=(4, 5)``
  (ENAS: 5 blocks, 20 channels and 6 layers during its search): 2,300-5,100 ops (seed 0).
- ptb: ``batch=(1536, 3072)`` and ``length=(25, 40)`` as the paper; ``vocab=10000`` (Penn
  Treebank's); ``nodes=(4, 8)`` (ENAS: 12 nodes; fewer keep the unrolled graphs under 5,000
  ops: 1,900-4,400 for seed 0) and ``hidden=256`` (ENAS: 1000). At the paper's batch sizes
  the step is dominated by the softmax ([batch * length, 10000] logits): on one device it
  needs ~5.5-11 GB, so the largest batches no longer fit one 10.7 GB K80 of Placeto's
  setting, the range of memory needs the paper aims for.
- nmt: ``length=(16, 32)`` and ``batch=(64, 128)`` as the paper; ``layers=2``; ``hidden=512``,
  ``embedding_dim=512``, ``vocab=10000`` (the zoo defaults are GNMT's 1024/1024/30000). The
  widths change neither the graph's ops nor its build time, only its costs and memory. The op
  count follows from the paper's lengths: ~6,600 ops at L = 16 to ~12,600 at L = 32;
  ``length=(6, 12)`` keeps graphs under ~5,000 ops.

Usage::

    config = FamilyConfig(seed=0)
    train, test = family_problems("ptb", config, resolve_cluster("k80x2"),
                                  cache_dir=True, progress=True)  # the user's problem cache
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import time
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from tf_autoplace import zoo
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.outputs.progress import note
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.pipeline.problem_cache import ProblemCache, as_problem_cache
from tf_autoplace.zoo.base import GraphBuilder, ModelGraph, language_model_builder
from tf_autoplace.zoo.layers import dense, embedding, scope, sequence_softmax_logits, variable

FAMILIES = ("cifar10", "ptb", "nmt")

# Bump when a generator changes the graphs it builds: cached problems are then rebuilt.
GENERATOR_VERSION = 1

DEFAULT_KNOBS: dict[str, dict[str, Any]] = {
    "cifar10": dict(batch=(240, 360), image_size=32, num_classes=10, channels=20, stacks=3,
                    cells_per_stack=(1, 2), blocks=(4, 5)),
    "ptb": dict(batch=(1536, 3072), length=(25, 40), nodes=(4, 8), hidden=256, vocab=10000),
    "nmt": dict(batch=(64, 128), length=(16, 32), layers=2, hidden=512, embedding_dim=512,
                vocab=10000),
}

CONV_OPS = ("conv3x3", "conv5x5", "sep_conv3x3", "max_pool3x3", "avg_pool3x3", "identity")
RNN_ACTIVATIONS = ("tanh", "relu", "sigmoid", "identity")


@dataclasses.dataclass(frozen=True)
class FamilyConfig:
    """Which graphs of a family to build.

    Attributes:
      num_graphs: N, graphs per family (paper: 32).
      train_fraction: f, the share of them (the first ones) used for training (paper: 0.5).
      seed: graph i of family k is drawn from ``numpy.random.default_rng([seed, k, i])``.
      cifar10, ptb, nmt: knob overrides for that family (see :data:`DEFAULT_KNOBS`); a range
        knob takes an int (fixed) or an inclusive ``(low, high)`` pair.
    """

    num_graphs: int = 32
    train_fraction: float = 0.5
    seed: int = 0
    cifar10: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    ptb: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    nmt: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not (isinstance(self.num_graphs, int) and self.num_graphs >= 1):
            raise ConfigError(f"num_graphs must be an int >= 1, got {self.num_graphs!r}")
        if not 0.0 <= self.train_fraction <= 1.0:
            raise ConfigError(f"train_fraction must be in [0, 1], got {self.train_fraction!r}")
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ConfigError(f"seed must be an int >= 0, got {self.seed!r}")
        for family in FAMILIES:
            self.knobs(family)  # validate the overrides now

    @property
    def num_train(self) -> int:
        return int(round(self.num_graphs * self.train_fraction))

    def knobs(self, family: str) -> dict[str, Any]:
        """The family's knobs: defaults with this config's overrides, ranges as
        ``(low, high)`` tuples."""
        _check_family(family)
        overrides = dict(getattr(self, family))
        unknown = sorted(set(overrides) - set(DEFAULT_KNOBS[family]))
        if unknown:
            raise ConfigError(f"unknown knob(s) {', '.join(unknown)} for family {family}; "
                              f"known: {', '.join(DEFAULT_KNOBS[family])}")
        knobs = {**DEFAULT_KNOBS[family], **overrides}
        for name, value in knobs.items():
            low, high = _as_range(value)
            if isinstance(low, bool) or not isinstance(low, (int, np.integer)) or \
                    isinstance(high, bool) or not isinstance(high, (int, np.integer)) or \
                    not 1 <= low <= high:
                raise ConfigError(f"{family} knob {name}={value!r}: expected a positive int or "
                                  "an int range (low, high) with 1 <= low <= high")
            ranged = isinstance(value, (tuple, list)) or isinstance(DEFAULT_KNOBS[family][name],
                                                                   tuple)
            knobs[name] = (int(low), int(high)) if ranged else int(value)
        if family == "cifar10" and knobs["image_size"] % 2 ** (knobs["stacks"] - 1):
            raise ConfigError(f"cifar10 image_size={knobs['image_size']} must be a multiple of "
                              f"{2 ** (knobs['stacks'] - 1)} for {knobs['stacks'] - 1} "
                              "reductions")
        return knobs


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ConfigError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


def _as_range(value) -> tuple:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            return (0, 0)  # rejected by the caller
        return tuple(value)
    return (value, value)


def sample_knobs(family: str, config: FamilyConfig, i: int) -> dict[str, Any]:
    """The concrete knobs of graph ``i``: every range drawn (in knob order) from graph i's
    generator, plus the sampled architecture (``normal_cell`` and ``reduction_cell`` for
    cifar10, ``cell`` for ptb)."""
    knobs = config.knobs(family)
    rng = np.random.default_rng([config.seed, FAMILIES.index(family), i])
    drawn = {}
    for name, value in knobs.items():
        if isinstance(value, tuple):
            drawn[name] = int(rng.integers(value[0], value[1] + 1))
        else:
            drawn[name] = value
    if family == "cifar10":
        drawn["normal_cell"] = _sample_conv_cell(rng, drawn["blocks"])
        drawn["reduction_cell"] = _sample_conv_cell(rng, drawn["blocks"])
    elif family == "ptb":
        drawn["cell"] = _sample_rnn_cell(rng, drawn["nodes"])
    return drawn


def family_graph(family: str, config: FamilyConfig, i: int) -> ModelGraph:
    """Graph ``i`` of a family (``i`` may exceed ``num_graphs``), named ``<family>_<i>``, its
    concrete knobs in ``.knobs``."""
    knobs = sample_knobs(family, config, i)
    model = _BUILDERS[family](knobs)
    return dataclasses.replace(model, name=f"{family}_{i}", knobs=knobs)


def family_graphs(family: str, config: FamilyConfig) -> list[ModelGraph]:
    """All ``num_graphs`` graphs of a family, the training ones first. Each holds its own
    ``tf.Graph``; for many large graphs prefer :func:`family_problems`, which keeps one at a
    time."""
    return [family_graph(family, config, i) for i in range(config.num_graphs)]


def cache_key(family: str, config: FamilyConfig, cluster: Cluster) -> str:
    """A hash of what a cached problem depends on besides (seed, i): the family's knobs, the
    cluster and :data:`GENERATOR_VERSION`."""
    payload = json.dumps({"family": family, "knobs": config.knobs(family),
                          "version": GENERATOR_VERSION}, sort_keys=True).encode()
    digest = hashlib.sha256(payload)
    digest.update(cluster.to_proto().SerializeToString(deterministic=True))
    return digest.hexdigest()[:16]


def problem_name(family: str, config: FamilyConfig, cluster: Cluster, i: int) -> str:
    """The problem cache entry of graph ``i`` of a family on ``cluster``:
    ``<family>_<seed>_<i>_<cache_key>``."""
    return f"{family}_{config.seed}_{i}_{cache_key(family, config, cluster)}"


def family_problems(family: str, config: FamilyConfig, cluster: Cluster, *,
                    cache_dir: bool | str | os.PathLike | ProblemCache | None = None,
                    progress: bool = False
                    ) -> tuple[list[PlacementProblem], list[PlacementProblem]]:
    """Build every graph of a family and its PlacementProblem on ``cluster`` (Grappler
    analytical costs, default grouping).

    Args:
      family, config, cluster: which graphs, costed for which devices.
      cache_dir: keep the built problems in a problem cache
        (:class:`tf_autoplace.pipeline.problem_cache.ProblemCache`: npz files, no pickle) and
        read them back, so a second run builds nothing: True for the user's
        (``tf_autoplace/problems`` in the user's cache directory), a private directory of the
        user's, or None (no cache). Problem i is the entry :func:`problem_name`.
      progress: print one line per graph to stderr.

    Returns:
      ``(train, test)``: the first ``config.num_train`` problems and the rest.

    Raises:
      ConfigError: a bad argument, or a cache directory another user owns or others can
        write to.
    """

    _check_family(family)
    cache = as_problem_cache(cache_dir)
    problems = []
    for i in range(config.num_graphs):
        t = time.perf_counter()
        name = problem_name(family, config, cluster, i)
        problem = cache.load(name, cluster) if cache is not None else None
        cached = problem is not None
        if not cached:
            model = family_graph(family, config, i)
            meta_graph = ingest.load_meta_graph(model.graph)
            del model  # free the tf.Graph before costing
            gc.collect()
            problem, _ = build_problem(meta_graph, cluster)
            del meta_graph
            problem = PlacementProblem(graph=problem.graph, cluster=problem.cluster,
                                       op_time=problem.op_time, grouping=problem.grouping)
            if cache is not None:
                cache.store(name, problem)
        problems.append(problem)
        if progress:
            note(f"{family} {i + 1}/{config.num_graphs}",
                 f"{family}_{i}: {problem.graph.num_ops} ops, "
                 f"{problem.grouping.num_groups} groups, "
                 f"{'read from cache' if cached else 'built'} in "
                 f"{time.perf_counter() - t:.1f} s")
    return problems[:config.num_train], problems[config.num_train:]


# ------------------------------------------------------------------------------ cifar10

def _sample_conv_cell(rng: np.random.Generator, blocks: int) -> tuple:
    """``blocks`` tuples ``(input_a, op_a, input_b, op_b)``; nodes 0 and 1 are the cell's
    inputs, node ``2 + b`` is block b's output."""
    cell = []
    for b in range(blocks):
        inputs = rng.integers(0, b + 2, size=2)
        ops = rng.integers(0, len(CONV_OPS), size=2)
        cell.append((int(inputs[0]), CONV_OPS[ops[0]], int(inputs[1]), CONV_OPS[ops[1]]))
    return tuple(cell)


def _batch_norm(x: tf.Tensor) -> tf.Tensor:
    """Batch norm with batch statistics (training mode), learned scale and offset."""
    channels = x.shape[-1]
    scale = variable("bn_scale", [channels], "ones")
    offset = variable("bn_offset", [channels], "zeros")
    y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, epsilon=1e-5, is_training=True)
    return y


def _conv(x: tf.Tensor, size: int, channels: int, name: str, stride: int = 1,
          relu: bool = True) -> tf.Tensor:
    """(ReLU,) ``size`` x ``size`` conv, batch norm; variables under ``name/``."""
    with tf.compat.v1.variable_scope(name):
        if relu:
            x = tf.nn.relu(x)
        kernel = variable("kernel", [size, size, x.shape[-1], channels])
        x = tf.nn.conv2d(x, kernel, strides=stride, padding="SAME")
        return _batch_norm(x)


def _sep_conv(x: tf.Tensor, name: str) -> tf.Tensor:
    """ReLU, depthwise 3x3 + pointwise 1x1 conv, batch norm."""
    with tf.compat.v1.variable_scope(name):
        channels = x.shape[-1]
        depthwise = variable("depthwise", [3, 3, channels, 1])
        pointwise = variable("pointwise", [1, 1, channels, channels])
        x = tf.nn.separable_conv2d(tf.nn.relu(x), depthwise, pointwise, strides=[1, 1, 1, 1],
                                   padding="SAME")
        return _batch_norm(x)


def _cell_op(op: str, x: tf.Tensor, name: str) -> tf.Tensor:
    channels = x.shape[-1]
    if op == "conv3x3":
        return _conv(x, 3, channels, name)
    if op == "conv5x5":
        return _conv(x, 5, channels, name)
    if op == "sep_conv3x3":
        return _sep_conv(x, name)
    if op == "max_pool3x3":
        return tf.nn.max_pool2d(x, 3, 1, "SAME", name=name)
    if op == "avg_pool3x3":
        return tf.nn.avg_pool2d(x, 3, 1, "SAME", name=name)
    return x  # identity


def _calibrate(x: tf.Tensor, size: int, channels: int, name: str) -> tf.Tensor:
    """Bring a cell input to ``size`` x ``size`` x ``channels`` (ENAS's size calibration)."""
    if x.shape[1] != size:
        return _conv(x, 1, channels, name, stride=x.shape[1] // size)
    if x.shape[-1] != channels:
        return _conv(x, 1, channels, name)
    return x


def _conv_cell(cell: tuple, prev: tf.Tensor, prev_prev: tf.Tensor, channels: int,
               name: str) -> tf.Tensor:
    with tf.compat.v1.variable_scope(name):
        size = prev.shape[1]
        nodes = [_calibrate(prev_prev, size, channels, "input_0"),
                 _calibrate(prev, size, channels, "input_1")]
        used = [False] * (2 + len(cell))
        for b, (in_a, op_a, in_b, op_b) in enumerate(cell):
            with tf.compat.v1.variable_scope(f"block_{b}"):
                a = _cell_op(op_a, nodes[in_a], "a")
                c = _cell_op(op_b, nodes[in_b], "b")
                nodes.append(tf.add(a, c))
            used[in_a] = used[in_b] = True
        loose = [node for node, u in zip(nodes, used) if not u]
        out = loose[0] if len(loose) == 1 else tf.concat(loose, axis=3)
        return _conv(out, 1, channels, "output")


def _build_cifar10(knobs: dict) -> ModelGraph:
    builder = GraphBuilder("cifar10")
    size, channels = knobs["image_size"], knobs["channels"]
    with builder.graph.as_default():
        images = builder.placeholder("images", [knobs["batch"], size, size, 3], tf.float32)
        labels = builder.placeholder("labels", [knobs["batch"]], tf.int32, knobs["num_classes"])
        with tf.compat.v1.variable_scope("stem"):
            x = _conv(images, 3, 3 * channels, "conv", relu=False)
        prev_prev = prev = x
        layer = 0
        for stack in range(knobs["stacks"]):
            if stack > 0:
                channels *= 2
                reduced = _conv(prev, 1, channels, f"reduce_{stack}", stride=2)
                prev_prev, prev = prev, _conv_cell(knobs["reduction_cell"], reduced, prev,
                                                   channels, f"cell_{layer}")
                layer += 1
            for _ in range(knobs["cells_per_stack"]):
                prev_prev, prev = prev, _conv_cell(knobs["normal_cell"], prev, prev_prev,
                                                   channels, f"cell_{layer}")
                layer += 1
        with tf.compat.v1.variable_scope("head"):
            pooled = tf.reduce_mean(tf.nn.relu(prev), axis=[1, 2])
            logits = dense(pooled, knobs["num_classes"], "logits")
    return builder.finish(logits, labels,
                          tf.compat.v1.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True))


# ---------------------------------------------------------------------------------- ptb

def _sample_rnn_cell(rng: np.random.Generator, nodes: int) -> tuple:
    """``nodes`` tuples ``(input, activation)``; node 0's input is -1 (the step's input and the
    previous hidden state), node j's is an earlier node."""
    cell = []
    for j in range(nodes):
        source = -1 if j == 0 else int(rng.integers(0, j))
        cell.append((source, RNN_ACTIVATIONS[int(rng.integers(0, len(RNN_ACTIVATIONS)))]))
    return tuple(cell)


_ACTIVATIONS = {"tanh": tf.tanh, "relu": tf.nn.relu, "sigmoid": tf.sigmoid,
                "identity": lambda x: x}


def _rnn_cell_weights(cell: tuple, hidden: int) -> list[tf.Tensor]:
    """One kernel per node: [2 * hidden, hidden] for node 0 (it reads ``[x_t, h_{t-1}]``),
    [hidden, hidden] for the others."""
    kernels = []
    for j in range(len(cell)):
        with tf.compat.v1.variable_scope(f"node_{j}"):
            kernels.append(variable("kernel", [(2 if j == 0 else 1) * hidden, hidden]))
    return kernels


def _rnn_cell_step(cell: tuple, kernels: list, x: tf.Tensor, h: tf.Tensor) -> tf.Tensor:
    """One step of the cell: the new hidden state from input ``x`` and hidden state ``h``."""
    states, used = [], [False] * len(cell)
    for j, (source, activation) in enumerate(cell):
        if source < 0:
            inputs = tf.concat([x, h], axis=1)
        else:
            inputs = states[source]
            used[source] = True
        states.append(_ACTIVATIONS[activation](tf.matmul(inputs, kernels[j])))
    loose = [state for state, u in zip(states, used) if not u]
    return loose[0] if len(loose) == 1 else tf.add_n(loose) / float(len(loose))


def _build_ptb(knobs: dict) -> ModelGraph:
    batch, length, hidden, vocab = knobs["batch"], knobs["length"], knobs["hidden"], knobs["vocab"]
    builder, tokens, targets = language_model_builder("ptb", batch, length, vocab)
    with builder.graph.as_default():
        with scope("embedding"):
            steps = tf.unstack(embedding(tokens, vocab, hidden), axis=1)
        with scope("cell"):
            kernels = _rnn_cell_weights(knobs["cell"], hidden)
            h = tf.zeros([batch, hidden])
            outputs = []
            for x in steps:
                h = _rnn_cell_step(knobs["cell"], kernels, x, h)
                outputs.append(h)
        logits, labels = sequence_softmax_logits(outputs, targets, vocab)
    return builder.finish(logits, labels, tf.compat.v1.train.GradientDescentOptimizer(1.0),
                          clip_norm=0.25, layer_scopes=("embedding/", "cell/", "softmax/"))


# ---------------------------------------------------------------------------------- nmt

def _build_nmt(knobs: dict) -> ModelGraph:
    return zoo.build("nmt", **knobs)


_BUILDERS = {"cifar10": _build_cifar10, "ptb": _build_ptb, "nmt": _build_nmt}

__all__ = ["DEFAULT_KNOBS", "FAMILIES", "FamilyConfig", "cache_key", "family_graph",
           "family_graphs", "family_problems", "problem_name", "sample_knobs"]
