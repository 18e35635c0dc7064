"""Model zoo: TF1-style training graphs of the models the device-placement papers place, and a
Wide & Deep recommender (embedding tables to spread over the tasks of a TensorFlow cluster).

Each model is built from code in its own ``tf.Graph`` (forward, backward and optimizer update)
with size knobs, so small versions run in tests and full versions (the defaults) in
benchmarks::

    from tf_autoplace import zoo
    model = zoo.build("nmt", layers=2, length=8, batch=4, hidden=32, embedding_dim=32,
                      vocab=100)
    with tf.compat.v1.Session(graph=model.graph) as session:
        session.run(model.init_op)
        session.run([model.loss, model.train_op], model.sample_feed(0))

Models (one module each; see its docstring for the setting and the knobs):

==============  =====================================  ==================================
name            module                                 knobs (defaults)
==============  =====================================  ==================================
inception_v3    :mod:`~tf_autoplace.zoo.inception`     batch=64, image_size=299,
                                                       num_classes=1000
resnet50        :mod:`~tf_autoplace.zoo.resnet`        batch=64, image_size=224,
                                                       num_classes=1000
nasnet          :mod:`~tf_autoplace.zoo.nasnet`        batch=64, image_size=224,
                                                       num_classes=1000, variant="mobile"
nmt             :mod:`~tf_autoplace.zoo.nmt`           layers=8, length=32, batch=128,
                                                       hidden=1024, embedding_dim=1024,
                                                       vocab=30000
rnnlm           :mod:`~tf_autoplace.zoo.rnnlm`         layers=4, length=35, batch=64,
                                                       hidden=1024, embedding_dim=1024,
                                                       vocab=10000
transformer     :mod:`~tf_autoplace.zoo.transformer`   layers=8, length=256, batch=32,
                                                       d_model=512, heads=8, d_ff=2048,
                                                       vocab=32000
wavenet         :mod:`~tf_autoplace.zoo.wavenet`       stacks=4, layers_per_stack=9,
                                                       channels=64, skip_channels=256,
                                                       length=4096, batch=16, classes=256
branches        :mod:`~tf_autoplace.zoo.branches`      batch=16, image_size=32,
                                                       channels=16, branches=3, blocks=3,
                                                       num_classes=10
two_tower       :mod:`~tf_autoplace.zoo.two_tower`     batch=32, features=64, layers=6,
                                                       width=128, num_classes=2
wide_deep       :mod:`~tf_autoplace.zoo.wide_deep`     batch=64, tables=4, vocab=100000,
                                                       dim=32, ids_per_table=8,
                                                       dense_features=16, layers=3,
                                                       width=128, num_classes=2
==============  =====================================  ==================================

The last three are not the papers' models: they are small graphs of the kinds users train
(a Keras CNN with parallel branches, a two-tower model, a model with large embedding tables),
which the simulator-fidelity benchmark measures on this machine.

The sequence models name their layers' scopes in ``ModelGraph.layer_scopes`` (pipeline
order), for baselines that place one layer per device.
"""

from __future__ import annotations

import dataclasses
import inspect

from tf_autoplace.errors import ConfigError
from tf_autoplace.zoo.base import ModelGraph
from tf_autoplace.zoo.branches import build_branches
from tf_autoplace.zoo.inception import build_inception_v3
from tf_autoplace.zoo.nasnet import build_nasnet
from tf_autoplace.zoo.nmt import build_nmt
from tf_autoplace.zoo.resnet import build_resnet50
from tf_autoplace.zoo.rnnlm import build_rnnlm
from tf_autoplace.zoo.transformer import build_transformer
from tf_autoplace.zoo.two_tower import build_two_tower
from tf_autoplace.zoo.wavenet import build_wavenet
from tf_autoplace.zoo.wide_deep import build_wide_deep

_BUILDERS = {
    "inception_v3": build_inception_v3,
    "resnet50": build_resnet50,
    "nasnet": build_nasnet,
    "nmt": build_nmt,
    "rnnlm": build_rnnlm,
    "transformer": build_transformer,
    "wavenet": build_wavenet,
    "branches": build_branches,
    "two_tower": build_two_tower,
    "wide_deep": build_wide_deep,
}

MODELS = tuple(_BUILDERS)


def parse_knobs(pairs) -> dict[str, int]:
    """``["layers=2", "batch=16"]`` -> ``{"layers": 2, "batch": 16}`` (the tools' ``--knob``
    flags); a malformed pair or a value that is not an integer is a ConfigError naming it."""
    knobs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--knob wants name=value, got {pair!r}")
        try:
            knobs[name] = int(value)
        except ValueError:
            raise ConfigError(f"--knob {name} wants an integer, got {value!r}") from None
    return knobs


def build(name: str, **knobs) -> ModelGraph:
    """Build the training graph of zoo model ``name`` with the given size knobs (the others
    keep their defaults). Unknown names and knobs, knobs out of range, and knobs so large
    that TensorFlow refuses the graph's shapes raise ConfigError.
    """
    arguments = all_knobs(name, **knobs)
    try:
        model = _BUILDERS[name](**arguments)
    except ValueError as e:  # TensorFlow refusing a shape: a knob too large for it
        given = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "the defaults"
        raise ConfigError(f"model {name} with {given} cannot be built: TensorFlow refuses its "
                          f"shapes ({str(e).splitlines()[0][:200]}); is a knob too large?"
                          ) from e
    return dataclasses.replace(model, knobs=arguments)


def all_knobs(name: str, **knobs) -> dict:
    """Every knob :func:`build` would use for these: the given ones and the defaults of the
    rest (ConfigError for an unknown model or knob). Two knob sets build the same graph when
    their ``all_knobs`` are equal."""
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    signature = inspect.signature(_BUILDERS[name])
    unknown = sorted(set(knobs) - set(signature.parameters))
    if unknown:
        raise ConfigError(f"unknown knob(s) {', '.join(unknown)} for {name}; known knobs: "
                          f"{', '.join(signature.parameters)}")
    bound = signature.bind(**knobs)
    bound.apply_defaults()
    return dict(bound.arguments)


__all__ = ["MODELS", "ModelGraph", "all_knobs", "build", "parse_knobs"]
