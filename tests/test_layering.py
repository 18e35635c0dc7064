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

# Lowest first. A top-level module or subpackage of tf_autoplace per entry, by layer.
LAYERS = [
    {"errors", "proto"},
    {"cluster", "files", "graph", "zoo", "progress"},
    # hw runs graphs on this machine and measures them: it reads clusters and graphs, and what
    # it writes (profiles, link fits) feeds cost models and the simulator from outside.
    {"cost", "grouping", "sim", "hw"},
    {"problem", "timeline", "rewrite"},
    {"report", "prepare", "saved_placement"},
    {"measure"},  # puts hw's measurements into a report; the engine calls it
    {"heuristics"},
    {"rl"},
    {"placers", "cache"},
    {"engine", "benchmark", "fidelity"},  # fidelity runs placers, the simulator and hw
    {"tf2"},
    {"api"},
    {"flags", "testing"},
    {"cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}

# Function-level tf_autoplace imports that are not about cycles: the package __init__'s lazy
# attributes, the flags module (imported by training binaries before their flags are parsed)
# and the cost model's Grappler edge (keeps the numpy core importable without TensorFlow work).
LAZY_OK = {"__init__.py", "flags.py", os.path.join("cost", "model.py")}


def _modules():
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py") and not f.endswith("_pb2.py"):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, ROOT), path


def _unit(relpath: str) -> str:
    return relpath.split(os.sep)[0].removesuffix(".py")


def _imports(path):
    tree = ast.parse(open(path, encoding="utf-8").read())
    top = set(id(n) for n in tree.body)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "tf_autoplace":
                names = [f"tf_autoplace.{a.name}" for a in node.names]
            else:
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("tf_autoplace."):
                yield name.split(".")[1], id(node) in top, node.lineno


def test_every_unit_has_a_layer():
    units = {_unit(rel) for rel, _ in _modules()} - {"__init__"}
    assert units <= set(RANK), f"give these a layer in LAYERS: {sorted(units - set(RANK))}"


@pytest.mark.parametrize("relpath,path", sorted(_modules()))
def test_imports_point_down(relpath, path):
    unit = _unit(relpath)
    if unit == "__init__":
        return
    for target, at_top, line in _imports(path):
        if target == unit:
            continue
        assert RANK[target] < RANK[unit], (
            f"{relpath}:{line} imports tf_autoplace.{target} (layer {RANK[target]}) from layer "
            f"{RANK[unit]} ({unit}): imports must point down")
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
