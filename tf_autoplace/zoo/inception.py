"""Inception-V3 (Szegedy et al. 2016), the image model of every device-placement paper
(Mirhoseini et al. 2017 and 2018, Placeto, GDP): ``tf_keras.applications.InceptionV3`` at its
native 299x299 input with batch 64 and 1000 classes by default; the smallest image size it
accepts is 75. See :mod:`tf_autoplace.zoo.keras_classifier` for how the training graph is
built.
"""

import tf_keras

from tf_autoplace.zoo.base import ModelGraph
from tf_autoplace.zoo.keras_classifier import build_classifier


def build_inception_v3(*, batch: int = 64, image_size: int = 299,
                       num_classes: int = 1000) -> ModelGraph:
    """The Inception-V3 training graph (see module doc)."""
    return build_classifier("inception_v3", tf_keras.applications.InceptionV3, batch=batch,
                            image_size=image_size, num_classes=num_classes, min_size=75)
