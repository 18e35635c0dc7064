"""``tf-autoplace COMMAND --help``: exit status 0, every command's flags and readable examples,
without importing TensorFlow (so without its start-up log lines and its seconds)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from tf_autoplace.cli.main import COMMANDS

# Runs the command line's main as `python -m tf_autoplace.cli` does, then says whether
# TensorFlow (or numba) was imported on the way.
WRAPPER = """
import sys
from tf_autoplace.cli.main import main
code = main(["tf-autoplace", *sys.argv[1:]])
print("IMPORTED", sorted(m for m in ("tensorflow", "numba") if m in sys.modules))
sys.exit(code)
"""


def _env(repo_root):
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (repo_root, os.environ.get("PYTHONPATH")) if p))


def test_python_m_cli_place_help_exits_0_with_no_tensorflow_log_lines(repo_root):
    proc = subprocess.run([sys.executable, "-m", "tf_autoplace.cli", "place", "--help"],
                          cwd=repo_root, env=_env(repo_root), text=True, capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # TensorFlow logs its start-up to stderr: none here
    assert proc.stdout.startswith("usage: tf-autoplace place [--flag=value ...]")
    assert "--input:" in proc.stdout and "--cluster:" in proc.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_help_lists_its_flags_without_importing_tensorflow(command, repo_root):
    proc = subprocess.run([sys.executable, "-c", WRAPPER, command, "--help"], cwd=repo_root,
                          env=_env(repo_root), text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out, imported = proc.stdout.rsplit("IMPORTED", 1)
    assert imported.strip() == "[]"
    doc, listing = out.split("\nflags:\n", 1)
    assert f"tf-autoplace {command}" in doc
    assert re.search(r"^  --\w+: ", listing, re.M)
    # Examples keep their line continuations: no run of spaces where a "\" and a newline were.
    assert not [line for line in doc.splitlines() if re.search(r"\S {5,}\S", line)]
    continued = [line for line in doc.splitlines() if line.endswith("\\")]
    if command in ("place", "place-model"):
        assert continued  # their multi-line examples


def _one_error_line_before_tensorflow(argv, repo_root) -> str:
    """The one ``error:`` line of ``tf-autoplace ARGV``, which must fail (status 1, no
    traceback) before TensorFlow or numba is imported."""
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *argv], cwd=repo_root,
                          env=dict(_env(repo_root), TF_CPP_MIN_LOG_LEVEL="3"), text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.rsplit("IMPORTED", 1)[1].strip() == "[]"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_profile_without_a_graph_or_model_is_one_error_line_before_tensorflow(repo_root,
                                                                             tmp_path):
    # It printed the command's whole usage (about 90 lines) after TensorFlow had loaded.
    out = f"--out_profile={tmp_path / 'p.pbtxt'}"
    assert _one_error_line_before_tensorflow(["profile", out], repo_root) == (
        "error: give exactly one of --graph and --model")
    assert "--feed_shape gives the inputs of a --graph" in _one_error_line_before_tensorflow(
        ["profile", out, "--model=lstm", "--feed_shape=x:1"], repo_root)


@pytest.mark.slow  # a process of its own that loads TensorFlow: seconds
def test_fidelity_with_an_unknown_graph_is_one_error_line(repo_root):
    # It printed the command's whole usage after TensorFlow had loaded, the reason last.
    proc = subprocess.run([sys.executable, "-m", "tf_autoplace.cli", "fidelity",
                           "--graphs=bogus"], cwd=repo_root,
                          env=dict(_env(repo_root), TF_CPP_MIN_LOG_LEVEL="3"), text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 1 and "flags:" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "unknown graphs ['bogus']" in errors[0], proc.stderr[-2000:]


@pytest.mark.parametrize("argv, message", [
    (["train-placeto", "--family_knobs={bad"], "--family_knobs must be a JSON object"),
    (["train-placeto", "--family_knobs=[1]"], "--family_knobs must be a JSON object"),
    (["train-placeto", "--family_knobs=" + "[" * 20_000 + "]" * 20_000],  # RecursionError
     "--family_knobs must be a JSON object"),
    (["train-placeto", "--cluster=nosuch"], "cannot read cluster spec 'nosuch'"),
    (["train-gdp", "--clusters=nosuch"], "cannot read cluster spec 'nosuch'"),
    (["train-gdp", "--keep_offsets=0,a"], "--keep_offsets must be numbers"),
])
def test_the_trainers_end_bad_settings_in_one_error_line(argv, message, repo_root, tmp_path):
    out = tmp_path / "policy"
    assert message in _one_error_line_before_tensorflow([*argv, f"--out_dir={out}"], repo_root)
    assert not out.exists()


@pytest.mark.slow  # a process of its own that loads TensorFlow: seconds
def test_train_placeto_on_one_device_fails_before_building_anything(repo_root, tmp_path):
    # It failed after every graph was built (11 minutes with the defaults), not naming --cluster.
    one = tmp_path / "one_cpu.pbtxt"
    text = (pathlib.Path(repo_root) / "testdata" / "cpu2.pbtxt").read_text()
    one.write_text(text[:text.rindex("# one logical CPU device")])
    out = tmp_path / "policy"
    proc = subprocess.run([sys.executable, "-c", WRAPPER, "train-placeto", f"--cluster={one}",
                           f"--out_dir={out}", f"--cache_dir={tmp_path / 'cache'}"],
                          cwd=repo_root, env=dict(_env(repo_root), TF_CPP_MIN_LOG_LEVEL="3"),
                          text=True, capture_output=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "--cluster" in errors[0], proc.stderr
    assert "has 1 device(s) a policy can place ops on" in errors[0]
    assert not out.exists() and not (tmp_path / "cache").exists()  # nothing built


def test_benchmark_checks_its_outputs_first_and_says_what_is_wrong_in_one_line(repo_root,
                                                                               tmp_path):
    missing = tmp_path / "no_such_dir" / "table.md"
    error = _one_error_line_before_tensorflow(["benchmark", "--quick", f"--out_md={missing}"],
                                              repo_root)
    assert "--out_md" in error and "does not exist" in error


@pytest.mark.parametrize("flag", ["--out_md", "--out_json"])
def test_fidelity_checks_its_outputs_before_measuring(flag, repo_root, tmp_path):
    # It measured for minutes, then ended in a FileNotFoundError traceback, the figures lost.
    missing = tmp_path / "no_such_dir" / "out"
    for argv in (["fidelity", "--graphs=lstm"], ["fidelity", "--components"]):
        error = _one_error_line_before_tensorflow([*argv, f"{flag}={missing}"], repo_root)
        assert flag in error and "does not exist" in error


def test_profile_checks_its_outputs_before_measuring(repo_root, tmp_path):
    # Measuring takes minutes; an output it cannot write, or one that would replace the graph
    # it profiles or the other output, is said at once.
    graph = tmp_path / "g.pbtxt"
    graph.write_text("node { name: 'a' op: 'NoOp' }\n")
    profile = tmp_path / "p.pbtxt"
    for outputs, message in [
            ([f"--out_profile={tmp_path / 'no_such_dir' / 'p.pbtxt'}"], "does not exist"),
            ([f"--out_profile={graph}"], "--out_profile and --graph are the same file"),
            ([f"--out_profile={profile}", f"--out_cluster={profile}"],
             "--out_cluster and --out_profile are the same file")]:
        error = _one_error_line_before_tensorflow(["profile", f"--graph={graph}", *outputs],
                                                  repo_root)
        assert message in error, error
    assert graph.read_text() == "node { name: 'a' op: 'NoOp' }\n" and not profile.exists()


def test_profile_refuses_transfer_steps_below_one_when_parsing_its_flags(repo_root):
    # Found late before: only after the op profile was measured and written.
    code = ("from absl import flags\nfrom tf_autoplace.cli import profile_flags\n"
            "flags.FLAGS(['profile', '--out_profile=p', '--transfer_steps=%s'])\n")
    for value, ok in (("-5", False), ("0", False), ("1", True)):
        proc = subprocess.run([sys.executable, "-c", code % value], cwd=repo_root,
                              env=_env(repo_root), text=True, capture_output=True, timeout=120)
        assert (proc.returncode == 0) == ok, proc.stderr
        if not ok:
            assert "flag --transfer_steps=" in proc.stderr and "positive" in proc.stderr


@pytest.mark.parametrize("argv", [["profile", "--steps=abc"], ["place", "--seed=x"],
                                  ["benchmark", "--budget_s=soon"]])
def test_a_flag_value_absl_cannot_read_fails_before_tensorflow(argv, repo_root):
    """absl's own message and status 1, at once: not after seconds of importing TensorFlow."""
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *argv], cwd=repo_root,
                          env=_env(repo_root), text=True, capture_output=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.rsplit("IMPORTED", 1)[1].strip() == "[]"
    flag = argv[1].partition("=")[0]
    assert proc.stderr.startswith(f"FATAL Flags parsing error: flag {argv[1]}: "), proc.stderr
    assert flag in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv, words", [
    (["place", "--input=m.pb", "--output=p.pb", "--cache", "my_cache"], "'my_cache'"),
    (["place-model", "--model=inception_v3", "extra", "words"], "'extra', 'words'")])
def test_an_argument_that_is_not_a_flag_is_one_error_line_before_tensorflow(argv, words,
                                                                             repo_root):
    # absl left it unread: `--cache DIR` set --cache and the entry went to the default cache.
    line = _one_error_line_before_tensorflow(argv, repo_root)
    assert line.startswith(f"error: unexpected argument{'s' if ',' in words else ''} {words}: "
                           f"tf-autoplace {argv[0]} takes only flags"), line


# A command's main that prints far more than a pipe holds, as a report of a large graph does.
LONG_OUTPUT = """
import sys
from tf_autoplace.cli import main as cli_main

def run(name):
    for _ in range(10_000):
        print("x" * 100)
    return 0

cli_main._run = run
sys.exit(cli_main.main(["tf-autoplace", *sys.argv[1:]]))
"""


@pytest.mark.parametrize("argv", [["place", "--input=x.pb"], ["--help"], ["place", "--help"]])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(argv, repo_root):
    # `tf-autoplace place-model ... | head -1` ended with a BrokenPipeError traceback and
    # status 1 (a command's report, and the usage text, written after `head` had gone).
    proc = subprocess.Popen([sys.executable, "-c", LONG_OUTPUT, *argv], cwd=repo_root,
                            env=_env(repo_root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err  # 128 + SIGPIPE, as a shell reports it
    assert err == ""


def test_train_gdps_default_clusters_are_found_outside_the_checkout(repo_root, tmp_path,
                                                                      monkeypatch):
    # The default was testdata/k80x*.pbtxt, relative to the checkout: `tf-autoplace train-gdp
    # --out_dir=DIR`, as the README gives it, failed anywhere else (an installed package has
    # no testdata/). The default is read from the flags module's source (importing it here
    # would define its flags in this process).
    import ast

    from tf_autoplace.core.cluster import resolve_cluster

    source = pathlib.Path(repo_root, "tf_autoplace", "cli", "train_gdp_flags.py").read_text()
    (default,) = [ast.literal_eval(call.args[1]) for call in ast.walk(ast.parse(source))
                  if isinstance(call, ast.Call) and getattr(call.func, "attr", "") ==
                  "DEFINE_list" and ast.literal_eval(call.args[0]) == "clusters"]
    monkeypatch.chdir(tmp_path)
    assert [resolve_cluster(name).num_devices for name in default] == [3, 5, 9]


@pytest.mark.slow  # the command imports TensorFlow: seconds
def test_a_placer_item_with_a_budget_it_refuses_fails_before_any_model_is_built(repo_root):
    # benchmark --placers=auto@0 passed the early checks, built a model, then ended in a
    # ConfigError traceback: the check ignored the item's own @SECONDS.
    proc = subprocess.run([sys.executable, "-c", WRAPPER, "benchmark", "--quick",
                           "--pairs=rnnlm2:k80x2", "--placers=auto@0"], cwd=repo_root,
                          env=dict(_env(repo_root), TF_CPP_MIN_LOG_LEVEL="3"), text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "budget_s" in errors[0], proc.stderr[-2000:]
    assert "building" not in proc.stderr


PLACE_MODEL_BUDGET = """
import sys
from tf_autoplace.cli import main as cli_main, place_model

def stop(name, **knobs):  # the placer is made before the model is built
    raise SystemExit(f"placer budget {placer[0].config.budget_s}")

placer = []
made = place_model.get_placer
place_model.get_placer = lambda *a, **k: placer.append(made(*a, **k)) or placer[0]
place_model.zoo.build = stop
sys.exit(cli_main.main(["tf-autoplace", *sys.argv[1:]]))
"""


@pytest.mark.slow  # the command imports TensorFlow: seconds
def test_place_model_takes_a_search_budget(repo_root):
    # place-model had no --budget_s (a place-model user could not cap auto or the learned
    # placers), and --placer_option=budget_s=8 pointed to that missing flag.
    proc = subprocess.run([sys.executable, "-c", PLACE_MODEL_BUDGET, "place-model",
                           "--placer=auto", "--budget_s=7.5"], cwd=repo_root,
                          env=dict(_env(repo_root), TF_CPP_MIN_LOG_LEVEL="3"), text=True,
                          capture_output=True, timeout=300)
    assert "placer budget 7.5" in proc.stderr, proc.stderr[-2000:]


# A command that writes an output file (as one set, as `place` does), then prints its report.
WRITES_THEN_PRINTS = """
import sys
from tf_autoplace.cli import main as cli_main
from tf_autoplace.outputs import files

def run(name):
    if len(sys.argv) > 1 and sys.argv[1].startswith("--output="):
        files.write_output(sys.argv[1].split("=", 1)[1], b"placed")
    print("report of d\\u00efr/\\u00f6ut.pb")
    return 0

cli_main._run = run
sys.exit(cli_main.main(["tf-autoplace", *sys.argv[1:]]))
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("writes", [False, True])
def test_an_unwritable_standard_output_is_one_line_that_says_what_was_written(
        writes, repo_root, tmp_path):
    # `tf-autoplace place ... > /dev/full` ended in an OSError traceback, with status 1 and
    # nothing said of the outputs it had already replaced.
    out = tmp_path / "o.pb"
    argv = ["place"] + ([f"--output={out}"] if writes else [])
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-c", WRITES_THEN_PRINTS, *argv], cwd=repo_root,
                              env=_env(repo_root), stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("tf-autoplace place: cannot write to standard output ([Errno 28]")
    assert len(line.splitlines()) == 1
    if writes:
        assert line.endswith(f"{out} was written whole before that")
        assert out.read_bytes() == b"placed"
    else:
        assert line.endswith("nothing was written")


def test_what_standard_output_cannot_encode_is_escaped(repo_root):
    # A non-ASCII output path printed to an ASCII stdout: a UnicodeEncodeError traceback, and
    # status 1 after the outputs were written.
    proc = subprocess.run([sys.executable, "-c", WRITES_THEN_PRINTS, "place"], cwd=repo_root,
                          env={**_env(repo_root), "PYTHONIOENCODING": "ascii"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout == "report of d\\xefr/\\xf6ut.pb\n"
