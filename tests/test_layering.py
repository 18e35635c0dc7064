"""The package's imports run one way: ingest -> cost/group -> simulate -> place -> rewrite.

Every module of ``tf_autoplace`` is parsed (not imported) and each ``tf_autoplace`` import it
makes is checked against :data:`LAYERS`: a module may import its own package and the layers
below its own, never a layer above. Imports inside functions are only allowed where the
reason is not a cycle (:data:`LAZY_OK`), so a cycle cannot hide behind one.
"""

import ast
import os

import networkx as nx
import pytest

import tf_autoplace

ROOT = os.path.dirname(tf_autoplace.__file__)

# Lowest first. A unit is a subpackage or module of tf_autoplace, dotted ("core.cluster"); a
# module belongs to the longest unit its dotted name starts with, so a folder that gathers one
# role (outputs, pipeline, hw, zoo) may have modules on several floors.
LAYERS = [
    {"errors", "proto"},
    # byte amounts for messages; private cache directories and reading files without trust;
    # the numbers a config takes; a process descriptor redirected while C code writes on it
    {"core.units", "core.cachedir", "core.npz", "core.settings", "core.fds"},
    {"core.limits"},  # the address-space limit, in byte amounts
    {"core.tasks"},  # the jobs and tasks of a TensorFlow cluster, which a Cluster may span
    {"core.jit"},  # numba kernels cached in the user's cache directory (grouping, sim, ...)
    {"core.cluster", "core.registry", "outputs.files", "outputs.progress", "graph", "zoo"},
    # hw runs graphs on this machine and measures them: it reads clusters and graphs, and what
    # it writes (profiles, link fits) feeds cost models and the simulator from outside.
    {"cost", "grouping", "sim", "hw"},
    {"core.problem", "outputs.timeline", "rewrite"},
    {"_session_recorder"},  # starts rewrite's record of Session runs at import tf_autoplace
    {"outputs.report", "pipeline.prepare", "outputs.saved_placement", "pipeline.problem_cache"},
    # measure a placed graph into its report; training corpora built as problems; the cache
    {"hw.measure", "hw.link_fit", "zoo.corpora", "pipeline.cache"},
    {"heuristics"},
    {"learning"},  # the machinery the learned placers share
    {"placers"},  # the registry, auto and one folder per learned placer
    {"pipeline.options"},  # what a door hands the engine: a placer, a cluster, ..., checked
    {"pipeline.engine", "zoo.benchmark", "hw.fidelity"},  # run placers end to end
    {"hw.components"},  # the simulator's parts against this machine, on fidelity's graphs
    {"tf2"},
    {"keras"},  # Keras models: their train/test/predict steps through the TF2 door
    {"api"},
    {"flags", "testing"},
    {"cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}

# Function-level tf_autoplace imports that are not about cycles: the package __init__'s lazy
# attributes, the flags module (imported by training binaries before their flags are parsed),
# the cost model's Grappler edge (keeps the numpy core importable without TensorFlow work) and
# the session recorder (which must not import TensorFlow at import tf_autoplace).
LAZY_OK = {"__init__.py", "flags.py", os.path.join("cost", "model.py"), "_session_recorder.py"}


def _modules():
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py") and not f.endswith("_pb2.py"):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, ROOT), path


def _dotted(relpath: str) -> str:
    return relpath.removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")


MODULES = {_dotted(rel) for rel, _ in _modules()}


def _unit(dotted: str) -> str | None:
    """The longest unit of :data:`LAYERS` that ``dotted`` (a module, without the package
    prefix) starts with; None if none."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in RANK:
            return ".".join(parts[:end])
    return None


def _imports(path):
    """(imported module without the package prefix, at module level, line) per import."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    top = set(id(n) for n in tree.body)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.append(sub if sub.removeprefix("tf_autoplace.") in MODULES
                             else node.module)
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("tf_autoplace."):
                yield name.removeprefix("tf_autoplace."), id(node) in top, node.lineno


def _has_imports(path) -> bool:
    return any(True for _ in _imports(path))


def test_every_unit_has_a_layer():
    missing = sorted(_dotted(rel) for rel, path in _modules()
                     if _dotted(rel) != "__init__" and _unit(_dotted(rel)) is None
                     and _has_imports(path))
    assert not missing, f"give these a layer in LAYERS: {missing}"


@pytest.mark.parametrize("relpath,path", sorted(_modules()))
def test_imports_point_down(relpath, path):
    unit = _unit(_dotted(relpath))
    if _dotted(relpath) == "__init__" or unit is None:
        return
    for target, at_top, line in _imports(path):
        target_unit = _unit(target)
        assert target_unit is not None, f"{relpath}:{line}: tf_autoplace.{target} has no layer"
        if target_unit == unit:
            continue
        assert RANK[target_unit] < RANK[unit], (
            f"{relpath}:{line} imports tf_autoplace.{target} (layer {RANK[target_unit]}) from "
            f"layer {RANK[unit]} ({unit}): imports must point down")
        assert at_top or relpath in LAZY_OK, (
            f"{relpath}:{line} imports tf_autoplace.{target} inside a function")


def test_no_import_cycle_between_modules():
    graph = nx.DiGraph()
    modules = {}
    for relpath, path in _modules():
        name = "tf_autoplace." + relpath.removesuffix(".py").replace(os.sep, ".")
        modules[name.removesuffix(".__init__")] = path
    for name, path in modules.items():
        graph.add_node(name)
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in tree.body:  # module level: what runs at import
            if isinstance(node, ast.ImportFrom) and node.module and node.module in modules:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                           else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name in modules]
            else:
                continue
            for target in targets:
                if target != name and not name.startswith(target + "."):
                    graph.add_edge(name, target)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles: {cycles[:3]}"
