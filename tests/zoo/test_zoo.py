"""Model zoo: small versions of every model build, train one step and are deterministic."""

import functools
import re

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace import zoo
from tf_autoplace.errors import ConfigError

# Small knobs per model and the op-count range measured for them (with ~15% margin).
SMALL = {
    "inception_v3": (dict(batch=2, image_size=75, num_classes=10), (7000, 9500)),
    "resnet50": (dict(batch=2, image_size=32, num_classes=10), (5300, 7200)),
    "nasnet": (dict(batch=2, image_size=32, num_classes=10), (21000, 28500)),
    "nmt": (dict(layers=2, length=4, batch=2, hidden=8, embedding_dim=8, vocab=20),
            (1700, 2400)),
    "rnnlm": (dict(layers=2, length=4, batch=2, hidden=8, embedding_dim=8, vocab=20),
              (650, 920)),
    "transformer": (dict(layers=2, length=4, batch=2, d_model=8, heads=2, d_ff=16, vocab=20),
                    (1200, 1700)),
    "wavenet": (dict(stacks=2, layers_per_stack=3, channels=4, skip_channels=8, length=16,
                     batch=2, classes=256), (1400, 1900)),
    "branches": (dict(batch=2, image_size=8, channels=4, branches=3, blocks=2, num_classes=10),
                 (545, 740)),
    "two_tower": (dict(batch=2, features=4, layers=2, width=8), (280, 385)),
    "wide_deep": (dict(batch=2, tables=2, vocab=50, dim=4, ids_per_table=2, dense_features=3,
                       layers=2, width=8), (240, 330)),
}
SEQUENCE_MODELS = ("nmt", "rnnlm", "transformer", "wavenet")


def _models(*slow):
    """zoo.MODELS, those in ``slow`` marked slow. NASNet-Mobile has full-size cells even at
    32x32 pixels: ~10-20 s per build on 2 cores; the two CNNs take seconds each."""
    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name
            for name in zoo.MODELS]


MODELS = _models("nasnet")
STATEFUL_RANDOM_OPS = {"RandomUniform", "RandomStandardNormal", "TruncatedNormal"}


@functools.lru_cache(maxsize=None)
def small(name: str) -> zoo.ModelGraph:
    """The small version of ``name``, built once per test session."""
    return zoo.build(name, **SMALL[name][0])


def _session(graph: tf.Graph) -> tf.compat.v1.Session:
    """A session without grappler, whose rewrites dominate one step of a small graph."""
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return tf.compat.v1.Session(graph=graph, config=config)


def test_models_are_the_papers_models_and_three_users_kinds():
    assert zoo.MODELS == ("inception_v3", "resnet50", "nasnet", "nmt", "rnnlm", "transformer",
                          "wavenet", "branches", "two_tower", "wide_deep")
    assert set(SMALL) == set(zoo.MODELS)


@pytest.mark.parametrize("name", _models("nasnet", "resnet50", "inception_v3"))
def test_structure(name):
    model = small(name)
    graph = model.graph
    low, high = SMALL[name][1]
    assert low <= len(graph.get_operations()) <= high
    loss = graph.get_tensor_by_name(model.loss)
    assert loss.shape == () and loss.dtype == tf.float32
    graph.get_operation_by_name(model.train_op)
    graph.get_operation_by_name(model.init_op)
    placeholders = {op.outputs[0].name: (tuple(op.outputs[0].shape), op.outputs[0].dtype)
                    for op in graph.get_operations() if op.type == "Placeholder"}
    assert placeholders == {name: (shape, tf.as_dtype(dtype))
                            for name, (shape, dtype) in model.feeds.items()}
    assert SMALL[name][0].items() <= model.knobs.items()


@pytest.mark.parametrize("name", [  # the two largest graphs' steps behind -m slow
    pytest.param(name, marks=pytest.mark.slow) if name in ("inception_v3", "resnet50") else name
    for name in MODELS])
def test_one_training_step_gives_finite_loss_and_changes_it(name):
    model = small(name)
    feed = model.sample_feed(0)
    with _session(model.graph) as session:
        session.run(model.init_op)
        before, _ = session.run([model.loss, model.train_op], feed)
        after = session.run(model.loss, feed)
    assert np.isfinite(before) and np.isfinite(after)
    assert after != before


@pytest.mark.parametrize("name", _models("nasnet", "resnet50", "inception_v3"))
def test_same_knobs_give_same_graph_and_seeded_initializers(name):
    model = small(name)
    assert zoo.build(name, **SMALL[name][0]).graph.as_graph_def() == model.graph.as_graph_def()
    for op in model.graph.get_operations():
        if op.type in STATEFUL_RANDOM_OPS:
            assert op.get_attr("seed") or op.get_attr("seed2"), op.name


@pytest.mark.parametrize("name", SEQUENCE_MODELS)
def test_layer_scopes_own_every_variable_matmul_and_update(name):
    model = small(name)
    assert len(model.layer_scopes) == len(set(model.layer_scopes)) >= 3
    assert model.layer_scopes[-1] == "softmax/"
    for variable in model.graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES):
        owners = [s for s in model.layer_scopes if variable.op.name.startswith(s)]
        assert len(owners) == 1, variable.op.name
    owned = {}
    for op in model.graph.get_operations():
        if "MatMul" in op.type or "Conv2D" in op.type or op.type.startswith("ResourceApply"):
            assert model.scope_of(op.name) is not None, op.name
        owned.setdefault(model.scope_of(op.name), op.name)
    assert set(model.layer_scopes) <= set(owned)


def test_sample_feed_is_deterministic_and_in_range():
    model = small("nmt")
    first, again, other = model.sample_feed(0), model.sample_feed(0), model.sample_feed(1)
    assert set(first) == set(model.feeds) == set(model.int_bounds)
    for name, (shape, dtype) in model.feeds.items():
        assert first[name].shape == shape and first[name].dtype == dtype
        assert 0 <= first[name].min() and first[name].max() < model.int_bounds[name]
        np.testing.assert_array_equal(first[name], again[name])
    assert any((first[name] != other[name]).any() for name in first)
    images = small("resnet50").sample_feed(0)["images:0"]
    assert images.dtype == np.float32 and images.shape == (2, 32, 32, 3)


def test_nmt_scopes_follow_the_pipeline():
    assert small("nmt").layer_scopes == (
        "encoder/embedding/", "encoder/layer_0/", "encoder/layer_1/", "decoder/embedding/",
        "decoder/layer_0/", "attention/", "decoder/layer_1/", "softmax/")
    wavenet_scopes = small("wavenet").layer_scopes
    assert wavenet_scopes[:3] == ("input/", "stack_0/layer_0/", "stack_0/layer_1/")
    assert len(wavenet_scopes) == 2 * 3 + 2


@pytest.mark.parametrize("name, knobs, message", [
    ("alexnet", {}, "known models: inception_v3, resnet50, nasnet"),
    ("nmt", {"depth": 2}, "unknown knob(s) depth"),
    ("inception_v3", {"image_size": 74}, "inception_v3 needs image_size >= 75, got 74"),
    ("rnnlm", {"layers": 0, "batch": 2.5}, "positive integers: layers=0, batch=2.5"),
    ("transformer", {"d_model": 10, "heads": 3}, "d_model=10 is not a multiple of heads=3"),
    ("nasnet", {"variant": "medium"}, "variant"),
])
def test_bad_names_and_knobs_raise_config_error(name, knobs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        zoo.build(name, **knobs)


def test_wide_and_deep_tables_are_pieces_a_placement_may_split():
    from tf_autoplace.graph import ingest

    model = small("wide_deep")
    graph = ingest.to_opgraph(ingest.load_meta_graph(model.graph))
    group = {name: int(graph.colocation[graph.index(name)]) for name in graph.names
             if name.startswith("embedding_") and name.endswith("/table")}
    assert set(group) == {"embedding_0/table", "embedding_1/table"}
    assert len(set(group.values())) == 2  # one colocation group per table
    updates = [op.type for op in model.graph.get_operations() if "Apply" in op.type]
    assert any("SparseApplyAdagrad" in u for u in updates)  # rows of the looked-up ids only


def test_a_knob_too_large_for_tensorflow_is_a_config_error_naming_it():
    # It ended in TensorFlow's ValueError (a shape whose element count overflows).
    with pytest.raises(ConfigError, match="model nmt with .*batch=99999999999 cannot be built: "
                                          "TensorFlow refuses its shapes"):
        zoo.build("nmt", layers=1, length=2, hidden=8, embedding_dim=8, vocab=16,
                  batch=99999999999)
