"""The human expert placement of the papers, by layer scopes.

What the papers call "human expert" (Mirhoseini et al. 2018, section 3; Gao et al. 2018
"Post", section 4; Zhou et al. 2019 "GDP", Table 1):

* Image models (Inception-V3, ResNet, NASNet): the whole model on a single GPU.
* NMT and RNNLM: "each LSTM layer on a separate GPU" (HDP, citing Sutskever et al. 2014 and
  GNMT, Wu et al. 2016), "collocating the embedding layer with the first LSTM layer, the
  softmax layer and the attentional layer with the last LSTM layer" (Post). As in GNMT,
  encoder layer i and decoder layer i share a GPU.
* Transformer-XL and WaveNet (GDP): not described; we take the natural pipeline split, a
  contiguous range of blocks per GPU.

Our rule covers all of these. The model is a pipeline of **stages**, each a set of name-scope
prefixes (``("encoder/layer_0/", "decoder/layer_0/")``), plus **head** scopes (embeddings,
inputs) and **tail** scopes (attention, softmax). With L stages and k compute devices (the GPUs;
see :func:`~tf_autoplace.heuristics._common.compute_devices`), stage i goes to GPU
``floor(i * k / L)``: one layer per GPU when L = k, contiguous blocks when L > k, the first L
GPUs when L < k. Heads go with stage 0, tails with the last stage. Without any stage the
placement is the single-GPU one (:class:`SingleDevicePlacer`).

Which ops belong to a scope ``S`` (TF's naming, the same rule as
``tf_autoplace.zoo.ModelGraph.scope_of``): the name starts with ``S``, or contains ``"/" + S``
(``gradients/S...``: the gradient ops of the scope's forward ops), or ``"update_" + S``
(``Adam/update_S.../ResourceApplyAdam``: the optimizer update of a variable of the scope).
Scopes are tried in the order stages, heads, tails; the first match wins.

Ops matching no scope are resolved in this order (every step works on TF colocation groups,
which are never split):

1. A colocation group takes the device of its variable (the member with persistent bytes) if
   that member matched a scope, else the most common device among its members that matched
   (ties: the lower device index).
2. An op named ``gradients[_N]/X_grad/...`` takes the device of forward op ``X``'s colocation
   group; an op named ``.../update_V/...`` takes that of variable ``V`` (the longest prefix of
   what follows ``update_`` that names an op). Step 1 is repeated with these.
3. Nearest placed neighbour: a breadth-first search over the undirected graph of colocation
   groups (data and control edges) from every group placed so far. At each BFS level, an
   unplaced group next to placed ones takes the device that those neighbours send it or
   receive from it the most bytes (each edge counting ``bytes + 1``, so control edges count;
   ties: the lower device index). Groups the search never reaches go to the first GPU.

Last, a colocation group that cannot run on its device moves to the first GPU that can run
it, else to the first device that can (the CPU host for CPU-only ops).

Scopes come from the constructor, from :meth:`ExpertPlacer.from_pipeline` (a zoo model's
``layer_scopes``), or, when none are given, from the op names: every forward op (not under
``gradients`` and not an optimizer update) whose name has a path component ``layer_<i>``
defines the stage prefix up to that component; prefixes with the same numbers
(``encoder/layer_0/`` and ``decoder/layer_0/``; ``stack_1/layer_3/``) form one stage, and
stages are ordered by first appearance in the graph.

**Heads and tails without scopes.** When neither head nor tail scopes are given (and there are
at least two stages), they are read off the forward pass, so that a user's graph gets the
papers' expert and not a split of its attention and softmax between the GPUs of the layers they
read. The forward ops are those not under ``gradients``/``gradient_tape`` and not an optimizer
update; only data edges between forward ops count (a control edge would make ``init`` a tail):

* **tails**: forward ops outside every stage that the *last* stage's forward ops feed,
  directly or through other such ops (attention reading the top encoder layer, the output
  projection, softmax and loss), then, repeatedly, forward ops outside every stage whose
  forward consumers are all tails (the reads of the tails' weights, their constants);
* **heads**: the remaining forward ops outside every stage that feed the first stage's forward
  ops and that no stage feeds (embeddings, input pipelines).

Glue between two inner stages is neither, and goes by step 3 to the stage next to it.

Deterministic: the seed is ignored.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics._common import compute_devices, once_per_graph
from tf_autoplace.heuristics.single import SingleDevicePlacer

_LAYER = re.compile(r"^((?:[^/]+/)*?layer_\d+/)")
_NUMBERS = re.compile(r"_(\d+)/")
_GRADIENT = re.compile(r"^gradients(?:_\d+)?/(.+?)_grad(?:/|$)")
_UPDATE = re.compile(r"update_(.+)$")
_BACKWARD = re.compile(r"^(?:gradients(?:_\d+)?|gradient_tape)/|update_")


def _is_forward(name: str) -> bool:
    """Whether op ``name`` belongs to the forward pass: not a gradient (TF1's ``gradients/``,
    TF2's ``gradient_tape/``) and not an optimizer update (``.../update_V/...``)."""
    return _BACKWARD.search(name) is None


def _stage_key(prefix: str) -> tuple[int, ...]:
    return tuple(int(x) for x in _NUMBERS.findall(prefix))


def _stages_from_prefixes(prefixes: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Prefixes with the same numbers form a stage; stages in order of first appearance."""
    stages: dict[tuple[int, ...], list[str]] = {}
    for prefix in prefixes:
        members = stages.setdefault(_stage_key(prefix), [])
        if prefix not in members:
            members.append(prefix)
    return tuple(tuple(m) for m in stages.values())


def _as_stages(layer_scopes) -> tuple[tuple[str, ...], ...]:
    stages = []
    for stage in layer_scopes:
        stage = (stage,) if isinstance(stage, str) else tuple(stage)
        if not stage or not all(isinstance(s, str) and s for s in stage):
            raise ConfigError(f"each layer scope must be a non-empty str or a non-empty tuple of "
                              f"them, got {stage!r}")
        stages.append(stage)
    return tuple(stages)


def first_scope(names: Sequence[str], scopes: Sequence[str]) -> np.ndarray:
    """[n] int64: for each op name, the index of the first of ``scopes`` it belongs to, -1 for
    none. A name belongs to scope prefix ``scope`` when it starts with it, or contains
    ``"/" + scope`` or ``"update_" + scope`` (module docstring). Scope by scope over the names
    still unmatched, with the test written inline (a function call per op and scope would cost
    more than the test)."""
    out = np.full(len(names), -1, np.int64)
    left = list(range(len(names)))
    for r, scope in enumerate(scopes):
        slash, update = "/" + scope, "update_" + scope
        hit = [i for i in left
               if names[i].startswith(scope) or slash in names[i] or update in names[i]]
        if hit:
            out[hit] = r
            matched = set(hit)
            left = [i for i in left if i not in matched]
    return out


class ExpertPlacer(Placer):
    """Human-expert placement by layer scopes (see module docstring).

    Args:
      layer_scopes: pipeline stages in order, each a scope prefix or a tuple of prefixes that
        share a device; None: derive them from the op names; ``()``: no stages (single GPU).
      head_scopes: prefixes placed with the first stage (embeddings, inputs).
      tail_scopes: prefixes placed with the last stage (attention, softmax).
    """

    name = "expert"

    def __init__(self, layer_scopes: Sequence[str | Sequence[str]] | None = None,
                 head_scopes: Sequence[str] = (), tail_scopes: Sequence[str] = ()):
        self.layer_scopes = None if layer_scopes is None else _as_stages(layer_scopes)
        for what, scopes in (("head_scopes", head_scopes), ("tail_scopes", tail_scopes)):
            if isinstance(scopes, str) or not all(isinstance(s, str) and s for s in scopes):
                raise ConfigError(f"{what} must be a sequence of non-empty str, got {scopes!r}")
        self.head_scopes = tuple(head_scopes)
        self.tail_scopes = tuple(tail_scopes)

    @classmethod
    def from_pipeline(cls, scopes: Sequence[str]) -> "ExpertPlacer":
        """An expert for a model whose scopes are listed in pipeline order (a zoo model's
        ``layer_scopes``): scopes with a ``layer_<i>`` component are stages, grouped by their
        numbers (encoder and decoder layer i together); any other scope is a head if it comes
        before the first stage or names an embedding, else a tail. No stage: single GPU."""
        stages = _stages_from_prefixes([s for s in scopes if _LAYER.match(s)])
        first = next((i for i, s in enumerate(scopes) if _LAYER.match(s)), len(scopes))
        heads = [s for i, s in enumerate(scopes)
                 if not _LAYER.match(s) and (i < first or "embedding" in s)]
        tails = [s for s in scopes if not _LAYER.match(s) and s not in heads]
        return cls(layer_scopes=stages, head_scopes=heads, tail_scopes=tails)

    def stages_for(self, names: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        """The stages used for a graph with these op names (given, or derived from them)."""
        if self.layer_scopes is not None:
            return self.layer_scopes
        prefixes = []
        for name in names:
            if not _is_forward(name):
                continue
            match = _LAYER.match(name)
            if match:
                prefixes.append(match.group(1))
        return _stages_from_prefixes(prefixes)

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        graph = problem.graph
        stages = (self.layer_scopes if self.layer_scopes is not None else
                  once_per_graph(graph, ("expert stages",), lambda: self.stages_for(graph.names)))
        if not stages:
            return SingleDevicePlacer()._place(problem, rng)  # pylint: disable=protected-access
        gpus = compute_devices(problem)
        stage_device = [int(gpus[i * len(gpus) // len(stages)]) for i in range(len(stages))]
        # (scope, device, stage): heads and tails are on a stage's device but of no stage.
        rules = [(scope, stage_device[i], i) for i, stage in enumerate(stages)
                 for scope in stage]
        rules += [(scope, stage_device[0], -1) for scope in self.head_scopes]
        rules += [(scope, stage_device[-1], -1) for scope in self.tail_scopes]

        scopes = tuple(scope for scope, _, _ in rules)
        op_rule = once_per_graph(graph, ("expert rules", scopes),
                                 lambda: first_scope(graph.names, scopes))
        matched = op_rule >= 0
        op_device = np.where(matched, np.array([d for _, d, _ in rules])[op_rule], -1)
        op_stage = np.where(matched, np.array([st for _, _, st in rules])[op_rule], -1)
        if not self.head_scopes and not self.tail_scopes and len(stages) > 1:
            heads, tails = once_per_graph(
                graph, ("expert ends", stages),
                lambda: derive_heads_and_tails(graph, op_stage, len(stages)))
            op_device[heads], op_device[tails] = stage_device[0], stage_device[-1]
        coloc = graph.colocation.astype(np.int64)
        unit_device = _vote(graph, coloc, op_device, problem.cluster.num_devices)
        _follow_forward_ops(graph, coloc, op_device, unit_device)
        unit_device = _vote(graph, coloc, op_device, problem.cluster.num_devices)
        _nearest_neighbour(graph, coloc, unit_device, problem.cluster.num_devices)
        unit_device[unit_device < 0] = gpus[0]

        allowed = problem.colocation_allowed
        for c in np.flatnonzero(~allowed[np.arange(len(unit_device)), unit_device]).tolist():
            ok = gpus[allowed[c, gpus]]
            unit_device[c] = ok[0] if len(ok) else int(np.argmax(allowed[c]))
        return unit_device[coloc].astype(np.int32)


def derive_heads_and_tails(graph, op_stage: np.ndarray,
                           num_stages: int) -> tuple[np.ndarray, np.ndarray]:
    """The head and tail ops of a graph whose stages are known (module docstring): ``op_stage``
    [n] is each op's stage (-1: none). Returns (heads, tails), op index arrays."""
    n = graph.num_ops
    forward = np.fromiter((_is_forward(name) for name in graph.names), bool, count=n)
    free = forward & (op_stage < 0)  # forward ops of no stage: the candidates
    src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
    keep = forward[src] & forward[dst] & (src != dst)
    src, dst = src[keep], dst[keep]
    # Consumers (out) and producers (in) of each op, as CSR lists over forward data edges.
    out_start = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    out_list = dst[np.argsort(src, kind="stable")]
    in_start = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    in_list = src[np.argsort(dst, kind="stable")]

    def reach(seeds: np.ndarray, start: np.ndarray, neighbours: np.ndarray) -> np.ndarray:
        """[n] bool: free ops reached from ``seeds`` through free ops."""
        reached = np.zeros(n, bool)
        frontier = np.asarray(seeds, np.int64)
        while len(frontier):
            nxt = np.concatenate([neighbours[start[i]:start[i + 1]] for i in frontier]
                                 + [np.zeros(0, np.int64)])
            nxt = np.unique(nxt[free[nxt] & ~reached[nxt]])
            reached[nxt] = True
            frontier = nxt
        return reached

    staged = forward & (op_stage >= 0)
    tail = reach(np.flatnonzero(staged & (op_stage == num_stages - 1)), out_start, out_list)
    # Free ops whose forward consumers are all tails join them (weights' reads, constants).
    consumers = np.bincount(src, minlength=n)
    while True:
        to_tail = np.bincount(src[tail[dst]], minlength=n)
        grow = free & ~tail & (consumers > 0) & (to_tail == consumers)
        if not grow.any():
            break
        tail |= grow
    fed_by_stage = reach(np.flatnonzero(staged), out_start, out_list)
    head = reach(np.flatnonzero(staged & (op_stage == 0)), in_start, in_list)
    head &= ~tail & ~fed_by_stage
    return np.flatnonzero(head), np.flatnonzero(tail)


def _vote(graph, coloc: np.ndarray, op_device: np.ndarray, num_devices: int) -> np.ndarray:
    """Step 1: [C] device per colocation group (-1: undecided)."""
    num_units = int(coloc.max()) + 1
    placed = op_device >= 0
    votes = np.zeros((num_units, num_devices))
    np.add.at(votes, (coloc[placed], op_device[placed]), 1.0)
    unit_device = np.where(votes.any(axis=1), np.argmax(votes, axis=1), -1)
    variables = np.flatnonzero(placed & (graph.persistent_bytes > 0))
    # The first placed variable of each group decides (reverse order: first assignment wins).
    unit_device[coloc[variables[::-1]]] = op_device[variables[::-1]]
    return unit_device.astype(np.int64)


def _follow_forward_ops(graph, coloc, op_device, unit_device) -> None:
    """Step 2 (in place on op_device): gradients follow their forward op, optimizer updates
    their variable."""
    for i in np.flatnonzero(unit_device[coloc] < 0).tolist():
        name = graph.names[i]
        target = None
        match = _GRADIENT.match(name)
        if match:
            target = _op_index(graph, match.group(1))
        if target is None:
            match = _UPDATE.search(name)
            if match:
                parts = match.group(1).split("/")
                for end in range(len(parts), 0, -1):
                    target = _op_index(graph, "/".join(parts[:end]))
                    if target is not None:
                        break
        if target is not None and unit_device[coloc[target]] >= 0:
            op_device[i] = unit_device[coloc[target]]


def _op_index(graph, name: str) -> int | None:
    try:
        return graph.index(name)
    except KeyError:
        return None


def _nearest_neighbour(graph, coloc, unit_device, num_devices: int) -> None:
    """Step 3 (in place on unit_device): multi-source BFS over colocation groups."""
    src = coloc[np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)]
    dst = coloc[np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)]
    weight = np.concatenate([graph.tensor_bytes[graph.edge_tensor],
                             np.zeros(len(graph.ctrl_src), np.int64)]).astype(np.float64) + 1
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    w = np.concatenate([weight[keep], weight[keep]])
    while True:
        frontier = (unit_device[a] >= 0) & (unit_device[b] < 0)
        if not frontier.any():
            return
        score = np.zeros((len(unit_device), num_devices))
        np.add.at(score, (b[frontier], unit_device[a[frontier]]), w[frontier])
        reached = np.unique(b[frontier])
        unit_device[reached] = np.argmax(score[reached], axis=1)
