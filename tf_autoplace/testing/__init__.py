"""Importable test helpers: small real TF training graphs and a runner for placed graphs."""

from tf_autoplace.testing.graphs import (TrainingGraph, free_batch_graph, run_training_steps,
                                         small_cnn, while_loop_graph)

__all__ = ["TrainingGraph", "free_batch_graph", "run_training_steps", "small_cnn",
           "while_loop_graph"]
