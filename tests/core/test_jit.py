"""The compiled kernels' disk cache: damaged entries are compiled again, and numba never
caches beside the source (tf_autoplace/core/jit.py)."""

import importlib.util
import logging
import os
import sys

import numba.core.caching
import numpy as np
import pytest

from tf_autoplace.core import jit

SOURCE = "def double(x):\n    return 2 * x\n"


_MODULES = []  # the names _kernel registered in sys.modules


@pytest.fixture(autouse=True)
def _forget_kernel_modules():
    yield
    while _MODULES:
        sys.modules.pop(_MODULES.pop(), None)


def _kernel(src_dir, name):
    """``double`` from a module file in ``src_dir``, freshly imported and decorated (a new
    dispatcher, as in a new process: its first call reads the disk cache). The module is in
    ``sys.modules`` while the test runs, as an imported module is: numba names a kernel's
    module in its cache entry, and one it cannot import by name made the entry's reading
    depend on what else the process had run."""
    return jit.cached_njit(_module(os.path.join(src_dir, "kern.py"), SOURCE, name).double)


def _module(path, source, name):
    """The module ``name`` from the file at ``path`` (written with ``source`` if missing),
    imported afresh and kept in ``sys.modules`` until the test ends."""
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _MODULES.append(name)
    spec.loader.exec_module(module)
    return module


def _damage(cache, how):
    """Damage the one kernel's entry in ``cache`` as ``how`` says."""
    (sub,) = os.listdir(cache)
    sub = os.path.join(cache, sub)
    index = [os.path.join(sub, n) for n in os.listdir(sub) if n.endswith(".nbi")][0]
    data = [os.path.join(sub, n) for n in os.listdir(sub) if n.endswith(".nbc")][0]
    if how == "truncated data":
        os.truncate(data, os.path.getsize(data) // 2)
    elif how == "garbage index":
        with open(index, "wb") as f:
            f.write(b"not a pickle at all")
    elif how == "empty index":
        open(index, "wb").close()
    elif how == "directory for data":
        os.remove(data)
        os.mkdir(data)


@pytest.mark.parametrize("how", ["truncated data", "garbage index", "empty index",
                                 "directory for data"])
def test_a_damaged_cache_entry_is_compiled_again_with_one_warning(tmp_path, monkeypatch,
                                                                  caplog, how):
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    monkeypatch.setenv(jit.CACHE_ENV, str(cache))
    monkeypatch.setattr(jit, "_warned_damaged", False)
    assert _kernel(src, "k0")(21) == 42  # compiled and cached
    again = _kernel(src, "k1")
    assert again(21) == 42 and again.stats.cache_hits  # read from the cache
    _damage(cache, how)
    with caplog.at_level(logging.WARNING):
        assert _kernel(src, "k2")(21) == 42
        assert _kernel(src, "k3")(21) == 42
    assert caplog.text.count("cache entry in") == 1, caplog.text
    if how != "directory for data":  # the entry was written again: the next one reads it
        healed = _kernel(src, "k4")
        assert healed(21) == 42 and healed.stats.cache_hits


def test_running_out_of_memory_while_loading_an_entry_keeps_it(tmp_path, monkeypatch):
    # Under a tight address-space limit a healthy entry's load failed for want of memory and
    # its index was removed as if it were damaged.
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    monkeypatch.setenv(jit.CACHE_ENV, str(cache))
    assert _kernel(src, "m0")(21) == 42  # compiled and cached
    (sub,) = os.listdir(cache)
    index = [n for n in os.listdir(cache / sub) if n.endswith(".nbi")]

    def out_of_memory(self, *args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(numba.core.caching.Cache, "load_overload", out_of_memory)
    with pytest.raises(MemoryError):
        _kernel(src, "m1")(21)
    monkeypatch.undo()
    assert [n for n in os.listdir(cache / sub) if n.endswith(".nbi")] == index  # kept
    monkeypatch.setenv(jit.CACHE_ENV, str(cache))
    again = _kernel(src, "m2")
    assert again(21) == 42 and again.stats.cache_hits


def test_numba_never_caches_beside_the_source_when_the_cache_directory_fails(
        tmp_path, monkeypatch, caplog):
    # A file where numba would make the kernel's subdirectory: numba's next choice is a
    # __pycache__ beside the source, which must not be used.
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    cache.mkdir(mode=0o700)
    monkeypatch.setenv(jit.CACHE_ENV, str(cache))
    monkeypatch.setattr(jit, "_warned", False)
    locator = (getattr(numba.core.caching, "UserProvidedCacheLocator", None)
               or numba.core.caching._UserProvidedCacheLocator)
    (cache / locator.get_suitable_cache_subpath(str(src / "kern.py"))).write_text("")
    with caplog.at_level(logging.WARNING):
        assert _kernel(src, "k5")(21) == 42
    assert not (src / "__pycache__").exists()
    assert "compiled without an on-disk cache" in caplog.text


def test_kernels_run_as_python_with_numbas_jit_disabled(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.setenv(jit.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("NUMBA_DISABLE_JIT", "1")
    try:
        kernel = _kernel(src, "k6")  # numba returns the function itself
        assert kernel(21) == 42 and not hasattr(kernel, "_cache")
    finally:
        monkeypatch.delenv("NUMBA_DISABLE_JIT")
        numba.core.config.reload_config()  # later kernels of this process compile again
    assert _kernel(src, "k7")(21) == 42 and hasattr(_kernel(src, "k8"), "_cache")


WRAP_SOURCE = '''import numba


@numba.njit
def last(a):  # an ordinary kernel: a negative index wraps around
    return a[len(a) - (len(a) + 1)]


def pick(a, i):
    return a[i] + last(a)
'''


def _pick(src_dir, name, negative_indices):
    module = _module(os.path.join(src_dir, f"{name}.py"), WRAP_SOURCE, name)
    return jit.cached_njit(negative_indices=negative_indices)(module.pick)


def _wraps(kernel):
    """How many of numba's negative-index fixes (a compare with 0, a select) the kernel's own
    LLVM function has."""
    ir = kernel.inspect_llvm(kernel.signatures[0])
    name = kernel.overloads[kernel.signatures[0]].fndesc.mangled_name
    body = ir[ir.index(f'@"{name}"') if f'@"{name}"' in ir else ir.index(f"@{name}"):]
    body = body[:body.index("\n}\n")]
    return body.count("select")


def test_a_kernel_without_negative_indices_skips_numbas_wraparound_in_its_own_code_only(
        tmp_path, monkeypatch):
    monkeypatch.setenv(jit.CACHE_ENV, str(tmp_path / "cache"))
    values = np.arange(5) * 10
    plain = _pick(tmp_path, "w1", True)
    fast = _pick(tmp_path, "w2", False)
    assert getattr(fast, "without_wraparound", None) and not hasattr(plain, "without_wraparound")
    # The same results for indices >= 0; the helper it calls keeps its wraparound (a[-1]).
    assert plain(values, 2) == fast(values, 2) == 20 + 40
    assert plain(values, -1) == 40 + 40  # numba's ordinary kernels wrap
    assert _wraps(plain) > 0 and _wraps(fast) == 0


def test_the_simulators_kernels_take_the_path_without_wraparound():
    """A numba whose internals changed would compile them as usual (slower, the same
    results): this says so. The kernels' compiled functions carry the names the replacement
    of numba's index fix looks for."""
    from tf_autoplace.sim import simulator
    from tf_autoplace.testing.problems import random_problem

    problem = random_problem(30, seed=0)
    simulator_ = problem.simulator
    simulator_.summaries(np.zeros((2, problem.graph.num_ops), np.int32), below=1.0)
    simulator_.run(np.zeros(problem.graph.num_ops, np.int32))
    for kernel in (simulator._simulate, simulator._simulate_batch):
        assert kernel.overloads
        for compiled in kernel.overloads.values():
            assert compiled.fndesc.mangled_name.startswith(kernel.without_wraparound)
