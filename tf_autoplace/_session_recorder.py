"""Start recording v1 Session runs at ``import tf_autoplace``, without importing TensorFlow.

Placing a ``tf.Graph`` that an open Session has already run is refused
(:mod:`tf_autoplace.rewrite.sessions`), and that check can only know of the runs it recorded. The
package itself loads TensorFlow only when an entry point needs it (so that ``tf-autoplace
COMMAND --help`` starts at once), which would leave the runs between ``import tf_autoplace`` and
its first use unseen: a session that trained a few steps in between would go unnoticed, and the
placement would be written into a graph that session keeps running with its old devices.

So :func:`start`, called by the package's ``__init__``, installs the recorder at once when
TensorFlow is already imported, and otherwise as soon as ``import tensorflow`` completes: a
one-shot finder on ``sys.meta_path`` hands out TensorFlow's own module spec with a loader that
runs TensorFlow's ``__init__`` and then installs the recorder (before any Session can exist).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys


def _install() -> None:
    from tf_autoplace.rewrite import sessions  # noqa: F401  installs the recorder on import


class _AfterTensorFlow(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` once, through the other finders, and wraps its loader."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                try:
                    _install()
                except Exception:  # noqa: BLE001 - never break the user's import of TF;
                    pass  # the recorder is then installed at tf_autoplace's first use
        spec.loader = Loader()
        return spec


def start() -> None:
    """Record Session runs from now on (at once if TensorFlow is imported, else right after
    it is)."""
    if "tensorflow" in sys.modules:
        _install()
    elif not any(isinstance(f, _AfterTensorFlow) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTensorFlow())
