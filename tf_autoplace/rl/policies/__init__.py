"""Policies of the learned placers: the networks, each a ``tf.Module`` with one documented
call (Placeto's), and Post's softmax tables, plain numpy (:mod:`.softmax`)."""
