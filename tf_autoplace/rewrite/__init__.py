"""Apply a placement to tf.Graph (in place, atomically) or GraphDef (a copy)."""

from tf_autoplace.rewrite.apply import (apply_to_graph, apply_to_graph_def, canonical_device,
                                        check_annotations, other_task, replaced_devices,
                                        was_placed)

__all__ = ["apply_to_graph", "apply_to_graph_def", "canonical_device", "check_annotations",
           "other_task", "replaced_devices", "was_placed"]
