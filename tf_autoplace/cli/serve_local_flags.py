"""The flags of ``tf-autoplace serve-local``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace serve-local --help`` lists them without importing it."""

from absl import flags

flags.DEFINE_integer("tasks", 2, "Server processes (tasks) to start.")
flags.DEFINE_integer("ps_tasks", 0, "How many of them form the job 'ps' (parameter servers).")
flags.DEFINE_string("job", "worker", "The job of the other tasks.")
flags.DEFINE_integer("cpus_per_task", 1, "Logical CPU devices per task.")
flags.DEFINE_integer("threads", 0, "Inter-op and intra-op threads per server (0: its cores).")
flags.DEFINE_bool("pin", True, "Pin each task to cores of its own where there are enough.")
flags.DEFINE_bool("profile_links", False, "Measure the links over gRPC before writing the spec.")
flags.DEFINE_string("out_cluster", None, "Write the cluster's text ClusterSpec here while it "
                    "serves (a new path: it is removed at the end).")
flags.mark_flags_as_required(["out_cluster"])
