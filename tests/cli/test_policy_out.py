"""Where the trainers write a policy: --out_dir checked before any work, and the policy written
whole (a new directory) or its files replaced as one set (a policy's directory, as a shipped
policy's manifest command does)."""

import os

import pytest

from tf_autoplace.cli import policy_out
from tf_autoplace.errors import ConfigError


def _policy_dir(path, weights=b"old weights"):
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
    ("others", "exists and holds no policy"),
    ("a_file", "exists; refusing to overwrite it"),
    ("", "must be a non-empty path"),
])
def test_anything_else_is_refused_before_any_work(tmp_path, name, message):
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("mine")
    (tmp_path / "a_file").write_text("mine")
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
    assert (old / "weights.npz").read_bytes() == b"old weights"
    assert sorted(os.listdir(tmp_path)) == ["old"]


def test_the_trainers_check_out_dir_before_building_anything(tmp_path, run_scripts):
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("mine")
    out = f"--out_dir={tmp_path / 'others'}"
    done = run_scripts({"placeto": ["-m", "tf_autoplace.cli", "train-placeto", out],
                        "gdp": ["-m", "tf_autoplace.cli", "train-gdp", out]})
    for name, (code, _, stderr) in done.items():
        assert code == 1, (name, stderr[-2000:])
        assert "exists and holds no policy" in stderr.strip().splitlines()[-1], name
    assert os.listdir(tmp_path / "others") == ["notes.txt"]
