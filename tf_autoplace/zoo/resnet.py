"""ResNet-50 (He et al. 2016), the ResNet of the Hierarchical Planner (Mirhoseini et al.
2018): ``tf_keras.applications.ResNet50`` at its native 224x224 input with batch 64 and 1000
classes by default; the smallest image size it accepts is 32. See
:mod:`tf_autoplace.zoo.keras_classifier` for how the training graph is built.
"""

import tf_keras

from tf_autoplace.zoo.base import ModelGraph
from tf_autoplace.zoo.keras_classifier import build_classifier


def build_resnet50(*, batch: int = 64, image_size: int = 224,
                   num_classes: int = 1000) -> ModelGraph:
    """The ResNet-50 training graph (see module doc)."""
    return build_classifier("resnet50", tf_keras.applications.ResNet50, batch=batch,
                            image_size=image_size, num_classes=num_classes, min_size=32)
