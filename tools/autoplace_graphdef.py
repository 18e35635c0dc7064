"""Place a GraphDef / MetaGraphDef file offline and write the placed graph.

    python tools/autoplace_graphdef.py --input=model.pb --output=placed.pb \
        --cluster=testdata/k80x2.pbtxt --report_json=report.json

The input may be binary or text format; the output format follows ``--output``'s extension
(``.pbtxt``/``.txt`` = text, anything else binary) and its kind follows the input (a MetaGraphDef
stays a MetaGraphDef). The report is printed. Nothing is written unless placement succeeds, and
the output file appears atomically (written beside it, then renamed).
"""

from __future__ import annotations

import os
import sys
import tempfile

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("input", None, "GraphDef or MetaGraphDef file (binary or text).")
flags.DEFINE_string("output", None, "Where to write the placed graph.")
flags.DEFINE_string("cluster", "local", "Cluster spec file (text ClusterSpec) or 'local'.")
flags.DEFINE_string("placer", "m_etf", "Placer name.")
flags.DEFINE_integer("seed", 0, "Random seed.")
flags.DEFINE_integer("max_groups", 2000, "Merge-and-Colocate: at most this many groups.")
flags.DEFINE_string("report_json", None, "Also write the report as JSON here.")
flags.mark_flags_as_required(["input", "output"])


def _atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp_autoplace_")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run(input_path: str, output_path: str, *, cluster: str, placer: str, seed: int,
        max_groups: int, report_json: str | None) -> int:
    """Place ``input_path`` into ``output_path``; returns a process exit status."""
    import tf_autoplace
    from google.protobuf import text_format
    from tensorflow.core.protobuf import meta_graph_pb2
    from tf_autoplace.graph import ingest
    from tf_autoplace.grouping import GroupingConfig

    try:
        source, is_meta_graph = ingest.read_graph_file(input_path)
        report = tf_autoplace.autoplace(source, cluster=cluster, placer=placer, seed=seed,
                                        grouping=GroupingConfig(max_groups=max_groups))
    except tf_autoplace.AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    placed = report.graph_def
    if is_meta_graph:
        placed = meta_graph_pb2.MetaGraphDef(
            meta_info_def=source.meta_info_def, graph_def=placed,
            saver_def=source.saver_def, collection_def=source.collection_def,
            signature_def=source.signature_def)
    text = output_path.endswith((".pbtxt", ".txt"))
    data = text_format.MessageToString(placed).encode() if text else placed.SerializeToString()
    try:
        _atomic_write(output_path, data)
        if report_json:
            _atomic_write(report_json, report.to_json().encode())
    except OSError as e:
        print(f"error: cannot write output: {e}", file=sys.stderr)
        return 1
    print(report)
    print(f"wrote {output_path}")
    return 0


def main(argv):
    del argv
    return run(FLAGS.input, FLAGS.output, cluster=FLAGS.cluster, placer=FLAGS.placer,
               seed=FLAGS.seed, max_groups=FLAGS.max_groups, report_json=FLAGS.report_json)


if __name__ == "__main__":
    app.run(main)
