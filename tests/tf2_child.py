"""Child process for tests/test_tf2.py: TF2 checks on two logical CPU devices.

Logical devices must be configured before TensorFlow initialises its runtime, which another
test module in the pytest process may already have done; so these checks run here, in a fresh
interpreter, and print one JSON object (check name -> result) on the last line of stdout.
"""

import json
import sys
import tempfile

import numpy as np
import tensorflow as tf

tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)
tf.config.set_soft_device_placement(False)  # a device TF cannot honour is an error, not a move

import tf_autoplace  # noqa: E402
from tf_autoplace import tf2  # noqa: E402

CPU2 = "testdata/cpu2_independent.pbtxt"
HOST = "/job:localhost/replica:0/task:0/device:"


def executed_devices(fn, *args, **kwargs):
    """Run ``fn`` and return (its result, {device: executed nodes}) from the partition graphs."""
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        out = fn(*args, **kwargs)
        meta = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    counts = {}
    for fg in meta.function_graphs:
        for pg in fg.partition_graphs:
            for node in pg.node:
                counts[node.device] = counts.get(node.device, 0) + 1
    return out, counts


def train_step(model, opt):
    """A tf.function that takes one optimizer step on the mean squared error of ``model``."""

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def keras_train_step():
    """A two-branch Keras (tf_keras) regression model trained by a tf.function step."""
    import tf_keras

    tf.keras.utils.set_random_seed(0)
    init = tf_keras.initializers.GlorotUniform(seed=0)
    inp = tf_keras.Input((16,))
    a = tf_keras.layers.Dense(32, activation="relu", kernel_initializer=init)(inp)
    b = tf_keras.layers.Dense(32, activation="tanh", kernel_initializer=init)(inp)
    out = tf_keras.layers.Dense(1, kernel_initializer=init)(
        tf_keras.layers.Concatenate()([a, b]))
    model = tf_keras.Model(inp, out)
    opt = tf_keras.optimizers.Adam(1e-2)
    step = train_step(model, opt)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(8, 16)).astype(np.float32))
    y = tf.constant(rng.normal(size=(8, 1)).astype(np.float32))
    step.get_concrete_function(x, y)  # creates the optimizer's slots
    return step, model, opt, x, y


def check_local_cluster_is_the_configured_cpus():
    """The devices of "local": the two logical CPUs this process configured (it was one CPU,
    so verify never measured a placement over both); and a TensorFlow cluster's task, another
    process, described by default as one CPU whatever this process configured."""
    from tf_autoplace.core.cluster import Cluster, resolve_cluster

    served = Cluster.from_tf({"worker": ["localhost:2222"]}, devices="local")
    return {"local": [d.name for d in resolve_cluster("local").devices],
            "task": [d.name for d in served.devices]}


def check_keras_training_step():
    step, model, opt, x, y = keras_train_step()
    variables = model.variables + opt.variables()
    start = [v.numpy() for v in variables]
    placed, report = tf2.autoplace_function(step, x, y, cluster=CPU2, placer="m_etf", seed=0)
    reference = [float(step(x, y)) for _ in range(3)]
    trained = [v.numpy() for v in variables]
    for v, w in zip(variables, start):
        v.assign(w)
    first, executed = executed_devices(placed, x, y)  # partition graphs come with the 1st run
    losses = [float(first)] + [float(placed(x, y)) for _ in range(2)]
    var_devices = sorted({v.handle.device for v in variables})
    reads = {op.device for op in placed.graph.get_operations()
             if op.type in ("ReadVariableOp", "ResourceApplyAdam", "AssignVariableOp",
                            "AssignAddVariableOp")}
    return {
        "reference": reference, "losses": losses,
        "weights_equal": all(np.allclose(a, v.numpy(), rtol=1e-6, atol=1e-7)
                             for a, v in zip(trained, variables)),
        "graph_devices": sorted({op.device for op in placed.graph.get_operations()}),
        "executed": executed, "variable_devices": var_devices, "resource_op_devices":
            sorted(reads), "report_is_attr": placed.report is report,
        "notes": list(report.notes), "num_ops": report.num_ops,
    }


def check_keras_lstm_training_step():
    """A tf_keras LSTM trained by a tf.function step: Grappler specializes its
    ``api_implements`` call (and the gradient's forward function) instead of inlining it, so
    the placed step calls functions that only the placed library holds."""
    import tf_keras

    tf.keras.utils.set_random_seed(0)
    init = tf_keras.initializers.GlorotUniform(seed=0)
    model = tf_keras.Sequential([
        tf_keras.Input((3, 2)),
        tf_keras.layers.LSTM(4, kernel_initializer=init, recurrent_initializer=init),
        tf_keras.layers.Dense(1, kernel_initializer=init)])
    opt = tf_keras.optimizers.SGD(0.1)
    step = train_step(model, opt)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(4, 3, 2)).astype(np.float32))
    y = tf.constant(rng.normal(size=(4, 1)).astype(np.float32))
    step.get_concrete_function(x, y)
    variables = model.variables + opt.variables()
    start = [v.numpy() for v in variables]
    # (budget_s, as autoplace takes it, was passed on to the step, which failed to trace)
    placed, _ = tf2.autoplace_function(step, x, y, cluster=CPU2, placer="m_etf", seed=0,
                                       budget_s=30)
    reference = [float(step(x, y)) for _ in range(2)]
    for v, w in zip(variables, start):
        v.assign(w)
    return {"reference": reference, "losses": [float(placed(x, y)) for _ in range(2)]}


def check_dispatch_nested_and_kwargs():
    w1 = tf.Variable(tf.random.stateless_normal((16, 64), seed=(0, 1)))
    w2 = tf.Variable(tf.random.stateless_normal((16, 64), seed=(0, 2)))

    @tf.function
    def branch(x, w):
        return tf.nn.relu(tf.matmul(x, w))

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x"),
                                  tf.TensorSpec([None, 16], tf.float32, name="z")])
    def model(x, z):
        return {"sum": tf.reduce_sum(branch(x, w1) + branch(z, w2), axis=1),
                "diff": branch(x, w1) - branch(z, w2)}

    placed = tf_autoplace.autoplace(model, cluster=CPU2, placer="m_etf", seed=0)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(4, 16)).astype(np.float32))
    z = tf.constant(rng.normal(size=(4, 16)).astype(np.float32))
    want = model(x, z)
    got, executed = executed_devices(placed, z=z, x=x)
    positional = placed(x, z)
    by_name_numpy = placed(x=x.numpy(), z=z.numpy())  # NumPy by name, as the original takes
    types = {op.type for op in placed.graph.get_operations()}
    return {
        "is_placed_function": isinstance(placed, tf2.PlacedFunction),
        "report_ops": placed.report.num_ops,
        "equal": all(np.allclose(want[k], got[k], rtol=1e-6) and
                     np.allclose(want[k], positional[k], rtol=1e-6) for k in want),
        "numpy_by_name_equal": all(np.allclose(want[k], by_name_numpy[k], rtol=1e-6)
                                   for k in want),
        "keys": sorted(got), "executed": executed,
        "call_ops_left": sorted(types & {"PartitionedCall", "StatefulPartitionedCall"}),
        "graph_devices": sorted({op.device for op in placed.graph.get_operations()
                                 if op.type == "MatMul"}),
    }


def check_calls_and_gradients_as_the_original():
    """A placed function called every way the original can be, and differentiated: gradients
    for the variables it captures through a GradientTape around the call (a custom training
    loop's), placement after a tape ran the function, a nest by name, NumPy positionally
    with a traced keyword and a default constant (a keyword-only tensor's default too), and
    another constant refused (a string tensor where a string was traced); so are a NumPy
    array of another dtype, another number of ``*args`` and a nest of another structure."""
    w = tf.Variable(tf.random.stateless_normal((5, 3), seed=(3, 1)))

    @tf.function
    def loss(x):
        return tf.reduce_sum(tf.tanh(tf.matmul(x, w)))

    @tf.function
    def nested(inp):
        return tf.matmul(inp["a"], w) + tf.reduce_sum(inp["b"])

    @tf.function
    def scaled(x, y=None, scale=2.0):
        r = tf.matmul(x, w) * scale
        return r if y is None else r + y

    x = tf.random.stateless_normal((4, 5), seed=(3, 2))
    y = np.ones((4, 3), np.float32)

    def grad(fn):
        with tf.GradientTape() as tape:
            value = fn(x)
        return value, tape.gradient(value, w)

    placed, report = tf2.autoplace_function(loss, x, cluster=CPU2, placer="random", seed=1)
    placed_on_gpus, on_gpus = tf2.autoplace_function(loss, x, cluster="k80x2", placer="random",
                                                     seed=1)
    try:  # soft placement is off here: TF's InvalidArgumentError named an op of the copy
        placed_on_gpus(x)
        call_on_gpus = None
    except tf_autoplace.AutoplaceError as e:
        call_on_gpus = [type(e).__name__, str(e)]
    want_value, want_grad = grad(loss)  # a tape ran the original: its graph grew outputs
    got_value, got_grad = grad(placed)
    after_tape, _ = tf2.autoplace_function(loss, x, cluster=CPU2, placer="random", seed=1)
    inp = {"a": x, "b": tf.ones([2])}
    placed_nested, _ = tf2.autoplace_function(nested, inp, cluster=CPU2, placer="random")
    placed_scaled, _ = tf2.autoplace_function(scaled, x, y=tf.constant(y), cluster=CPU2,
                                              placer="random", seed=2)
    want_scaled = scaled(x, y)

    @tf.function
    def ignores(x, unused):
        return x * 2.0

    placed_ignores, _ = tf2.autoplace_function(ignores, x, tf.zeros([4]), cluster=CPU2,
                                               placer="random")
    try:
        placed_scaled(x, y, 3.0)
        other_constant = None
    except tf_autoplace.AutoplaceError as e:
        other_constant = [type(e).__name__, str(e)]
    tensor_for_constant = []  # a tensor of another value where a constant was traced
    for call in (lambda: placed_scaled(x, tf.constant(y), tf.constant(3.0)),  # all tensors
                 lambda: placed_scaled(x, y, scale=tf.constant(3.0))):
        try:
            call()
            tensor_for_constant.append(None)
        except tf_autoplace.AutoplaceError as e:
            tensor_for_constant.append([type(e).__name__, str(e)])

    @tf.function
    def tensor_default(x, shift=tf.constant(1.5)):
        return x * 2.0 + shift

    placed_default, _ = tf2.autoplace_function(tensor_default, x, cluster=CPU2,
                                               placer="random")

    @tf.function
    def keyword_default(x, *, shift=tf.constant(1.5)):  # keyword-only: not in the fast path
        return x * 2.0 + shift

    placed_keyword_default, _ = tf2.autoplace_function(keyword_default, x, cluster=CPU2,
                                                       placer="random")

    @tf.function
    def moded(x, mode="sum"):
        return tf.reduce_sum(x) if mode == "sum" else tf.reduce_max(x)

    placed_moded, _ = tf2.autoplace_function(moded, x, cluster=CPU2, placer="random")
    for call in (lambda: placed_moded(x, mode=tf.constant("max")),  # a string's value is bytes
                 lambda: placed_moded(x, tf.constant("max"))):
        try:
            call()
            tensor_for_constant.append(None)
        except tf_autoplace.AutoplaceError as e:
            tensor_for_constant.append([type(e).__name__, str(e)])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def exclaim(words):
        return tf.strings.join([words, "!"])

    placed_exclaim, _ = tf2.autoplace_function(exclaim, cluster=CPU2, placer="random")
    words = (np.array([b"a", b"bc"]), np.array(["a", "bc"]),  # bytes_ and str_ arrays
             np.array([b"a", b"bc"], dtype=object), tf.constant([b"a", b"bc"]))

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    def rows(x):
        return tf.reduce_sum(x, 0) / tf.cast(tf.shape(x)[0], tf.float32)

    placed_rows, _ = tf2.autoplace_function(rows, cluster=CPU2, placer="random")
    other_shapes = []  # a shape the trace does not take: TF would run the traced one silently
    for fn, arg in ((placed, x[:3]), (placed_nested, {"a": x, "b": tf.ones([3])}),
                    (placed_rows, tf.ones([2, 4]))):
        try:
            fn(arg) if fn is not placed_nested else fn(inp=arg)
            other_shapes.append(None)
        except tf_autoplace.AutoplaceError as e:
            other_shapes.append([type(e).__name__, str(e)])

    @tf.function
    def total(*xs):
        return tf.add_n([tf.reduce_sum(tf.matmul(v, w)) for v in xs])

    placed_total, _ = tf2.autoplace_function(total, x, x, cluster=CPU2, placer="random")
    # Arguments the original takes by tracing again and the placed graph does not: a NumPy
    # array of another dtype (a cast would compute other numbers without a word), another
    # count of *args, another structure of a nest (TF's binding: an untyped TypeError).
    other_arguments = []
    for call in (lambda: placed(x.numpy().astype(np.float64)),
                 lambda: placed_nested(inp={"a": x.numpy(), "b": np.ones(2)}),  # in a nest
                 lambda: placed_total(x, x, x),
                 lambda: placed_nested(inp={"a": x, "b": tf.ones([2]), "c": x})):
        try:
            call()
            other_arguments.append(None)
        except tf_autoplace.AutoplaceError as e:
            other_arguments.append([type(e).__name__, str(e)])
    return {
        "other_shapes": other_shapes,
        "other_arguments": other_arguments,
        "total_equal": bool(np.allclose(placed_total(x, x), total(x, x), rtol=1e-6)),
        "none_dimension_equal": bool(np.allclose(placed_rows(x[:2]), rows(x[:2]))),
        "value_equal": bool(np.allclose(want_value, got_value, rtol=1e-6)),
        "grad_is_none": got_grad is None,
        "grad_equal": got_grad is not None and bool(np.allclose(want_grad, got_grad,
                                                                 rtol=1e-6)),
        "trainable": [v.name for v in placed.concrete_function.trainable_variables],
        "after_tape_equal": bool(np.allclose(want_value, after_tape(x), rtol=1e-6)),
        "nested_by_name_equal": bool(np.allclose(nested(inp=inp), placed_nested(inp=inp))),
        "scaled_equal": [bool(np.allclose(want_scaled, got, rtol=1e-6)) for got in (
            placed_scaled(x.numpy(), y), placed_scaled(x.numpy(), y=y),
            placed_scaled(x=x.numpy(), y=y, scale=2.0), placed_scaled(x, tf.constant(y)))],
        "other_constant": other_constant,
        "tensor_for_constant": tensor_for_constant,
        "tensor_of_the_constant_equal": bool(np.allclose(  # TF's binding takes it: so do we
            placed_scaled(x, tf.constant(y), tf.constant(2.0)), want_scaled, rtol=1e-6)),
        "tensor_default_equal": bool(np.allclose(placed_default(x), tensor_default(x))),
        "keyword_default_equal": bool(np.allclose(placed_keyword_default(x),
                                                  keyword_default(x))),
        "numpy_strings_equal": [placed_exclaim(w).numpy().tolist() == [b"a!", b"bc!"]
                                for w in words],
        "unused_argument_equal": bool(np.allclose(placed_ignores(x, tf.zeros([4])), x * 2.0)),
        "missing_notes": [[n for n in r.notes if "this process has no device" in n]
                          for r in (report, on_gpus)],
        "call_on_gpus": call_on_gpus,
    }


def check_control_flow_with_nested_call():
    """A nested call is inlined while functional If/While stay single ops that TF still lowers
    at run time (Grappler's inliner would otherwise lower them to v1 Switch/Merge, which a
    tf.function cannot import)."""
    v = tf.Variable(tf.ones((4, 4)))

    @tf.function
    def inner(x):
        return tf.cond(tf.reduce_sum(x) > 0, lambda: x @ v, lambda: x - 1.0)

    @tf.function
    def outer(x):
        y = inner(x)
        _, z = tf.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z @ v),
                             (tf.constant(0), y))
        return z

    x = tf.constant(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4))
    placed, report = tf2.autoplace_function(outer, x, cluster=CPU2, placer="m_etf")
    nodes = placed.graph.as_graph_def().node
    flow = [n for n in nodes if n.op in ("If", "StatelessIf", "While", "StatelessWhile")]

    # A loop whose body calls another function, differentiated by a tape around the call (a
    # custom training loop) and by a tape inside a placed step.
    @tf.function
    def layer(h):
        return tf.tanh(h @ v)

    @tf.function
    def looped(x):
        h = x
        for _ in tf.range(3):
            h = layer(h)
        return tf.reduce_sum(h)

    def around(fn):
        with tf.GradientTape() as tape:
            value = fn(x)
        return tape.gradient(value, v)

    @tf.function
    def inside(x):
        with tf.GradientTape() as tape:
            value = looped(x)
        return tape.gradient(value, v)

    placed_looped, _ = tf2.autoplace_function(looped, x, cluster=CPU2, placer="random")
    placed_inside, _ = tf2.autoplace_function(inside, x, cluster=CPU2, placer="random")

    # A cond whose branch reads the variable, differentiated placed first, then the original:
    # the gradient's rewritten branch functions must not take the original's names.
    @tf.function
    def branchy(x):
        h = tf.tanh(x @ v)
        return tf.reduce_sum(tf.cond(tf.reduce_sum(h) > 0, lambda: h @ v, lambda: h * 0.5))

    placed_branchy, _ = tf2.autoplace_function(branchy, x, cluster=CPU2, placer="random",
                                               seed=1)
    placed_first = around(placed_branchy)
    return {
        "cond_grad_placed_then_original_equal": bool(np.allclose(placed_first,
                                                                 around(branchy), rtol=1e-6)),
        "loop_grad_around_equal": bool(np.allclose(around(looped), around(placed_looped),
                                                   rtol=1e-6)),
        "loop_grad_inside_equal": bool(np.allclose(inside(x), placed_inside(x), rtol=1e-6)),
        "equal": bool(np.allclose(outer(x), placed(x), rtol=1e-6)),
        "flow_ops": sorted(n.op for n in flow),
        "lowering_kept": all(n.attr["_lower_using_switch_merge"].b for n in flow),
        "v1_ops": sorted({n.op for n in nodes} & {"Switch", "Merge", "Enter", "Exit"}),
        "notes": list(report.notes),
    }


def check_specialized_call():
    """A call Grappler specializes instead of inlining (an ``api_implements`` function, as
    tf_keras' LSTM and GRU are, called with a constant) names a function that only the placed
    GraphDef's library holds; the placed function must still find it when called, and a
    SavedModel of it must load."""
    v = tf.Variable(tf.ones((4, 4)))

    @tf.function(experimental_attributes={"api_implements": "tf_autoplace_test_matmul_tanh"})
    def inner(x, w):
        return tf.tanh(x @ w)

    @tf.function
    def outer(x):
        return inner(x, tf.ones((4, 4))) @ v

    x = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    placed, report = tf2.autoplace_function(outer, x, cluster=CPU2, placer="m_etf")
    out = placed(x)  # first, before saving it (which registers the library's functions)
    module = tf.Module()
    module.v = v
    with tempfile.TemporaryDirectory() as directory:  # saved, it loads and gives the same
        tf.saved_model.save(module, directory, signatures=placed.concrete_function)
        loaded = tf.saved_model.load(directory).signatures["serving_default"]
        from_saved = list(loaded(x=x).values())[0]
    return {
        "equal": bool(np.allclose(outer(x), out, rtol=1e-6)),
        "saved_equal": bool(np.allclose(outer(x), from_saved, rtol=1e-6)),
        "called": sorted(n.attr["f"].func.name for n in report.graph_def.node
                         if n.op in tf2.CALL_OPS),
    }


def errors():
    out = {}

    @tf.function(jit_compile=True)
    def xla(x):
        return x * 2

    v = tf.Variable(1.0)

    @tf.function
    def uses_v(x):
        return x * v

    @tf.function
    def bump(var, x):
        var.assign_add(x)
        return var.read_value()

    @tf.function
    def total(r):
        return tf.reduce_sum(r)

    m = tf.Variable(tf.ones([4, 3]))
    strategy = tf.distribute.MirroredStrategy([f"{HOST}CPU:0", f"{HOST}CPU:1"])
    with strategy.scope():
        mirrored = tf.Variable(tf.ones([4, 1]))
        sgd = tf.keras.optimizers.SGD(0.1)
        sgd.build([mirrored])

    def replica_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(x @ mirrored)
        sgd.apply_gradients(zip(tape.gradient(loss, [mirrored]), [mirrored]))
        return loss

    @tf.function
    def distributed(x):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x,)), axis=None)

    @tf.function
    def project(x):
        return x @ m

    module = tf.Module()
    module.double = tf.function(lambda x: x * 2, jit_compile=True,
                                input_signature=[tf.TensorSpec([], tf.float32)])
    with tempfile.TemporaryDirectory() as saved:
        tf.saved_model.save(module, saved)
        restored = tf.saved_model.load(saved)  # (its graph: "restored_function_body")

    only_cpu1 = tf_autoplace.Cluster.uniform([tf_autoplace.Device(f"{HOST}CPU:1", "CPU",
                                                                  memory_bytes=10**9)])
    cases = {
        "xla": lambda: tf2.autoplace_function(xla, tf.constant(1.0), cluster=CPU2),
        "xla_restored": lambda: tf2.autoplace_function(restored.double, tf.constant(1.0),
                                                       cluster=CPU2),
        "no_args": lambda: tf_autoplace.autoplace(uses_v, cluster=CPU2, placer="m_etf"),
        "variable_off_cluster": lambda: tf2.autoplace_function(uses_v, tf.constant(1.0),
                                                               cluster=only_cpu1),
        "variable_argument": lambda: tf2.autoplace_function(
            bump, tf.Variable(tf.zeros([4])), tf.ones([4]), cluster=CPU2, placer="single"),
        "ragged_argument": lambda: tf2.autoplace_function(
            total, tf.ragged.constant([[1.0], [2.0, 3.0]]), cluster=CPU2, placer="single"),
        # TF's ValueError (as a restored function gives for shapes it was not saved with)
        "untraceable_shape": lambda: tf2.autoplace_function(project, tf.ones([2, 5]),
                                                            cluster=CPU2, placer="single"),
        # (TF's message repeats the arguments: a 64x4 tensor's values, kilobytes of them)
        "untraceable_big": lambda: tf2.autoplace_function(
            project, tf.random.normal([64, 4]), cluster=CPU2, placer="single", scale=2),
        # (measure_steps was passed on to the function, which failed to trace with it)
        "measured_function": lambda: tf2.autoplace_function(
            project, tf.ones([2, 4]), cluster=CPU2, placer="single", measure_steps=15),
        "strategy_run": lambda: tf2.autoplace_function(distributed, tf.ones([2, 4]),
                                                       cluster=CPU2, placer="single"),
    }
    for name, fn in cases.items():
        try:
            fn()
            out[name] = None
        except tf_autoplace.AutoplaceError as e:
            out[name] = [type(e).__name__, str(e)]
    return out


def check_dataset_loop_note():
    """A loop over a dataset inside a tf.function is an op that runs the loop's body as a
    function of its own (AutoGraph's ScanDataset/ReduceDataset): the report says the body is
    not placed op by op, and the placed function computes what the original does."""
    v = tf.Variable(1.0)
    ds = tf.data.Dataset.range(4).map(lambda i: tf.cast(i, tf.float32))

    @tf.function
    def total():
        out = tf.constant(0.0)
        for x in ds:
            out += x * v
        return out

    placed, report = tf2.autoplace_function(total, cluster=CPU2, placer="m_etf")
    return {"notes": [n for n in report.notes if "run functions of their own" in n],
            "equal": float(placed()) == float(total()) == 6.0}


def check_control_flow_over_variables_on_two_devices():
    """A loop and a cond reading variables that live on two devices (the user placed them):
    the placement was refused (the loop, its variables and their devices were one group);
    placed, each gives the original's values and, with a tape around the call, its gradients
    (a loop given a device broke that: TF pins the loop's resource outputs to it)."""
    with tf.device("/CPU:0"):
        a = tf.Variable(tf.ones([4, 4]) * 0.3, name="a")
    with tf.device("/CPU:1"):
        b = tf.Variable(tf.ones([4]) * 0.1, name="b")

    @tf.function
    def loop(x):
        _, h = tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(h @ a + b)),
                             (0, x))
        return tf.reduce_sum(h)

    @tf.function
    def branch(x):
        return tf.reduce_sum(tf.cond(tf.reduce_sum(x) > 0, lambda: x @ a + b,
                                     lambda: x + b))

    def value_and_grads(fn):
        with tf.GradientTape() as tape:
            value = fn(x)
        return [value.numpy()] + [g.numpy() for g in tape.gradient(value, [a, b])]

    x = tf.ones([2, 4])
    out = {}
    for fn in (loop, branch):
        want = value_and_grads(fn)
        for placer in ("single", "m_etf"):
            placed, report = tf2.autoplace_function(fn, x, cluster=CPU2, placer=placer)
            got = value_and_grads(placed)
            out[f"{fn.__name__}/{placer}"] = {
                "equal": all(np.allclose(w, g, rtol=1e-6) for w, g in zip(want, got)),
                "notes": [n for n in report.notes if "live on two devices" in n]}
    return out


def check_an_optional_read_from_an_iterator_argument():
    """A step that reads an iterator argument through an optional and a cond: the cond's
    branch reads the optional's value with ops colocated with the iterator (its only link to
    it), which TF puts with the iterator once it inlines the cond."""
    def build():
        total = tf.Variable(0.0)

        @tf.function
        def step(it):
            optional = it.get_next_as_optional()
            if optional.has_value():
                total.assign_add(optional.get_value())
            return total.read_value()

        return step

    dataset = tf.data.Dataset.range(5).map(lambda i: tf.cast(i, tf.float32))
    original, it = build(), iter(dataset)
    want = [float(original(it)) for _ in range(7)]
    step, it = build(), iter(dataset)
    placed, report = tf2.autoplace_function(step, it, cluster="local", placer="metis", seed=0)
    return {"want": want, "got": [float(placed(it)) for _ in range(7)],
            "devices": sorted(set(report.assignment.values()))}


def run_checks(checks) -> None:
    """Run each (name, check) and print {name: result} as JSON on one line; a check that
    raises reports its exception and traceback instead, so the test fails with them."""
    results = {}
    for name, check in checks:
        try:
            results[name] = check()
        except Exception as e:  # reported to the test, which fails with the message
            import traceback

            results[name] = {"exception": f"{type(e).__name__}: {e}",
                             "traceback": traceback.format_exc()}
    print(json.dumps(results))
    sys.stdout.flush()


def main():
    run_checks([("local", check_local_cluster_is_the_configured_cpus),
                ("keras", check_keras_training_step),
                ("dispatch", check_dispatch_nested_and_kwargs),
                ("calls", check_calls_and_gradients_as_the_original),
                ("control_flow", check_control_flow_with_nested_call),
                ("specialized_call", check_specialized_call),
                ("keras_lstm", check_keras_lstm_training_step),
                ("dataset_loop", check_dataset_loop_note),
                ("two_device_variables", check_control_flow_over_variables_on_two_devices),
                ("optional_from_iterator", check_an_optional_read_from_an_iterator_argument),
                ("profiled_split", check_a_profiled_split_gets_a_functions_advice),
                ("errors", errors)])


def check_a_profiled_split_gets_a_functions_advice():
    """A split over this process's CPUs from a profile that no run checked: the note's advice
    is a function's, without the cost profile it was placed with."""
    from google.protobuf import text_format

    from tf_autoplace.hw.profiler import profile_ops
    from tf_autoplace.hw.runner import RunConfig
    from tf_autoplace.hw.workload import Workload

    w = tf.Variable(tf.ones((16, 16)))

    @tf.function(input_signature=[tf.TensorSpec([8, 16], tf.float32)])
    def step(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w)))

    x = tf.ones((8, 16))
    profile = profile_ops(Workload.from_function(step, x), kinds=("CPU",), partners=False,
                          config=RunConfig(steps=1, warmup_steps=1, trace_steps=2))
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/step.pbtxt"
        with open(path, "w") as f:
            f.write(text_format.MessageToString(profile))
        placed = tf_autoplace.autoplace(step, cluster="local", placer="random",
                                        cost_profile=path, progress=False)
    return {"devices": len(set(placed.report.assignment.values())),
            "unchecked": [n for n in placed.report.notes if "no run has checked" in n]}


if __name__ == "__main__":
    main()
