"""Small real TensorFlow training graphs for tests, and a runner that executes them on several
logical CPU devices with soft placement off (how a placement is proven runnable here)."""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class TrainingGraph:
    graph: tf.Graph
    loss: str
    train_op: str
    init_op: str
    feed: dict  # tensor name -> numpy array

    @classmethod
    def from_model(cls, model, seed: int = 0) -> "TrainingGraph":
        """From a :class:`tf_autoplace.zoo.ModelGraph`, with its sample inputs for ``seed``."""
        return cls(model.graph, model.loss, model.train_op, model.init_op,
                   model.sample_feed(seed))


def small_cnn(batch: int = 8, seed: int = 0) -> TrainingGraph:
    """A two-branch conv net with Adam: forward, gradients and optimizer update, fixed seeds."""
    import tf_keras  # Keras 2 builds v1 graphs; Keras 3 does not

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.float32, [batch, 16, 16, 3], name="images")
        y = tf.compat.v1.placeholder(tf.int32, [batch], name="labels")
        init = tf_keras.initializers.GlorotUniform(seed=seed)
        left = tf_keras.layers.Conv2D(8, 3, activation="relu", kernel_initializer=init,
                                      name="left")(x)
        right = tf_keras.layers.Conv2D(8, 5, padding="same", activation="relu",
                                       kernel_initializer=init, name="right")(x)
        right = tf_keras.layers.MaxPool2D(3, 1, name="right_pool")(right)
        h = tf.concat([left, right], axis=-1)
        h = tf_keras.layers.GlobalAveragePooling2D()(h)
        logits = tf_keras.layers.Dense(10, kernel_initializer=init, name="logits")(h)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits), name="loss")
        train = tf.compat.v1.train.AdamOptimizer(1e-2).minimize(loss, name="train")
        init_op = tf.compat.v1.global_variables_initializer()
    rng = np.random.default_rng(seed)
    feed = {"images:0": rng.normal(size=(batch, 16, 16, 3)).astype(np.float32),
            "labels:0": rng.integers(0, 10, size=batch).astype(np.int32)}
    return TrainingGraph(g, loss.name, train.name, init_op.name, feed)


def free_batch_graph() -> tf.Graph:
    """A linear model's training step (op ``train``) whose input placeholder ``x`` has the
    batch dimension unknown, as TF1 programs usually export their graphs: no input can be
    made up for it without a shape."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
        w = tf.Variable(tf.ones([16, 4]), name="w")
        loss = tf.reduce_mean(tf.matmul(x, w), name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    return g


def while_loop_graph() -> tf.Graph:
    """A v1 while loop (Enter/Merge/Switch/NextIteration/Exit), so ingestion meets a cycle."""
    from tensorflow.python.ops import control_flow_util  # TF 2 builds v2 While by default

    v2_was_on = control_flow_util.ENABLE_CONTROL_FLOW_V2
    tf.compat.v1.disable_control_flow_v2()
    try:
        g = tf.Graph()
        with g.as_default():
            i0 = tf.constant(0, name="i0")
            x0 = tf.ones([4, 4], name="x0")
            _, out = tf.compat.v1.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x @ x),
                                             [i0, x0])
            tf.identity(out, name="result")
    finally:
        if v2_was_on:
            tf.compat.v1.enable_control_flow_v2()
    return g


def run_training_steps(tg: TrainingGraph, *, steps: int = 3, num_cpus: int = 2,
                       target: str = ""):
    """Run ``steps`` training steps in a fresh v1 Session with ``num_cpus`` logical CPUs (or on
    the TensorFlow cluster of ``target``, with its servers' devices) and
    ``allow_soft_placement=False``. Returns (losses, set of devices in the partition graphs)."""
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False,
                                      inter_op_parallelism_threads=1,
                                      intra_op_parallelism_threads=1)
    if not target:
        config.device_count["CPU"] = num_cpus
    losses = []
    with tf.compat.v1.Session(target, graph=tg.graph, config=config) as sess:
        sess.run(tg.init_op)
        for _ in range(steps):
            loss, _ = sess.run([tg.loss, tg.train_op], tg.feed)
            losses.append(float(loss))
        meta = tf.compat.v1.RunMetadata()
        sess.run(tg.train_op, tg.feed, run_metadata=meta,
                 options=tf.compat.v1.RunOptions(output_partition_graphs=True))
    devices = {node.device for pg in meta.partition_graphs for node in pg.node}
    return losses, devices
