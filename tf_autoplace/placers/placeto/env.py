"""Placeto's MDP over one placement problem (Addanki et al., section 2 and appendix A.4, A.7).

State: the group graph with a current placement. An episode starts from a placement (by
default the best fast heuristic's; Placeto's "trivial placement", all groups on the first
action device, and a random one are options) and visits
every movable group ``passes`` times (n = 1 or 2 in the paper); each action re-places the
visited group on one of the action devices. After each action the op-level placement is
simulated and scored with the memory-penalised runtime ``R = r + c * ReLU(m - M)``.

Rewards, scaled by ``R_0`` (the start placement's score) so that graphs of very different step
times train one policy:

- intermediate (default): ``r_t = (R_{t-1} - R_t) / R_0``, the improvement made by step t;
- terminal: 0 until the last step, which gets ``(R_0 - R_T) / R_0``.

Both sum to the same episode return; intermediate rewards give each action its own credit.

**Undoing harmful moves** (``undo_worse``, our option; the Placeto placer fine-tunes with it).
In the paper's MDP every action's placement stands. On our graphs most single moves from a
good placement do not help (docs/experiments.md), so an episode that samples a few dozen moves
has usually made a harmful one after two or three, and every later move is judged on a worse placement, where its effect
is not the one it would have had. With ``undo_worse`` a move that makes R worse is undone: its
reward is still the (negative) improvement it made, ``(R_{t-1} - R'_t) / R_0`` with ``R'_t``
the moved placement's score, but the next state is the one before it. Every move of an episode is then judged from a
placement made only of improving moves.

A step whose action leaves the group where it is changes nothing and is not simulated again:
the samples an episode costs are its start placement plus the placements its moves made.

Choices the paper leaves open:

- **Action devices.** The devices of one kind a policy chooses among: the cluster's GPUs, or all
  devices when it has none (logical CPUs); the same compute devices the partitioning baselines
  use. A group that cannot run on them (CPU-only ops) is
  fixed to the first device that can run it and never visited.
- **Grouping.** The environment groups the op graph itself with Merge-and-Colocate into at most
  ``max_groups`` groups (Placeto uses the heuristic to shrink graphs before placing); placements
  are always simulated at op level. 256 by default: fewer groups mix a deep model's layers so
  much that no group placement comes near the expert's (docs/experiments.md).
- **Start placement.** With the heuristic start, the grouping never merges ops the heuristic
  put on different devices, so the first state is exactly the heuristic's placement and every
  placement an episode meets is a variation of it. From the trivial start, a policy on our
  simulator mostly learns that moving one group alone costs two transfers and keeps
  everything on one device. Starting from the best heuristic's placement makes every episode
  an attempt to improve a good placement, which is what the product needs.
- **Visiting order.** Groups in the order of their earliest op in a topological order of the op
  graph, so parents are usually visited before children.
- **Features** (per group, 5 + 3 D): the paper's total compute time (mean over action devices)
  and total output bytes, plus persistent bytes (a memory feature we add: it lets the policy see
  where variables live), each as ``log(1 + G * share of the graph's total)`` so that an average
  group reads log 2 whatever the graph's size (raw shares, ~1/G each, were too small for the
  embedding layer to tell groups apart); the current placement one-hot over action devices,
  "is being placed now", "has been placed in this episode". Then two context features per
  action device that we add (``context_features``, on by default): the device's share of the
  graph's compute under the current placement, and the share of the group's traffic (bytes on
  its group-level edges, both directions) exchanged with groups on that device. Without them
  the policy sees load balance and cut traffic only through k rounds of message passing: the
  best moves from a good placement are load-balancing ones, and the worst cut a group off from
  its neighbours, which these features show directly (docs/experiments.md).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.settings import check_int, plain_numbers
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.grouping import GroupingConfig, group_graph, merge_and_colocate
from tf_autoplace.grouping.heuristic import heuristic_grouping
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.sim import memory_penalized_runtime

STATIC_FEATURES = 3  # compute share, output-bytes share, persistent-bytes share
# (placeto_policy.PLACEMENT_OFFSET reads the placement one-hot right after these.)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Attributes:
      max_groups: Merge-and-Colocate target for the episode's group graph.
      passes: times each movable group is visited per episode (paper: 1 or 2).
      reward: "intermediate" or "terminal" (see module doc).
      memory_penalty: c in R = r + c * ReLU(m - M), per GB over capacity.
      start: "single" (all on action device 0, the paper's trivial placement), "random", or
        "heuristic" (the best fast heuristic's placement, so episodes improve on it).
      context_features: add 2 * D features that depend on the current placement (see the
        module doc): each device's share of the compute, and where a group's traffic goes.
      undo_worse: a move that makes R worse is undone (its negative reward stays; see the
        module doc).
    """

    max_groups: int = 256
    passes: int = 1
    reward: str = "intermediate"
    memory_penalty: float = 2.0
    start: str = "heuristic"
    context_features: bool = True
    undo_worse: bool = False

    def __post_init__(self):
        plain_numbers(self)
        check_int("max_groups", self.max_groups, low=1)
        if self.passes not in (1, 2):
            raise ConfigError(f"passes must be 1 or 2, got {self.passes!r}")
        if self.reward not in ("intermediate", "terminal"):
            raise ConfigError(f"reward must be 'intermediate' or 'terminal', got {self.reward!r}")
        if not self.memory_penalty >= 0:
            raise ConfigError(f"memory_penalty must be >= 0, got {self.memory_penalty!r}")
        if self.start not in ("single", "random", "heuristic"):
            raise ConfigError(
                f"start must be 'single', 'random' or 'heuristic', got {self.start!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class GraphView:
    """The static part of the state, as the policy network reads it (G groups, E edges).

    Attributes:
      static: [G, 3] float32 static features.
      edge_src, edge_dst: [E] int32 group-level edges (may contain cycles).
      ancestors: [G, G] bool, ``ancestors[u, v]``: u can reach v (u != v).
      num_devices: D, the number of action devices.
    """

    static: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    ancestors: np.ndarray
    num_devices: int
    group_time: np.ndarray  # [G] compute time (mean over action devices)
    edge_bytes: np.ndarray  # [E] bytes per group edge

    @property
    def num_groups(self) -> int:
        return len(self.static)


def reachability(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """[G, G] bool: ``out[u, v]`` when a path of >= 1 edge leads from u to v (cycles allowed).

    Bitset propagation to a fixed point; each row is a Python int used as a bitset."""
    children = [[] for _ in range(num_nodes)]
    for s, d in zip(src.tolist(), dst.tolist()):
        children[s].append(d)
    reach = [0] * num_nodes
    for u in range(num_nodes):
        for c in children[u]:
            reach[u] |= 1 << c
    changed = True
    while changed:
        changed = False
        for u in range(num_nodes):
            new = reach[u]
            bits = reach[u]
            while bits:
                low = bits & -bits
                new |= reach[low.bit_length() - 1]
                bits ^= low
            if new != reach[u]:
                reach[u] = new
                changed = True
    out = np.zeros((num_nodes, num_nodes), dtype=bool)
    for u, bits in enumerate(reach):
        if bits:
            row = np.frombuffer(bits.to_bytes((num_nodes + 7) // 8, "little"), dtype=np.uint8)
            out[u] = np.unpackbits(row, bitorder="little")[:num_nodes].astype(bool)
    np.fill_diagonal(out, False)
    return out


class PlacementEnv:
    """One problem's MDP. Numpy only; the policy network lives elsewhere."""

    def __init__(self, problem: PlacementProblem, config: EnvConfig = EnvConfig(), *,
                 start_devices: np.ndarray | None = None, evaluator=None):
        """``start_devices``: with ``config.start == "heuristic"``, the [n] placement to start
        from instead of running the best heuristic again (a caller that has it already).
        ``evaluator``: scores placements instead of the simulator (anything with
        :class:`~tf_autoplace.learning.rollouts.Evaluator`'s ``evaluate``, e.g. a
        :class:`~tf_autoplace.learning.measured.MeasuredEvaluator` for measured rewards)."""
        self.problem = problem
        self.config = config
        self.evaluator = evaluator
        cluster, graph = problem.cluster, problem.graph
        self.action_devices = cluster.compute_devices().astype(np.int32)

        self.heuristic_devices = None
        if config.start == "heuristic":
            self.heuristic_devices = (BestHeuristicPlacer().propose(problem)
                                      if start_devices is None
                                      else np.asarray(start_devices, dtype=np.int32))
            grouping = heuristic_grouping(graph, cluster.names, self.heuristic_devices,
                                          config.max_groups)
        else:
            grouping = merge_and_colocate(graph, GroupingConfig(max_groups=config.max_groups))
        self.grouping = grouping
        grouped = group_graph(graph, grouping)
        g = grouping.num_groups
        allowed = np.ones((g, cluster.num_devices), dtype=bool)
        np.logical_and.at(allowed, grouping.labels, problem.allowed)
        self.movable = allowed[:, self.action_devices].all(axis=1)
        if not allowed.any(axis=1).all():
            raise InfeasiblePlacementError("some op group can run on no device of the cluster")
        # Fixed groups go to the first device that can run them (as the single-device placer).
        self.fixed_device = np.argmax(allowed, axis=1).astype(np.int32)

        time = np.where(problem.allowed[:, self.action_devices],
                        problem.op_time[:, self.action_devices], 0.0).mean(axis=1)
        time = np.bincount(grouping.labels, weights=time, minlength=g)
        static = np.stack([time, grouped.output_bytes.astype(np.float64),
                           grouped.persistent_bytes.astype(np.float64)], axis=1)
        # Relative to the mean group, log-compressed: a graph-size-free scale where an average
        # group reads log(2) and a group holding half the graph's variables reads ~log(G / 2).
        static = np.log1p(g * static / np.maximum(static.sum(axis=0, keepdims=True), 1e-30))
        self.view = GraphView(
            static=static.astype(np.float32),
            edge_src=grouped.edge_src.astype(np.int32), edge_dst=grouped.edge_dst.astype(np.int32),
            ancestors=reachability(g, grouped.edge_src, grouped.edge_dst),
            num_devices=len(self.action_devices), group_time=time,
            edge_bytes=grouped.edge_bytes.astype(np.float64))

        topo_pos = np.empty(graph.num_ops, np.int64)
        topo_pos[graph.topological_order()] = np.arange(graph.num_ops)
        first = np.full(g, graph.num_ops, np.int64)
        np.minimum.at(first, grouping.labels, topo_pos)
        visit = [v for v in np.argsort(first, kind="stable").tolist() if self.movable[v]]
        self.order = np.array(visit * config.passes, dtype=np.int32)

    # ------------------------------------------------------------------------------ scoring
    @property
    def num_steps(self) -> int:
        return len(self.order)

    def op_placement(self, actions: np.ndarray) -> np.ndarray:
        """[G] action-device index per group -> [n] cluster device index per op."""
        devices = np.where(self.movable, self.action_devices[actions], self.fixed_device)
        return devices[self.grouping.labels].astype(np.int32)

    def score(self, actions: np.ndarray) -> float:
        """Memory-penalised runtime R of a group placement: simulated, or from the evaluator
        when the environment has one."""
        if self.evaluator is not None:
            return float(self.evaluator.evaluate(self.op_placement(actions)[None]).scores[0])
        sim = self.problem.simulator.run(self.op_placement(actions))
        return memory_penalized_runtime(sim, self.problem.cluster, self.config.memory_penalty)

    def start(self, rng: np.random.Generator) -> np.ndarray:
        g, d = self.view.num_groups, self.view.num_devices
        if self.config.start == "random":
            return rng.integers(0, d, size=g).astype(np.int32)
        if self.config.start == "heuristic":
            return self.heuristic_start.copy()
        return np.zeros(g, dtype=np.int32)

    @functools.cached_property
    def heuristic_start(self) -> np.ndarray:
        """[G] the best fast heuristic's placement as actions (groups never straddle its
        devices, see the constructor); a group it put on a non-action device starts on 0."""
        column = np.zeros(self.problem.cluster.num_devices, dtype=np.int32)
        column[self.action_devices] = np.arange(len(self.action_devices))
        first_op = np.zeros(self.view.num_groups, dtype=np.int64)
        first_op[self.grouping.labels[::-1]] = np.arange(self.problem.graph.num_ops)[::-1]
        return column[self.heuristic_devices[first_op]]

    # ----------------------------------------------------------------------------- features
    def features(self, actions: np.ndarray, step: int, placed: np.ndarray) -> np.ndarray:
        """[G, F] float32 features of the state before ``step``'s action (F = 5 + D, or
        5 + 3 D with context features)."""
        view = self.view
        g, d = view.num_groups, view.num_devices
        out = np.zeros((g, self.num_features), dtype=np.float32)
        out[:, :STATIC_FEATURES] = view.static
        out[np.arange(g), STATIC_FEATURES + actions] = self.movable
        out[self.order[step], STATIC_FEATURES + d] = 1.0
        out[:, STATIC_FEATURES + d + 1] = placed
        if self.config.context_features:
            base = STATIC_FEATURES + d + 2
            load = np.bincount(actions, weights=view.group_time, minlength=d)
            out[:, base:base + d] = load / max(load.sum(), 1e-30)
            # traffic[v, j]: share of v's bytes exchanged with groups on action device j.
            src, dst, nbytes = view.edge_src, view.edge_dst, view.edge_bytes
            traffic = np.zeros((g, d))
            np.add.at(traffic, (src, actions[dst]), nbytes)
            np.add.at(traffic, (dst, actions[src]), nbytes)
            out[:, base + d:] = traffic / np.maximum(traffic.sum(axis=1, keepdims=True), 1.0)
        return out

    def rewards(self, scores: np.ndarray, move_scores: np.ndarray | None = None) -> np.ndarray:
        """[T] rewards from the T + 1 scores R_0..R_T of an episode's states and, when a move
        can be undone (``undo_worse``), the T scores ``move_scores`` of the placements the
        moves made (None: the states', ``scores[1:]``)."""
        r0 = scores[0]
        if self.config.reward == "intermediate":
            moved = scores[1:] if move_scores is None else move_scores
            return (scores[:-1] - moved) / r0
        out = np.zeros(len(scores) - 1)
        out[-1] = (r0 - scores[-1]) / r0
        return out

    def action_rewards(self, scores: np.ndarray, action_scores: np.ndarray) -> np.ndarray:
        """[T, D] intermediate reward of every action device at every step: ``action_scores``
        [T, D] holds R after placing step t's group on each device (the state before step t
        being the episode's, ``scores`` [T + 1]), so ``(R_{t-1} - R_t(a)) / R_0``."""
        if self.config.reward != "intermediate":
            raise ConfigError("rewards per action need reward='intermediate'")
        return (scores[:-1, None] - action_scores) / scores[0]

    @functools.cached_property
    def num_features(self) -> int:
        per_device = 3 if self.config.context_features else 1
        return STATIC_FEATURES + per_device * self.view.num_devices + 2
