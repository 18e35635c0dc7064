"""tf_autoplace.outputs.files: outputs checked before the work, written only after it, all or nothing,
with the user's umask; and the SavedModel door, which writes through it."""

import os
import shutil
import stat

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace import tf2
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import SingleDevicePlacer
from tf_autoplace.outputs import files

from tests.conftest import REPO

TESTDATA = os.path.join(REPO, "testdata")
CPU2 = os.path.join(TESTDATA, "cpu2_independent.pbtxt")


def _listing(directory):
    return sorted(os.listdir(directory))


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("name, directory, message", [
    ("", False, "must be a non-empty path, got ''"),
    ("a\0b", False, "'a\\\\x00b' holds a NUL character"),
    ("missing/out.pb", False,
     "'missing/out.pb': the directory '.*missing' does not exist \\(it is not created\\)"),
    ("new/a/b/placed", True, "'new/a/b/placed': the directory '.*new/a/b' does not exist"),
    ("a_file/report.json", False, "'a_file/report.json': '.*a_file' is a file, not a "
                                  "directory"),
    ("a_dir", False, "'a_dir' is a directory; expected a file path"),
    ("full_dir", True, "'full_dir' exists; refusing to overwrite it"),
    ("a_file", True, "'a_file' exists; refusing to overwrite it"),
    ("a_fifo", False, "'a_fifo' is not a regular file \\(a device, FIFO or socket\\)"),
])
def test_unwritable_output_paths_are_config_errors_before_any_work(tmp_path, monkeypatch, name,
                                                                   directory, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "full_dir").mkdir()
    (tmp_path / "full_dir" / "keep").write_text("x")
    (tmp_path / "a_file").write_text("x")
    os.mkfifo(tmp_path / "a_fifo")
    before = _listing(tmp_path)
    with pytest.raises(ConfigError, match="--out " + message):
        files.check_output_path(name, "--out", directory=directory)
    assert _listing(tmp_path) == before


def test_writable_output_paths_come_back_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "old.pb").write_bytes(b"old")
    assert files.check_output_path("new.pb", "--out") == str(tmp_path / "new.pb")
    assert files.check_output_path("old.pb", "--out") == str(tmp_path / "old.pb")  # replaced
    assert files.check_output_path("empty", "--out", directory=True) == str(tmp_path / "empty")


def test_outputs_appear_together_with_the_umask_and_replace_old_ones(tmp_path):
    (tmp_path / "old.pb").write_bytes(b"old")
    (tmp_path / "model").mkdir()  # an empty directory may be replaced
    previous = os.umask(0o027)
    try:
        assert files.umask() == 0o027
        outputs = files.Outputs()
        outputs.add_file(tmp_path / "old.pb", b"new")
        outputs.add_file(tmp_path / "report.json", b"{}")
        outputs.add_directory(tmp_path / "model",
                              lambda d: open(os.path.join(d, "saved_model.pb"), "wb").close())
        assert _listing(tmp_path) == ["model", "old.pb"]  # nothing until commit
        outputs.commit()
    finally:
        os.umask(previous)
    assert _listing(tmp_path) == ["model", "old.pb", "report.json"]
    assert (tmp_path / "old.pb").read_bytes() == b"new"
    assert _listing(tmp_path / "model") == ["saved_model.pb"]
    # What open() and mkdir() give under umask 027, not mkstemp's 0600 / mkdtemp's 0700.
    assert _mode(tmp_path / "report.json") == _mode(tmp_path / "old.pb") == 0o640
    assert _mode(tmp_path / "model") == 0o750


def test_links_at_output_paths_are_replaced_never_followed(tmp_path):
    # A link to an empty directory where a new directory goes (the check takes it: it reads as
    # an empty directory) and a link to a file where a file goes: the set is written whole, the
    # links replaced by the outputs, their targets untouched and nothing left behind.
    (tmp_path / "empty").mkdir()
    (tmp_path / "policy").symlink_to("empty")
    (tmp_path / "target.json").write_bytes(b"old")
    (tmp_path / "report.json").symlink_to("target.json")
    for name, directory in (("policy", True), ("report.json", False)):
        files.check_output_path(tmp_path / name, "--out", directory=directory)
    outputs = files.Outputs()
    outputs.add_file(tmp_path / "placed.pb", b"graph")
    outputs.add_directory(tmp_path / "policy",
                          lambda d: open(os.path.join(d, "weights"), "wb").close())
    outputs.add_file(tmp_path / "report.json", b"{}")
    outputs.commit()
    assert _listing(tmp_path) == ["empty", "placed.pb", "policy", "report.json", "target.json"]
    assert not (tmp_path / "policy").is_symlink() and _listing(tmp_path / "policy") == ["weights"]
    assert not (tmp_path / "report.json").is_symlink()
    assert (tmp_path / "report.json").read_bytes() == b"{}"
    assert _listing(tmp_path / "empty") == [] and (tmp_path / "target.json").read_bytes() == b"old"


@pytest.mark.parametrize("interrupt", [OSError("disk full"), KeyboardInterrupt(),
                                       SystemExit(143)])
def test_an_error_or_interrupt_while_writing_leaves_nothing(tmp_path, interrupt):
    def write(directory):
        open(os.path.join(directory, "half"), "wb").close()
        raise interrupt

    outputs = files.Outputs()
    outputs.add_file(tmp_path / "placed.pb", b"graph")
    outputs.add_directory(tmp_path / "model", write)
    outputs.add_file(tmp_path / "report.json", b"{}")
    with pytest.raises(type(interrupt)):
        outputs.commit()
    assert _listing(tmp_path) == []  # not even the first output's temporary


def test_a_full_disk_names_the_output_it_could_not_write(tmp_path, monkeypatch):
    # `tf-autoplace place` onto a full disk said "No space left on device" and no path.
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_stage = files._stage

    def stage(path, content, mask):  # the journal fits; the output does not
        monkeypatch.setattr(files.os, "fsync", full)
        real_stage(path, content, mask)

    monkeypatch.setattr(files, "_stage", stage)
    outputs = files.Outputs()
    outputs.add_file(tmp_path / "placed.pb", b"graph")
    with pytest.raises(OSError, match=r"No space left on device: '.*placed\.pb'") as raised:
        outputs.commit()
    assert raised.value.errno == errno.ENOSPC
    assert _listing(tmp_path) == []
    monkeypatch.setattr(files, "_stage", real_stage)  # now the journal does not fit either
    with pytest.raises(OSError, match=f"No space left on device: '{tmp_path}'"):
        outputs.add_file(tmp_path / "placed.pb", b"graph")
        outputs.commit()
    assert _listing(tmp_path) == []


def test_a_directory_another_run_made_meanwhile_fails_this_set_whole(tmp_path):
    # Two runs checked an absent output directory; the other committed first. This one must
    # fail as a whole, leaving the other's outputs and no journal a later run would finish.
    outputs = files.Outputs()
    outputs.add_file(tmp_path / "report.json", b"mine")
    outputs.add_directory(tmp_path / "model", lambda d: open(os.path.join(d, "x"), "wb").close())
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "theirs").write_bytes(b"theirs")
    (tmp_path / "report.json").write_bytes(b"theirs")
    with pytest.raises(ConfigError, match="model' was written by another run"):
        outputs.commit()
    assert _listing(tmp_path) == ["model", "report.json"]
    assert _listing(tmp_path / "model") == ["theirs"]
    assert (tmp_path / "report.json").read_bytes() == b"theirs"


@pytest.mark.skipif(files.fcntl is None, reason="no flock on this system")
def test_writers_into_one_directory_take_turns(tmp_path, monkeypatch):
    # While a set is staged, no other writer (nor a recovery) may hold the directory's lock.
    fcntl = files.fcntl
    held = []
    stage = files._stage

    def stage_and_try_the_lock(path, content, mask):
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held.append(False)
        except BlockingIOError:
            held.append(True)
        finally:
            os.close(fd)
        stage(path, content, mask)

    monkeypatch.setattr(files, "_stage", stage_and_try_the_lock)
    outputs = files.Outputs()
    outputs.add_file(tmp_path / "a.pb", b"a")
    outputs.commit()
    assert held == [True] and (tmp_path / "a.pb").read_bytes() == b"a"


# ------------------------------------------------------------------------------ SavedModel
def _tf1_saved_model(path):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 4], name="x")
        w = tf.compat.v1.get_variable("w", [4, 3],
                                      initializer=tf.compat.v1.ones_initializer())
        y = tf.matmul(x, w, name="y")
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(str(path))
            builder.add_meta_graph_and_variables(
                sess, ["serve"], signature_def_map={
                    "serving_default": tf.compat.v1.saved_model.predict_signature_def(
                        {"x": x}, {"y": y})})
            builder.save()


class _Watching(SingleDevicePlacer):
    """Records what the output's directory holds while it places, then may interrupt."""

    def __init__(self, directory, interrupt=None):
        super().__init__()
        self.directory, self.interrupt, self.seen = directory, interrupt, None

    def _place(self, problem, rng):
        self.seen = _listing(self.directory)
        if self.interrupt:
            raise self.interrupt
        return super()._place(problem, rng)


def test_saved_model_output_is_written_only_after_placing_and_whole(tmp_path):
    _tf1_saved_model(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    watch = _Watching(out)
    tf2.place_saved_model(tmp_path / "in", tmp_path / "out" / "placed", cluster=CPU2,
                          placer=watch)
    assert watch.seen == []  # no temporary while placing: SIGKILL then leaves nothing
    assert _listing(out) == ["placed"]
    assert {"saved_model.pb", "variables"} <= set(_listing(out / "placed"))
    assert _mode(out / "placed") == 0o777 & ~files.umask()
    # The same input and seed give the same bytes.
    again = tmp_path / "again"
    again.mkdir()
    tf2.place_saved_model(tmp_path / "in", again / "placed", cluster=CPU2, placer="single")
    assert ((out / "placed" / "saved_model.pb").read_bytes()
            == (again / "placed" / "saved_model.pb").read_bytes())


def test_a_placed_tf_keras_saved_model_says_keras_load_model_cannot_rebuild_it(tmp_path):
    # tf.saved_model.save writes no keras_metadata.pb: the placed copy served its signature,
    # but tf_keras.models.load_model gave a plain object, and nothing said so.
    import tf_keras

    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(3)])
    model.save(str(tmp_path / "in"), save_format="tf")
    report = tf2.place_saved_model(tmp_path / "in", tmp_path / "placed", cluster=CPU2,
                                   placer="single", progress=False)
    notes = " | ".join(report.notes)
    assert "tf_keras SavedModel (keras_metadata.pb)" in notes, notes
    assert "tf_keras.models.load_model reads it as a plain object" in notes
    _tf1_saved_model(tmp_path / "tf1")  # no Keras metadata, no such note
    report = tf2.place_saved_model(tmp_path / "tf1", tmp_path / "tf1_placed", cluster=CPU2,
                                   placer="single", progress=False)
    assert not any("keras_metadata" in n for n in report.notes)


def test_a_tf2_saved_model_keeps_its_assets_extra(tmp_path):
    # TF Serving's warm-up requests live in assets.extra/, which tf.saved_model.save never
    # writes: the placed TF2 SavedModel came out without it (the TF1 path copies it).
    module = tf.Module()
    module.f = tf.function(lambda x: x * 2, input_signature=[tf.TensorSpec([2], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "in"))
    (tmp_path / "in" / "assets.extra").mkdir()
    (tmp_path / "in" / "assets.extra" / "tf_serving_warmup_requests").write_bytes(b"\x01\x02")
    # A link the server resolves itself, dangling here: copied as the link it is (copying
    # its target failed the whole placement with a raw list of shutil's errors).
    os.symlink("/nonexistent/warmup", tmp_path / "in" / "assets.extra" / "link")
    tf2.place_saved_model(tmp_path / "in", tmp_path / "placed", cluster=CPU2, placer="single",
                          progress=False)
    assert (tmp_path / "placed" / "assets.extra" / "tf_serving_warmup_requests"
            ).read_bytes() == b"\x01\x02"
    assert os.readlink(tmp_path / "placed" / "assets.extra" / "link") == "/nonexistent/warmup"


def _tf2_saved_model(path):
    module = tf.Module()
    module.f = tf.function(lambda x: x * 2, input_signature=[tf.TensorSpec([2], tf.float32)])
    tf.saved_model.save(module, str(path))


def _saved_models(root):
    """A small TF2 and a small TF1 SavedModel, each at ``root/<kind>/models/m/1`` (a model
    server's layout: versions beside each other under the model's name)."""
    models = {}
    for kind, make in (("tf2", _tf2_saved_model), ("tf1", _tf1_saved_model)):
        models[kind] = root / kind / "models" / "m" / "1"
        models[kind].parent.mkdir(parents=True)
        make(models[kind])
    return models


def _place(model, out):
    return tf2.place_saved_model(model, out, cluster=CPU2, placer="single", progress=False)


def test_links_in_assets_extra_are_followed_so_the_placed_copy_stands_alone(tmp_path):
    # A warm-up file shared by the versions, linked relatively from outside the model: the
    # link was copied as a link and dangled in the placed copy, silently (TF Serving lost its
    # warm-up requests).
    for kind, model in _saved_models(tmp_path).items():
        (model.parent / "warmup").write_bytes(b"WARMUP")
        (model.parent / "shared").mkdir()
        (model.parent / "shared" / "f").write_bytes(b"SHARED")
        (model / "assets.extra").mkdir()
        os.symlink("../../warmup", model / "assets.extra" / "tf_serving_warmup_requests")
        os.symlink("../../shared", model / "assets.extra" / "shared")
        out = tmp_path / kind / "placed"
        _place(model, out)
        warmup = out / "assets.extra" / "tf_serving_warmup_requests"
        assert not warmup.is_symlink(), (kind, os.readlink(warmup))
        assert warmup.read_bytes() == b"WARMUP", kind
        assert not (out / "assets.extra" / "shared").is_symlink(), kind
        assert (out / "assets.extra" / "shared" / "f").read_bytes() == b"SHARED", kind
        assert os.readlink(model / "assets.extra" / "shared") == "../../shared"  # input as is


def test_dangling_links_in_assets_are_kept_as_the_same_links(tmp_path):
    # A link that dangles in the input must not fail the placement: a TF1 SavedModel's
    # assets/ holding one failed with shutil's raw list of errors.
    for kind, model in _saved_models(tmp_path).items():
        subs = ("assets", "assets.extra") if kind == "tf1" else ("assets.extra",)
        for sub in subs:
            (model / sub).mkdir(exist_ok=True)
            os.symlink("/nonexistent/stale", model / sub / "stale")
            os.symlink("../nowhere", model / sub / "relative")
        out = tmp_path / kind / "placed"
        _place(model, out)
        for sub in subs:
            assert os.readlink(out / sub / "stale") == "/nonexistent/stale", (kind, sub)
            assert os.readlink(out / sub / "relative") == "../nowhere", (kind, sub)


def test_links_back_into_assets_extra_become_links_within_the_copy(tmp_path):
    # An absolute link to assets.extra itself was kept as it was: the placed copy pointed
    # back at the input. A link to the model's directory (..) copies the model once, where
    # assets.extra, reached again, was left out without a word.
    for kind, model in _saved_models(tmp_path).items():
        extra = model / "assets.extra"
        extra.mkdir()
        (extra / "warmup").write_bytes(b"WARMUP")
        os.symlink(str(extra), extra / "self")
        os.symlink("..", extra / "up")
        out = tmp_path / kind / "placed"
        _place(model, out)
        shutil.rmtree(tmp_path / kind / "models")  # the copy stands alone
        assert os.readlink(out / "assets.extra" / "self") == ".", kind
        assert (out / "assets.extra" / "self" / "warmup").read_bytes() == b"WARMUP", kind
        again = out / "assets.extra" / "up" / "assets.extra"
        assert again.is_symlink() and (again / "warmup").read_bytes() == b"WARMUP", kind


def test_a_fifo_in_assets_extra_is_left_out_with_a_note_never_opened(tmp_path):
    # A FIFO (or socket, device) failed the placement with shutil's raw list of errors; it is
    # never opened (reading a FIFO would block): it is left out, and the report says so.
    for kind, model in _saved_models(tmp_path).items():
        (model / "assets.extra").mkdir()
        (model / "assets.extra" / "tf_serving_warmup_requests").write_bytes(b"W")
        os.mkfifo(model / "assets.extra" / "pipe")
        if kind == "tf1":
            (model / "assets").mkdir(exist_ok=True)
            os.mkfifo(model / "assets" / "vocab_pipe")
        out = tmp_path / kind / "placed"
        notes = " | ".join(_place(model, out).notes)
        assert ("assets.extra/pipe in the input SavedModel is a named pipe, not a file: the "
                "placed SavedModel leaves it out") in notes, (kind, notes)
        assert not os.path.lexists(out / "assets.extra" / "pipe"), kind
        assert (out / "assets.extra" / "tf_serving_warmup_requests").read_bytes() == b"W"
        if kind == "tf1":
            assert "assets/vocab_pipe in the input SavedModel is a named pipe" in notes, notes
            assert not os.path.lexists(out / "assets" / "vocab_pipe")


def test_an_assets_extra_that_is_a_file_is_copied_as_it_is(tmp_path):
    # Only a directory was copied: a plain file named assets.extra was dropped without a word.
    for kind, model in _saved_models(tmp_path).items():
        (model / "assets.extra").write_bytes(b"not a directory")
        out = tmp_path / kind / "placed"
        _place(model, out)
        assert (out / "assets.extra").read_bytes() == b"not a directory", kind


def test_saved_model_interrupted_or_failing_leaves_nothing(tmp_path):
    _tf1_saved_model(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(KeyboardInterrupt):
        tf2.place_saved_model(tmp_path / "in", out / "placed", cluster=CPU2,
                              placer=_Watching(out, KeyboardInterrupt()))
    with pytest.raises(ConfigError, match="does not exist"):  # before any work
        tf2.place_saved_model(tmp_path / "in", out / "new" / "a" / "placed", cluster=CPU2,
                              placer=_Watching(out, AssertionError("placed anyway")))
    with pytest.raises(ConfigError, match="seed must be"):
        tf2.place_saved_model(tmp_path / "in", out / "placed", cluster=CPU2, seed=-1)
    assert _listing(out) == []
    assert np.all([not name.startswith(files.TEMP_PREFIX) for name in _listing(tmp_path)])


def test_a_saved_model_output_inside_its_input_is_refused_before_any_work(tmp_path):
    # The Python door wrote the placed SavedModel into the input's directory (the command
    # refused it): the input must stay as it was.
    _tf1_saved_model(tmp_path / "in")
    before = sorted(_listing(tmp_path / "in"))
    (tmp_path / "link").symlink_to(tmp_path / "in")
    for inside in (tmp_path / "in" / "placed", tmp_path / "in" / "variables" / "p",
                   tmp_path / "link" / "placed"):
        with pytest.raises(ConfigError, match="lies in the input SavedModel"):
            tf2.place_saved_model(tmp_path / "in", inside, cluster=CPU2,
                                  placer=_Watching(tmp_path, AssertionError("placed anyway")))
    assert sorted(_listing(tmp_path / "in")) == before


def test_a_tf2_saved_model_that_cannot_be_written_is_an_os_error_leaving_nothing(
        tmp_path, monkeypatch):
    # TF's file system reports a full disk or a size limit as an OpError, not an OSError.
    module = tf.Module()
    module.w = tf.Variable(tf.ones([4, 3]))
    module.f = tf.function(lambda x: tf.matmul(x, module.w),
                           input_signature=[tf.TensorSpec([2, 4], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "in"),
                        signatures={"serving_default": module.f})
    out = tmp_path / "out"
    out.mkdir()

    def full(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", full)
    with pytest.raises(OSError, match="tf.saved_model.save: No space left on device"):
        tf2.place_saved_model(tmp_path / "in", out / "placed", cluster=CPU2, placer="single")
    assert _listing(out) == []
