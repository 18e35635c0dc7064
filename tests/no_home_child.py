"""Child process for tests/test_no_home.py: every door places a graph in a process that has no
usable home or cache directory. Prints one JSON line per door: ``{"door", "ok", "error"}``.

    python tests/no_home_child.py WORKDIR

WORKDIR is a directory the child may write its inputs and outputs to (the one place it can).
"""

import json
import os
import sys
import traceback


def doors(workdir: str):
    import tensorflow as tf

    import tf_autoplace
    from tf_autoplace import flags as ap_flags
    from tf_autoplace import tf2
    from tf_autoplace.cli import place
    from tf_autoplace.core.cluster import resolve_cluster
    from tf_autoplace.graph import costgraph, ingest
    from tf_autoplace.pipeline.prepare import build_problem, export_cost_graph
    from tf_autoplace.testing import small_cnn

    options = dict(cluster="cpu2", placer="m_etf", cache=True, progress=False)

    def graph():
        return tf_autoplace.autoplace(small_cnn().graph, **options)

    def graph_def():
        return tf_autoplace.autoplace(small_cnn().graph.as_graph_def(), **options)

    def cost_graph():
        problem, _ = build_problem(ingest.load_meta_graph(small_cnn().graph.as_graph_def()),
                                   resolve_cluster("cpu2"))
        path = os.path.join(workdir, "cnn.costgraph.pbtxt")
        costgraph.write(path, export_cost_graph(problem))
        return tf_autoplace.place_cost_graph(path, **options)

    def function():
        w = tf.Variable(tf.ones([4, 3]))

        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32)])
        def step(x):
            return tf.reduce_sum(tf.matmul(x, w))

        placed = tf_autoplace.autoplace(step, **options)
        return float(placed(tf.ones([2, 4])))

    def saved_model():
        module = tf.Module()
        module.w = tf.Variable(tf.ones([4, 3]))
        module.f = tf.function(lambda x: tf.matmul(x, module.w),
                               input_signature=[tf.TensorSpec([2, 4], tf.float32)])
        tf.saved_model.save(module, os.path.join(workdir, "sm"),
                            signatures={"serving_default": module.f})
        return tf2.place_saved_model(os.path.join(workdir, "sm"),
                                     os.path.join(workdir, "sm_placed"), cluster="cpu2",
                                     placer="m_etf", progress=False)

    def command():
        path = os.path.join(workdir, "cnn.pb")
        with open(path, "wb") as f:
            f.write(small_cnn().graph.as_graph_def().SerializeToString())
        status = place.run(path, os.path.join(workdir, "placed.pb"), cluster="cpu2",
                           placer="m_etf", seed=0, max_groups=2000, cache=True, progress=False,
                           report_json=os.path.join(workdir, "report.json"))
        assert status == 0, status

    def training_binary():
        ap_flags.install(ap_flags.AutoplaceSettings(placer="m_etf", cluster="cpu2", cache=True,
                                                    progress=False))
        tg = small_cnn()
        config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
        with tf.compat.v1.Session(graph=tg.graph, config=config) as session:
            session.run(tg.init_op)
        ap_flags.uninstall()
        assert all(op.device for op in tg.graph.get_operations())

    yield from (("tf.Graph", graph), ("GraphDef", graph_def), ("cost graph", cost_graph),
                ("tf.function", function), ("SavedModel", saved_model),
                ("tf-autoplace place", command), ("--autoplace", training_binary))


def main(workdir: str) -> None:
    for name, door in doors(workdir):
        try:
            door()
            out = {"door": name, "ok": True, "error": None}
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails
            out = {"door": name, "ok": False,
                   "error": "".join(traceback.format_exception(e))[-2000:]}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
