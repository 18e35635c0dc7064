"""NASNet (Zoph et al. 2018), the NASNet of Placeto (Addanki et al. 2019).

``variant="mobile"`` (the default) is ``tf_keras.applications.NASNetMobile`` (NASNet-A
4@1056, native input 224x224); ``variant="large"`` is ``NASNetLarge`` (NASNet-A 6@4032, native
331x331), with 1.4 times the ops and 17 times the parameters. Defaults: batch 64, 224x224
images, 1000 classes; the smallest image size either accepts is 32. The cell structure, and so
the op count, does not depend on the image size. See :mod:`tf_autoplace.zoo.keras_classifier`
for how the training graph is built.
"""

import tf_keras

from tf_autoplace.errors import ConfigError
from tf_autoplace.zoo.base import ModelGraph
from tf_autoplace.zoo.keras_classifier import build_classifier

_VARIANTS = {"mobile": tf_keras.applications.NASNetMobile,
             "large": tf_keras.applications.NASNetLarge}


def build_nasnet(*, batch: int = 64, image_size: int = 224, num_classes: int = 1000,
                 variant: str = "mobile") -> ModelGraph:
    """The NASNet training graph (see module doc)."""
    if variant not in _VARIANTS:
        raise ConfigError(f"unknown NASNet variant {variant!r}; known: {', '.join(_VARIANTS)}")
    return build_classifier("nasnet", _VARIANTS[variant], batch=batch, image_size=image_size,
                            num_classes=num_classes, min_size=32)
