"""Where the trainers write a policy: --out_dir checked before any work, and the policy written
whole (a new directory) or its files replaced as one set (a policy's directory, as a shipped
policy's manifest command does)."""

import io
import os

import numpy as np
import pytest

from tf_autoplace.cli import policy_out
from tf_autoplace.errors import ConfigError


def _npz(**arrays) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


OLD_WEIGHTS = _npz(w=np.zeros(2, np.float32))


def _policy_dir(path, weights=OLD_WEIGHTS):
    path.mkdir()
    (path / "policy.json").write_text("{}")
    (path / "weights.npz").write_bytes(weights)
    (path / "manifest.json").write_text("{}")
    return path


def test_a_new_empty_or_policy_directory_may_be_written(tmp_path):
    (tmp_path / "empty").mkdir()
    _policy_dir(tmp_path / "policy")
    for name in ("new", "empty", "policy"):
        assert policy_out.check_out_dir(str(tmp_path / name)) == str(tmp_path / name)


@pytest.mark.parametrize("name, message", [
    ("missing/new", "does not exist"),
    ("others", "exists and lacks a saved policy's manifest.json, policy.json, weights.npz"),
    # A project's own policy.json and manifest.json: they were overwritten, weights.npz added.
    ("project", "exists and lacks a saved policy's weights.npz"),
    ("fake", r"exists and holds no saved policy \(.*weights.npz' is not an npz archive"),
    ("a_file", "exists; refusing to overwrite it"),
    ("", "must be a non-empty path"),
])
def test_anything_else_is_refused_before_any_work(tmp_path, name, message):
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("mine")
    (tmp_path / "a_file").write_text("mine")
    (tmp_path / "project").mkdir()
    for file in ("policy.json", "manifest.json", "README.md"):
        (tmp_path / "project" / file).write_text("{}")
    _policy_dir(tmp_path / "fake", weights=b"not weights")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ConfigError, match=message):
        policy_out.check_out_dir(str(tmp_path / name) if name else "")
    assert sorted(os.listdir(tmp_path)) == before
    assert (tmp_path / "others" / "notes.txt").read_text() == "mine"


def _save(staged, weights):
    with open(os.path.join(staged, "policy.json"), "w") as f:
        f.write('{"new": true}')
    with open(os.path.join(staged, "weights.npz"), "wb") as f:
        f.write(weights)


def test_a_policy_is_written_whole_and_replaces_one_as_a_set(tmp_path):
    new = policy_out.check_out_dir(str(tmp_path / "new"))
    with policy_out.staging_dir(new) as staged:
        _save(staged, b"new weights")
        policy_out.commit(new, staged, {"command": "train"})
    assert sorted(os.listdir(new)) == ["manifest.json", "policy.json", "weights.npz"]
    old = _policy_dir(tmp_path / "old")
    (old / "README").write_text("kept")
    out = policy_out.check_out_dir(str(old))
    with policy_out.staging_dir(out) as staged:
        _save(staged, b"new weights")
        policy_out.commit(out, staged, {"command": "train"})
    assert (old / "weights.npz").read_bytes() == b"new weights"
    assert '"command": "train"' in (old / "manifest.json").read_text()
    assert (old / "README").read_text() == "kept"
    assert sorted(os.listdir(tmp_path)) == ["new", "old"]  # no staging directory left


def test_an_error_before_the_commit_leaves_the_old_policy(tmp_path):
    old = _policy_dir(tmp_path / "old")
    out = policy_out.check_out_dir(str(old))
    with pytest.raises(RuntimeError):
        with policy_out.staging_dir(out) as staged:
            _save(staged, b"new weights")
            raise RuntimeError("training failed")
    assert (old / "weights.npz").read_bytes() == OLD_WEIGHTS
    assert sorted(os.listdir(tmp_path)) == ["old"]


def test_the_trainers_check_out_dir_before_building_anything(tmp_path, run_scripts):
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("mine")
    out = f"--out_dir={tmp_path / 'others'}"
    done = run_scripts({"placeto": ["-m", "tf_autoplace.cli", "train-placeto", out],
                        "gdp": ["-m", "tf_autoplace.cli", "train-gdp", out]})
    for name, (code, _, stderr) in done.items():
        assert code == 1, (name, stderr[-2000:])
        assert "exists and lacks a saved policy's" in stderr.strip().splitlines()[-1], name
    assert os.listdir(tmp_path / "others") == ["notes.txt"]


def test_a_killed_trainers_staging_directory_is_removed_by_the_next(tmp_path):
    # A trainer killed outright (SIGKILL, the OOM killer) left its .train_policy_* directory
    # beside --out_dir for good. One whose process is alive is another trainer's: kept.
    gone = tmp_path / f"{policy_out.STAGING_PREFIX}999999999_abc123"  # above any pid_max
    alive = tmp_path / f"{policy_out.STAGING_PREFIX}{os.getpid()}_def456"
    for path in (gone, alive):
        path.mkdir()
        (path / "weights.npz").write_bytes(b"half")
    with policy_out.staging_dir(str(tmp_path / "new")) as staged:
        assert os.path.basename(staged).startswith(f"{policy_out.STAGING_PREFIX}{os.getpid()}_")
        assert not gone.exists() and alive.exists()


def test_a_place_where_no_policy_can_be_written_fails_before_training(tmp_path, monkeypatch):
    # train-gdp --out_dir=/proc/my_policy passed the early check (root passes os.access),
    # trained to the end, then failed with a traceback: staging is now made first, and a
    # failing write is a one-line ConfigError naming the flag.
    with pytest.raises(ConfigError, match=r"--out_dir: cannot stage the policy beside"):
        with policy_out.staging_dir(str(tmp_path / "missing" / "policy")):
            raise AssertionError("training ran")
    import errno

    from tf_autoplace.outputs import files

    def full(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "new"))

    monkeypatch.setattr(files.Outputs, "commit", full)
    out = policy_out.check_out_dir(str(tmp_path / "new"))
    with pytest.raises(ConfigError, match=r"--out_dir: cannot write the policy to .*new.*No "
                                          "space left on device"):
        with policy_out.staging_dir(out) as staged:
            policy_out.commit(out, staged, {"command": "train"})


def test_the_manifest_records_a_command_that_runs(monkeypatch):
    # `tf-autoplace place ... --save_policy=DIR` recorded "python 'tf-autoplace place' ...".
    from tf_autoplace.learning.checkpoints import command_line

    monkeypatch.setattr("sys.argv", ["tf-autoplace place", "--input=g.pb", "--out=a b"])
    assert command_line() == "tf-autoplace place --input=g.pb '--out=a b'"
    monkeypatch.setattr("sys.argv", ["train.py", "--seed=1"])
    assert command_line() == "python train.py --seed=1"
