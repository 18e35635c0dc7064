"""Adam for the learned placers' policies, without Keras's per-op overhead.

A learned placer updates a small policy (tens of variables of a few thousand weights) after
every batch of samples, eagerly. Keras 3's ``Adam.apply_gradients`` runs each variable's update
through its backend-neutral op layer and distribution hooks: milliseconds per variable, often
more than the forward and backward passes themselves; a traced (``tf.function``) update costs
seconds of tracing every time a placer starts, which a short search never earns back. Two
optimizers here do the same mathematics with plain TensorFlow ops:

- :class:`KerasAdam`: exactly Keras 3's ``keras.optimizers.Adam`` arithmetic (the same ops in
  the same order, its defaults), so weights, samples and placements are bit for bit those of a
  Keras optimizer: Placeto's and HDP's searches, and the shipped Placeto policy's training,
  give what they gave with Keras.
- :class:`FusedAdam`: one ``ResourceApplyAdam`` kernel per variable after clipping the
  gradients to a global norm (GDP's PPO updates). The kernel computes ``1 - beta`` and the
  bias correction in float32 where Keras does part of it in float64, so its weights differ
  from Keras's in the last bits; GDP's policy was trained with it, and keeps it.
"""

from __future__ import annotations

import tensorflow as tf


class KerasAdam:
    """Keras 3's Adam, op for op, over the variables it is given.

    The update of a variable ``w`` with gradient ``g`` at step ``t`` (counting from 1), as
    ``keras.optimizers.Adam.update_step`` computes it in float32::

        alpha = lr * sqrt(1 - beta2**t) / (1 - beta1**t)
        m += (g - m) * (1 - beta1)
        v += (g**2 - v) * (1 - beta2)
        w -= m * alpha / (sqrt(v) + epsilon)

    As Keras does, a variable whose gradient is None is left alone (its moments too) while the
    step count still advances, and a sparse gradient (``tf.IndexedSlices``) is applied as its
    dense value, except in ``v``, which gets the sum of its slices' squares (a row gathered
    twice: the two squares, not the square of the sum).

    Args:
      learning_rate: the rate (change it between steps with :attr:`learning_rate`).
      beta1, beta2, epsilon: Keras's defaults.
    """

    def __init__(self, learning_rate: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-7):
        self.learning_rate = learning_rate
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.iterations = 0
        self._moments: dict[int, tuple[tf.Variable, tf.Variable]] = {}

    def apply_gradients(self, grads_and_vars) -> None:
        """One step: every ``(gradient, variable)`` pair updated as the class docstring says.

        Raw ops, each the kernel Keras's op of the same name runs, skip TensorFlow's Python
        dispatch layers (most of an eager op's cost at these sizes)."""
        raw = tf.raw_ops
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        f32 = tf.float32
        step = tf.constant(float(self.iterations + 1), f32)
        beta1_power = raw.Pow(x=tf.constant(self.beta1, f32), y=step)
        beta2_power = raw.Pow(x=tf.constant(self.beta2, f32), y=step)
        lr = tf.constant(self.learning_rate, f32)
        one = tf.constant(1.0, f32)
        alpha = raw.RealDiv(x=raw.Mul(x=lr, y=raw.Sqrt(x=raw.Sub(x=one, y=beta2_power))),
                            y=raw.Sub(x=one, y=beta1_power))
        # 1 - beta in float64, then float32, as Keras's Python arithmetic gives them.
        keep1, keep2 = tf.constant(1 - self.beta1, f32), tf.constant(1 - self.beta2, f32)
        epsilon = tf.constant(self.epsilon, f32)
        for grad, variable in pairs:
            if isinstance(grad, tf.IndexedSlices):
                # Keras squares a sparse gradient's slices before it sums the slices of one
                # row: a row gathered twice adds the squares of its two slices to v.
                square = tf.convert_to_tensor(tf.IndexedSlices(
                    raw.Square(x=grad.values), grad.indices, grad.dense_shape))
                grad = tf.convert_to_tensor(grad)
            else:
                grad = tf.convert_to_tensor(grad)
                square = raw.Square(x=grad)
            m, v = self._slots(variable)
            raw.AssignAddVariableOp(resource=m.handle, value=raw.Mul(
                x=raw.Sub(x=grad, y=_read(m)), y=keep1))
            raw.AssignAddVariableOp(resource=v.handle, value=raw.Mul(
                x=raw.Sub(x=square, y=_read(v)), y=keep2))
            raw.AssignSubVariableOp(resource=variable.handle, value=raw.RealDiv(
                x=raw.Mul(x=_read(m), y=alpha),
                y=raw.AddV2(x=raw.Sqrt(x=_read(v)), y=epsilon)))
        self.iterations += 1

    def _slots(self, variable) -> tuple[tf.Variable, tf.Variable]:
        """The first and second moments of ``variable``, zeros at its first update."""
        key = id(variable)
        if key not in self._moments:
            self._moments[key] = (tf.Variable(tf.zeros_like(variable), trainable=False),
                                  tf.Variable(tf.zeros_like(variable), trainable=False))
        return self._moments[key]


class FusedAdam:
    """Adam (Kingma and Ba 2015) over a fixed list of variables, after clipping the gradients
    to a global norm, one fused kernel (``ResourceApplyAdam``) per variable (module doc).

    Args:
      variables: the variables every :meth:`apply` updates, in the order of its gradients.
      beta1, beta2, epsilon: Adam's constants.
    """

    def __init__(self, variables, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-7):
        self.variables = list(variables)
        self.m = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.variables]
        self.v = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.variables]
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.t = 0

    def apply(self, grads, learning_rate: float, max_norm: float) -> None:
        """One step with ``grads`` (one per variable) clipped to global norm ``max_norm``."""
        grads, _ = tf.clip_by_global_norm(grads, max_norm)
        self.t += 1
        constants = [tf.constant(x, tf.float32) for x in (
            self.beta1 ** self.t, self.beta2 ** self.t, learning_rate, self.beta1, self.beta2,
            self.epsilon)]
        for var, m, v, g in zip(self.variables, self.m, self.v, grads):
            tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle,
                                         beta1_power=constants[0], beta2_power=constants[1],
                                         lr=constants[2], beta1=constants[3],
                                         beta2=constants[4], epsilon=constants[5], grad=g)


def _read(variable) -> tf.Tensor:
    return tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype)
