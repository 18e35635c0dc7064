r"""Run a TensorFlow cluster of server processes on this machine until Ctrl-C.

    tf-autoplace serve-local --tasks=2 --out_cluster=cluster.pbtxt
    tf-autoplace serve-local --tasks=3 --ps_tasks=1 --profile_links --out_cluster=cluster.pbtxt

Starts ``--tasks`` ``tf.distribute.Server`` processes on free loopback ports, each pinned to
cores of its own where the machine has enough (with more tasks than cores they share cores,
and the command says so), as ``tf_autoplace.hw.local_cluster`` does. Once every server serves,
it writes the cluster as a text ``ClusterSpec`` (``protos/cluster.proto``: the tasks' devices,
the links between them, the tasks and the ``target`` a Session connects to) to
``--out_cluster``, prints the target, and serves until Ctrl-C or SIGTERM. Then every server
process ends and ``--out_cluster`` is removed: it describes servers that no longer run. So the
command does not take a path where a file already is (a cluster spec of the user's would be
replaced, then removed), except the spec of a serve-local that has ended (killed before it
could remove it), which its first line names with that command's process id. A
server that stops on its own (killed, out of memory) ends the command the same way, with an
``error:`` line naming the task and status 1: a spec that names a dead server would make
every placement on it fail later, far from the cause.

From another shell, while it serves: place on it (``tf-autoplace place --cluster=cluster.pbtxt``,
``--autoplace_cluster=cluster.pbtxt`` in a training binary whose session target is the
printed one, ``autoplace(graph, cluster="cluster.pbtxt")``), run on it
(``tf.compat.v1.Session(target)``), and profile it (``tf-autoplace profile
--cluster=cluster.pbtxt``). With ``--profile_links`` the links between its devices are measured
over gRPC first (``tf_autoplace.hw.cluster_profile``) and the spec holds the fitted figures;
otherwise they are the link classes' defaults.

TensorFlow's servers listen on every interface at their ports, without authentication: on a
machine others can reach, keep the ports behind a firewall.
"""

from __future__ import annotations

import sys
import time

from absl import flags
from google.protobuf import text_format

from tf_autoplace.cli import serve_local_flags  # noqa: F401  (defines this command's flags)
from tf_autoplace.cli import spec_file
from tf_autoplace.errors import AutoplaceError
from tf_autoplace.hw.cluster_profile import profile_cluster
from tf_autoplace.hw.local_cluster import local_cluster
from tf_autoplace.hw.runner import connection_error
from tf_autoplace.outputs.files import Outputs, check_output_path

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.serve_local_flags
POLL_S = 1.0  # how often the servers are checked while serving


def main(argv):
    del argv
    try:
        path = check_output_path(FLAGS.out_cluster, "--out_cluster")
        spec_file.check_free(path)
        with local_cluster(FLAGS.tasks, ps_tasks=FLAGS.ps_tasks, job=FLAGS.job,
                           cpus_per_task=FLAGS.cpus_per_task, threads=FLAGS.threads or None,
                           pin=FLAGS.pin) as cluster:
            if FLAGS.profile_links:
                measured = profile_cluster(cluster)
                cluster = measured.cluster
                for name, fit in measured.class_fits.items():
                    print(f"links of class {name}: {fit.latency_us:.1f} us + bytes / "
                          f"{fit.bandwidth_gbps:.3g} GB/s (median of its pairs)")
            note = "".join(f"# tasks {', '.join(sorted(tasks))} share the cores of core group "
                           f"{group!r}\n" for group, tasks in _sharing(cluster).items())
            spec_file.check_free(path)  # again: the servers took seconds to start
            spec = (spec_file.header(FLAGS.tasks) + note
                    + text_format.MessageToString(cluster.to_proto())).encode("utf-8")
            outputs = Outputs()
            outputs.add_file(path, spec)
            try:
                outputs.commit()
                if note:
                    print(note.replace("# ", "").strip())
                print(f"serving {', '.join(t.name for t in cluster.tasks)} at {cluster.target}; "
                      f"wrote {path}; Ctrl-C ends every server", flush=True)
                stopped = _serve(cluster.tasks)
            finally:
                spec_file.remove_if_ours(path, spec)
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    # Serving ends by a signal (which tf_autoplace.cli.main reports: 130/143) or a task's end.
    print(f"error: {stopped}; every server has ended and {path} was removed", file=sys.stderr)
    return 1


def _sharing(cluster) -> dict[str, set]:
    """Core group -> the tasks whose devices share its cores, for groups of several tasks."""
    tasks: dict[str, set] = {}
    for i, device in enumerate(cluster.devices):
        tasks.setdefault(device.core_group, set()).add(cluster.task_of(i).name)
    return {group: names for group, names in tasks.items() if group and len(names) > 1}


def _serve(tasks) -> str:
    """Serve until a signal ends the command (Ctrl-C, SIGTERM: an interrupt that leaves the
    servers' block, which ends them, and that tf_autoplace.cli.main reports in one line) or
    a server of ``tasks`` refuses connections (its process has ended); returns which. A
    connection that times out is not taken for an end: a loaded server may be slow to accept."""
    while True:
        time.sleep(POLL_S)
        for task in tasks:
            error = connection_error(task.address, POLL_S)
            if error is not None and not isinstance(error, TimeoutError):
                return f"the server of task {task.name} ({task.address}) has stopped ({error})"
