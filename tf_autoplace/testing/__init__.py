"""Importable test helpers: small real TF training graphs and a runner for placed graphs."""

from tf_autoplace.testing.graphs import (TrainingGraph, run_training_steps, small_cnn,
                                         while_loop_graph)

__all__ = ["TrainingGraph", "run_training_steps", "small_cnn", "while_loop_graph"]
