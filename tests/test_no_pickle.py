"""No code of the package or its experiment scripts unpickles a file, and no cache defaults to a
place other users share: every ``pickle.load``/``loads``, ``numpy.load(allow_pickle=True)`` and
``/tmp`` flag default is found by parsing the sources (a planted file cannot run code if nothing
ever unpickles it; pickling between our own processes, for worker pools, is not reading a
file)."""

import ast
import os

from tests.conftest import REPO

ROOTS = ("tf_autoplace", "experiments", "tools")


def _sources():
    for root in ROOTS:
        for dirpath, _, names in os.walk(os.path.join(REPO, root)):
            for name in names:
                if name.endswith(".py") and not name.endswith("_pb2.py"):
                    yield os.path.relpath(os.path.join(dirpath, name), REPO)


def _problems(path):
    tree = ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name.split(".")[-1] in ("load", "loads", "Unpickler") and "pickle" in name:
            yield node.lineno, f"{name}(...) unpickles"
        if name in ("np.load", "numpy.load") and any(
                k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant)
                                                 and k.value.value is False)
                for k in node.keywords):
            yield node.lineno, "numpy.load with allow_pickle"
        if name.startswith("flags.DEFINE") and len(node.args) > 1 and \
                isinstance(node.args[1], ast.Constant) and \
                str(node.args[1].value).startswith("/tmp"):
            yield node.lineno, f"a flag defaults to {node.args[1].value!r}"


def test_nothing_unpickles_a_file_or_defaults_to_a_shared_place():
    found = [f"{path}:{line}: {what}" for path in sorted(_sources())
             for line, what in _problems(path)]
    assert not found, "\n".join(found)
