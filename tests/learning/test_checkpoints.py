"""Damaged or hostile saved policies are a ConfigError naming the file and the problem, found
when the policy is loaded (before any search): truncated or corrupted archives, pickled object
arrays (never unpickled), strings, integers, NaN, huge values, a FIFO in place of a file."""

import io
import json
import os
import pickle
import shutil
import zipfile

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.learning import checkpoints
from tf_autoplace.placers import get_placer
from tf_autoplace.placers.gdp.policy import GdpPolicy
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
from tf_autoplace.placers.placeto.search import pretrained_policy_dir
from tf_autoplace.testing import problems

SHIPPED = {PlacetoPolicy: pretrained_policy_dir(2),
           GdpPolicy: os.path.join(os.path.dirname(pretrained_policy_dir(2)), "gdp")}


class Planted:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _weights(directory):
    with np.load(os.path.join(directory, checkpoints.WEIGHTS_FILE)) as data:
        return {k: data[k] for k in data.files}


def _damaged(tmp_path, source, damage):
    directory = tmp_path / "policy"
    shutil.copytree(source, directory)
    weights = directory / checkpoints.WEIGHTS_FILE
    raw, arrays = weights.read_bytes(), _weights(source)
    weights.unlink()
    damage(str(weights), raw, arrays)
    return str(directory)


def _npy_header(shape):
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False,
                                              "shape": shape})
    return out.getvalue()


def _zip(path, members):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _savez(fn):
    return lambda path, raw, arrays: np.savez(path, **{k: fn(w) for k, w in arrays.items()})


DAMAGES = {
    "truncated": (lambda path, raw, arrays: open(path, "wb").write(raw[:len(raw) // 2]),
                  r"weights.npz': it is not a whole npz archive \(truncated or damaged"),
    "corrupted": (lambda path, raw, arrays: open(path, "wb").write(raw[:90] + bytes(64) +
                                                                     raw[154:]),
                  r"weights.npz': it is not a whole npz archive \(truncated or damaged"),
    "not a zip": (lambda path, raw, arrays: open(path, "wb").write(b"garbage" * 10),
                  "weights.npz' is not an npz archive"),
    "NaN": (_savez(lambda w: np.full_like(w, np.nan)),
            "weight 'w000' holds NaN or infinite values"),
    "inf": (_savez(lambda w: np.where(np.arange(w.size).reshape(w.shape) == 0, np.inf, w)),
            "weight 'w000' holds NaN or infinite values"),
    "1e38": (_savez(lambda w: np.full_like(w, 1e38)),
             r"weight 'w000' holds 1e\+38, beyond the \+-1e\+10"),
    "int": (_savez(lambda w: w.astype(np.int32)), "weight 'w000' is int32, not floating point"),
    "strings": (_savez(lambda w: w.astype(str)), "weight 'w000' is <U32, not floating point"),
    "objects": (_savez(lambda w: w.astype(object)), r"holds Python objects \(a pickle\)"),
    # A member that is not an array, one whose header declares a terabyte, and a "zip bomb"
    # (100 MB of zeros in about 100 kB): numpy raised AttributeError and MemoryError, and
    # unpacked the bomb before any check.
    "text member": (lambda path, raw, arrays: _zip(path, {"notes.txt": b"hello"}),
                    "its member 'notes.txt' is not a .npy array"),
    "huge header": (lambda path, raw, arrays: _zip(path, {"w000.npy": _npy_header(
        (10**12,)) + bytes(16)}), r"declares an array of 4000000000000 bytes but holds 16"),
    "zip bomb": (lambda path, raw, arrays: _zip(path, {"w000.npy": _npy_header((25 * 10**6,))
                                                       + bytes(10**8)}),
                 r"would unpack to 100000\d+ bytes from \d+ \(a damaged or hostile"),
    "FIFO": (lambda path, raw, arrays: os.mkfifo(path), r"cannot be read \(it is a FIFO"),
    "missing": (lambda path, raw, arrays: None, r"cannot be read \(No such file"),
    "empty": (lambda path, raw, arrays: np.savez(path), "holds no weights"),
}


@pytest.mark.parametrize("policy_class", sorted(SHIPPED, key=lambda c: c.__name__))
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_policy_is_a_config_error_naming_the_file(tmp_path, policy_class, damage):
    make, message = DAMAGES[damage]
    directory = _damaged(tmp_path, SHIPPED[policy_class], make)
    with pytest.raises(ConfigError, match=message) as e:
        policy_class.load(directory)
    assert f"cannot load {policy_class.kind} from {directory!r}" in str(e.value)


def test_a_pickle_in_a_policy_is_never_run(tmp_path):
    marker = tmp_path / "executed"
    directory = _damaged(tmp_path, SHIPPED[PlacetoPolicy], lambda path, raw, arrays: np.savez(
        path, w000=np.array([Planted(str(marker))], dtype=object)))
    with pytest.raises(ConfigError, match=r"holds Python objects \(a pickle\)"):
        PlacetoPolicy.load(directory)
    with open(os.path.join(directory, checkpoints.WEIGHTS_FILE), "wb") as f:
        pickle.dump(Planted(str(marker)), f)  # a bare pickle named weights.npz
    with pytest.raises(ConfigError, match="is not an npz archive"):
        PlacetoPolicy.load(directory)
    assert not marker.exists()


def test_a_damaged_policy_json_is_a_config_error(tmp_path):
    directory = _damaged(tmp_path, SHIPPED[PlacetoPolicy], lambda path, raw, arrays:
                         open(path, "wb").write(raw))
    config = os.path.join(directory, checkpoints.CONFIG_FILE)
    with open(config, "wb") as f:
        f.write(b"\xff{not json")
    with pytest.raises(ConfigError, match=r"policy.json' is not JSON"):
        PlacetoPolicy.load(directory)
    with open(config, "w", encoding="utf-8") as f:  # RecursionError in json, uncaught before
        f.write("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match=r"policy.json' nests its JSON too deeply"):
        PlacetoPolicy.load(directory)
    # Deep enough to exhaust Python's recursion, shallow enough for json: the check of the
    # settings' sizes walked it recursively (a RecursionError out of the door).
    with open(os.path.join(SHIPPED[PlacetoPolicy], checkpoints.CONFIG_FILE),
              encoding="utf-8") as f:
        settings = dict(json.load(f), embed="X")
    with open(config, "w", encoding="utf-8") as f:
        f.write(json.dumps(settings).replace('"X"', "[" * 700 + "]" * 700))
    with pytest.raises(ConfigError, match="embed must be an int"):
        PlacetoPolicy.load(directory)


@pytest.mark.parametrize("placer", ["placeto", "hdp", "gdp"])
def test_a_damaged_policy_stops_the_placer_at_the_door(tmp_path, placer):
    directory = _damaged(tmp_path, SHIPPED[PlacetoPolicy], DAMAGES["NaN"][0])
    with pytest.raises(ConfigError, match=rf"cannot load a {placer} policy from .*holds NaN"):
        get_placer(placer, policy=directory)  # before any graph is read


def test_weights_that_overflow_on_the_graph_are_a_config_error_not_a_crash(tmp_path):
    # Within the magnitude a file may hold, yet far beyond any trained policy: the network's
    # outputs overflow on the first step.
    problem = problems.random_problem(40, 2, max_groups=20)
    directory = _damaged(tmp_path, SHIPPED[PlacetoPolicy], _savez(lambda w: np.full_like(w,
                                                                                        100)))
    with pytest.raises(ConfigError, match=rf"the policy loaded from {directory!r} gives NaN or "
                                          "infinite outputs at step 0"):
        get_placer("placeto", policy=directory, options=["max_samples=16"]).place(problem)


def test_a_policy_json_with_a_giant_size_is_refused_before_building(tmp_path):
    directory = _damaged(tmp_path, SHIPPED[PlacetoPolicy], lambda path, raw, arrays:
                         open(path, "wb").write(raw))
    config = os.path.join(directory, checkpoints.CONFIG_FILE)
    with open(config, encoding="utf-8") as f:
        settings = json.load(f)
    with open(config, "w", encoding="utf-8") as f:
        json.dump(dict(settings, hidden=10**9, seed=2**40), f)  # 10^18 floats if built
    with pytest.raises(ConfigError, match=r"sets hidden=1000000000, beyond the 4096"):
        PlacetoPolicy.load(directory)


@pytest.mark.parametrize("where, message", [
    ("under_a_file/policy", "its parent directory .* does not exist"),
    ("missing/policy", "its parent directory .* does not exist"),
    ("nul\0name", "cannot save the policy to"),
])
def test_saving_a_policy_where_it_cannot_go_is_a_config_error_leaving_nothing(
        tmp_path, where, message):
    # FileExistsError, FileNotFoundError and ValueError came out raw, and a missing parent
    # was created and left behind when the save then failed.
    from tf_autoplace.errors import ConfigError
    from tf_autoplace.learning.trained_policy import TrainedPolicy

    class Network:  # what a policy class does on save, in miniature
        def set_weights(self, weights):
            pass

        def save(self, directory):
            with open(os.path.join(directory, "policy.json"), "w") as f:
                f.write("{}")

    (tmp_path / "under_a_file").write_text("a file")
    before = sorted(os.listdir(tmp_path))
    policy = TrainedPolicy(policy_class=Network, config={}, weights=(), manifest={})
    with pytest.raises(ConfigError, match=message):
        policy.save(str(tmp_path / where))
    assert sorted(os.listdir(tmp_path)) == before
