"""A saved placement as a placer: apply what an earlier run found, without searching.

``autoplace(graph, placer=SavedPlacement("placement.pb"))``, which is what
:func:`tf_autoplace.apply_placement`, the offline tool's ``--placement`` and a training
binary's ``--autoplace_placement`` run, so a saved placement goes through every door a search
does (tf.Graph in place, GraphDef copy, tf.function, SavedModel) and is checked like one.

``place()``:

1. reads the ``PlacementResult`` (:mod:`tf_autoplace.outputs.saved_placement`) against the graph: op by
   op in graph order where the saved graph fingerprint equals this graph's (the same graph
   built again, whatever counters TF put in its names), else by name;
2. refuses a placement made for another graph: if it names less than ``min_match`` of this
   graph's ops, or less than ``min_match`` of its ops are in this graph, that is an
   :class:`~tf_autoplace.errors.InvalidGraphError` saying how many match, with examples of both
   sides. A device the cluster lacks is an InfeasiblePlacementError naming it;
3. places the ops it does not name (the graph changed a little) next to their neighbours
   (:func:`tf_autoplace.heuristics.neighbours.place_next_to_neighbours`), and its notes say
   how many (and how many ops the file names twice with the same device: a file naming an op
   twice with different devices is an InvalidGraphError);
4. is then checked as every placement is (``Placer.place``: colocation, kernels, memory by one
   simulation): a saved placement is never written into a graph it does not fit.

``stats`` holds the last run's counts: ``named`` (ops placed as saved), ``filled`` (placed next
to their neighbours), ``unknown`` (saved ops this graph lacks) and ``by`` ("position" or
"name").
"""

from __future__ import annotations

import os

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.errors import ConfigError, InvalidGraphError
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.heuristics.neighbours import place_next_to_neighbours
from tf_autoplace.outputs.saved_placement import match, read_placement

# A graph "changed a little" still has most of its ops named by the file, and most of the
# file's ops are still in it; below half on either side it is another graph.
MIN_MATCH = 0.5


class SavedPlacement(Placer):
    """Args:
      placement: a ``PlacementResult`` message, its serialized bytes, or a file (binary, or text
        for .pbtxt/.txt), as ``PlacementReport.to_proto()`` and ``--placement_pb`` write it.
      min_match: the least share of this graph's ops the file must name, and of the file's
        ops this graph must have (in (0, 1]; module docstring).
    """

    name = "saved"

    def __init__(self, placement, *, min_match: float = MIN_MATCH):
        if not (isinstance(min_match, (int, float)) and 0 < min_match <= 1):
            raise ConfigError(f"min_match must be in (0, 1], got {min_match!r}")
        # What messages call it: "the saved placement 'p.pb'" or "... given in memory".
        self.source = (f"the saved placement {os.fspath(placement)!r}"
                       if isinstance(placement, (str, os.PathLike))
                       else "the saved placement given in memory")
        self.result = read_placement(placement)
        self.min_match = min_match
        self.stats: dict = {}

    def settings(self) -> None:
        return None  # nothing is searched, so nothing is worth caching

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        n = problem.graph.num_ops
        fp = fingerprint(problem.graph)
        found = match(problem, self.result, fp)
        named, saved = found.num_named, len(self.result.op)
        if named < self.min_match * n or named < self.min_match * saved:
            missing = [problem.graph.names[i] for i in np.flatnonzero(found.devices < 0)[:3]]
            raise InvalidGraphError(
                f"{self.source} was made for another graph: it places "
                f"{saved} ops, {named} of which are in this graph of {n} ops (at least "
                f"{self.min_match:.0%} of each must match); e.g. saved ops not in this graph: "
                f"{list(found.unknown[:3])}, ops of this graph it does not place: {missing}")
        devices = place_next_to_neighbours(problem, found.devices)
        filled = n - named
        made_by = self.result.placer or "an unnamed placer"
        seed = f" (seed {self.result.seed})" if self.result.HasField("seed") else ""
        same = (self.result.graph_fingerprint == fp and named == n == saved
                and not found.unknown)  # (matched by position or, where exact, by name)
        if same:
            note = (f"applied {self.source}, made by {made_by}{seed} for this graph "
                    f"(same fingerprint), applied to all {n} ops without searching")
        else:
            note = (f"applied {self.source}, made by {made_by}{seed} for a graph that "
                    f"differs from this one; {named} of its ops applied by name, {filled} ops "
                    f"it does not place were placed next to their neighbours (a name means "
                    f"the op that has it now: where the change renamed ops, as a layer "
                    f"inserted before auto-named ones shifts Keras' name counters, the saved "
                    f"devices follow the names, not the layers; place the changed graph again "
                    f"for a searched placement)")
            if found.unknown:
                note += f", {len(found.unknown)} ops it places are not in this graph"
        if found.repeated:
            note += (f"; it names {len(found.repeated)} op(s) twice or more, each time with the "
                     f"same device (e.g. {list(found.repeated[:3])})")
        self.notes.append(note)
        self.stats = dict(named=named, filled=filled, unknown=len(found.unknown), by=found.by)
        return devices
