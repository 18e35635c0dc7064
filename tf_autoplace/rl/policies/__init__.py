"""Policy networks of the learned placers, each a ``tf.Module`` with one documented call."""
