"""``tf-autoplace train-placeto`` reproduces the shipped policy's recipe: with no flags, and with
the command the policy's manifest records, the tool would train with exactly the settings the
manifest records. The flags are read in a subprocess (the tool defines absl flags of its own),
which stops before anything is built or trained."""

import ast
import json
import os
import shlex

import pytest

from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.placers.placeto.search import pretrained_policy_dir

# For each argv: parse the flags as the tool does, and print the settings as its manifest
# writes them.
CHILD = """
import json, sys
from tf_autoplace.cli import train_placeto
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    train_placeto.FLAGS.unparse_flags()
    train_placeto.FLAGS(argv)
    out[name] = train_placeto.recorded(train_placeto.recipe())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def manifest():
    with open(os.path.join(pretrained_policy_dir(2), "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def settings(manifest, run_scripts, repo_root):
    """{"no flags" | "manifest command": the settings the tool reads from them}."""
    command = shlex.split(manifest["command"])
    # Recorded as it was run: through the checkout's script (which still runs it) or the
    # installed command.
    assert command[:2] in (["python", "tools/train_placeto.py"],
                           ["tf-autoplace", "train-placeto"]), command
    if command[0] == "python":
        assert os.path.isfile(os.path.join(repo_root, command[1]))
    argvs = {"no flags": ["tf-autoplace train-placeto"],
             "manifest command": ["tf-autoplace train-placeto", *command[2:]]}
    code, stdout, stderr = run_scripts({"child": ["-c", CHILD, json.dumps(argvs)]})["child"]
    assert code == 0, stderr
    return json.loads(stdout.splitlines()[-1])


def test_the_manifest_command_uses_repository_relative_paths_only(manifest):
    for arg in shlex.split(manifest["command"])[2:]:
        value = arg.partition("=")[2]
        assert not os.path.isabs(value) and "tmp" not in value.split(os.sep), arg
    assert "--out_dir=tf_autoplace/pretrained/placeto_d2" in manifest["command"]


@pytest.mark.parametrize("source", ["no flags", "manifest command"])
@pytest.mark.slow
def test_the_tool_would_train_with_the_recorded_settings(settings, manifest, source):
    got = settings[source]
    assert resolve_cluster(got["cluster"]).to_proto() == \
        resolve_cluster(manifest["cluster"]).to_proto()
    assert got["families"] == list(manifest["trained_on"]["families"]) == ["nmt"]
    assert got["family_config"] == manifest["trained_on"]["family_config"]
    assert got["objective"] == manifest["objective"] == "imitation"
    assert got["env_config"] == manifest["env_config"]
    policy = {k: v for k, v in manifest["policy_config"].items()
              if k not in ("num_devices", "num_features")}  # from the cluster and the MDP
    assert got["policy"] == policy and policy["seed"] == manifest["seed"]

    recorded = ast.literal_eval(manifest["train_config"])
    train = ast.literal_eval(got["train_config"])
    assert train == recorded
