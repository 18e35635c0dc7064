"""Write the GPU kernel registry snapshot that ships in tf_autoplace/graph/gpu_kernels.json.

    python tools/snapshot_gpu_kernels.py

Run it with a TensorFlow built with GPU support (the Linux x86-64 ``tensorflow`` wheel): it
records, for every op type, the type constraints of each of its GPU kernels, and the TF version
it read them from. ``tf_autoplace.graph.kernels`` reads the snapshot when the running
TensorFlow registers no GPU kernel at all (``tensorflow-cpu``, macOS and Linux aarch64 wheels),
so that a placement planned there for a GPU cluster knows which ops can run on a GPU.
"""

from __future__ import annotations

import json

import tensorflow as tf
from absl import app, flags
from tensorflow.python.framework import kernels as tf_kernels

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "tf_autoplace/graph/gpu_kernels.json", "Where to write it.")


def main(argv):
    del argv
    by_op: dict[str, set] = {}
    for k in tf_kernels.get_all_registered_kernels().kernel:
        if k.device_type == "GPU":
            constraints = tuple(sorted((c.name, tuple(sorted(c.allowed_values.list.type)))
                                       for c in k.constraint))
            by_op.setdefault(k.op, set()).add(constraints)
    if not by_op:
        raise app.UsageError("this TensorFlow registers no GPU kernel; run the tool with a "
                             "TensorFlow built with GPU support")
    kernels = {op: [[[name, list(types)] for name, types in c] for c in sorted(cs)]
               for op, cs in sorted(by_op.items())}
    lines = ",\n".join(f"  {json.dumps(op)}: {json.dumps(v, separators=(',', ':'))}"
                       for op, v in kernels.items())
    with open(FLAGS.out, "w") as f:
        f.write(f'{{"tensorflow": {json.dumps(tf.__version__)},\n'
                f'"command": "python tools/snapshot_gpu_kernels.py",\n'
                f'"kernels": {{\n{lines}\n}}}}\n')
    print(f"wrote {FLAGS.out}: GPU kernels of {len(kernels)} op types from TF {tf.__version__}")


if __name__ == "__main__":
    app.run(main)
