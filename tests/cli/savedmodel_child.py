"""Child process for tests/cli/test_place_savedmodel.py: SavedModel in, SavedModel out.

Runs on two logical CPU devices with soft placement off (which must be configured before TF
initialises, hence a fresh interpreter): builds a TF2 and a TF1 SavedModel, places each with
``tf-autoplace place``'s ``run()`` (in process), loads originals and outputs with
``tf.saved_model.load`` and compares outputs and executed devices; also runs the tool on bad input
and records what it left on disk. Prints one JSON object on the last line of stdout.

    python tests/cli/savedmodel_child.py WORKDIR
"""

import contextlib
import glob
import io
import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf

tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)
tf.config.set_soft_device_placement(False)

from tf_autoplace.cli import place as place_command  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CPU2 = "testdata/cpu2_independent.pbtxt"


class TwoBranch(tf.Module):
    def __init__(self):
        super().__init__()
        self.w1 = tf.Variable(tf.random.stateless_normal((16, 64), seed=(0, 1)))
        self.w2 = tf.Variable(tf.random.stateless_normal((16, 64), seed=(0, 2)))
        self.w3 = tf.Variable(tf.random.stateless_normal((128, 4), seed=(0, 3)))

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def serve(self, x):
        h = tf.concat([tf.nn.relu(x @ self.w1), tf.tanh(x @ self.w2)], axis=1)
        return {"y": h @ self.w3}

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def double(self, x):
        return {"twice": 2.0 * x}


def make_tf2(path):
    module = TwoBranch()
    tf.saved_model.save(module, path,
                        signatures={"serving_default": module.serve, "double": module.double})


def make_tf1(path):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
        init = tf.compat.v1.random_normal_initializer(seed=1)
        w1 = tf.compat.v1.get_variable("w1", [16, 64], initializer=init)
        w2 = tf.compat.v1.get_variable("w2", [16, 64], initializer=init)
        w3 = tf.compat.v1.get_variable("w3", [128, 4], initializer=init)
        h = tf.concat([tf.nn.relu(x @ w1), tf.tanh(x @ w2)], axis=1)
        y = tf.identity(h @ w3, name="y")
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(path)
            sig = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
            builder.add_meta_graph_and_variables(sess, ["serve"],
                                                 signature_def_map={"serving_default": sig})
            builder.save()


def place(src, dst, **kwargs):
    kwargs = {"signature": "serving_default", "tags": ("serve",), **kwargs}
    return place_command.run(src, dst, cluster=CPU2, placer="m_etf", seed=0, max_groups=2000,
                                  report_json=dst + ".json", **kwargs)


def executed(fn, **kwargs):
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        out = fn(**kwargs)
        meta = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    devices = sorted({n.device for fg in meta.function_graphs for pg in fg.partition_graphs
                      for n in pg.node})
    return out, devices


def compare(src, dst, x):
    """Outputs of every signature of src and dst on x, and the devices dst's serving ran on."""
    a, b = tf.saved_model.load(src), tf.saved_model.load(dst)
    out = {"signatures": sorted(b.signatures), "equal": {}}
    for name in a.signatures:
        want = a.signatures[name](x=x)
        if name == "serving_default":
            got, out["executed"] = executed(b.signatures[name], x=x)
        else:
            got = b.signatures[name](x=x)
        out["equal"][name] = sorted(want) == sorted(got) and all(
            np.allclose(want[k].numpy(), got[k].numpy(), rtol=1e-6, atol=1e-6) for k in want)
    return out


def tf1_session_devices(dst, x):
    """Devices a v1 Session (2 logical CPUs, soft placement off) runs the placed TF1 model on."""
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        tf.compat.v1.saved_model.loader.load(sess, ["serve"], dst)
        meta = tf.compat.v1.RunMetadata()
        sess.run("y:0", {"x:0": x.numpy()}, run_metadata=meta,
                 options=tf.compat.v1.RunOptions(output_partition_graphs=True))
    return sorted({n.device for pg in meta.partition_graphs for n in pg.node})


def leftovers(workdir):
    return sorted(n for n in os.listdir(workdir) if n.startswith(".tmp_autoplace_"))


def main(workdir):
    results = {}
    x = tf.constant(np.random.default_rng(0).normal(size=(5, 16)).astype(np.float32))
    tf2_in, tf1_in = os.path.join(workdir, "tf2_in"), os.path.join(workdir, "tf1_in")
    make_tf2(tf2_in)
    make_tf1(tf1_in)

    tf2_out = os.path.join(workdir, "tf2_out")
    results["tf2_rc"] = place(tf2_in, tf2_out)
    results["tf2"] = compare(tf2_in, tf2_out, x)
    results["tf2_report"] = json.load(open(tf2_out + ".json"))["devices"]

    tf1_out = os.path.join(workdir, "tf1_out")
    results["tf1_rc"] = place(tf1_in, tf1_out)
    results["tf1"] = compare(tf1_in, tf1_out, x)
    results["tf1_session_devices"] = tf1_session_devices(tf1_out, x)

    # Broken inputs TF's loader fails on in its own ways (an OSError, an IndexError).
    no_variables, truncated = (os.path.join(workdir, name) for name in ("no_vars", "trunc"))
    shutil.copytree(tf2_in, no_variables)
    shutil.rmtree(os.path.join(no_variables, "variables"))
    shutil.copytree(tf2_in, truncated)
    for shard in glob.glob(os.path.join(truncated, "variables", "*.data*")):
        with open(shard, "r+b") as f:
            f.truncate(10)
    # The same damage to a TF1 SavedModel, which is placed from its proto without loading.
    tf1_broken = {}
    for name, damage in (("tf1_missing_variables", "remove"), ("tf1_truncated_variables", 10),
                         ("tf1_empty_variables", 0)):
        tf1_broken[name] = os.path.join(workdir, name + "_in")
        shutil.copytree(tf1_in, tf1_broken[name])
        if damage == "remove":
            shutil.rmtree(os.path.join(tf1_broken[name], "variables"))
            continue
        for shard in glob.glob(os.path.join(tf1_broken[name], "variables", "*.data*")):
            with open(shard, "r+b") as f:
                f.truncate(damage)
    bad = {**{name: (src, {}) for name, src in tf1_broken.items()},
           "bad_signature": (tf2_in, {"signature": "no_such_signature"}),
           "bad_tags": (tf1_in, {"tags": ("train",)}),
           "bad_tf1_signature": (tf1_in, {"signature": "no_such_signature"}),
           "output_exists": (tf2_in, {}),
           "missing_variables": (no_variables, {}),
           "truncated_variables": (truncated, {})}
    os.makedirs(os.path.join(workdir, "output_exists", "keep"))
    for name, (src, kwargs) in bad.items():
        dst = os.path.join(workdir, name)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            rc = place(src, dst, **kwargs)
        results[name] = {"rc": rc, "exists": os.path.exists(dst),
                         "contents": sorted(os.listdir(dst)) if os.path.isdir(dst) else None,
                         "report": os.path.exists(dst + ".json")}
        results[name + "_stderr"] = stderr.getvalue()
    results["leftovers"] = leftovers(workdir)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
