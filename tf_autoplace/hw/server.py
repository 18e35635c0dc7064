"""One task of a local TensorFlow cluster: a ``tf.distribute.Server`` in a process of its own.

:func:`tf_autoplace.hw.local_cluster.local_cluster` starts one of these per task::

    python -m tf_autoplace.hw.server '{"cluster": {...}, "job": "worker", "index": 0,
                                        "cores": [0], "threads": 1, "cpus": 1, "parent": PID}'

and the process

1. ends with its parent, whatever way the parent ends: on Linux the kernel kills it when the
   parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through ctypes), and on every system a
   thread reads its standard input, a pipe from the parent, and ends the process when the pipe
   closes (the parent closed it, or died and the kernel closed it). If the parent is already
   gone when the process starts (its parent pid changed), it ends at once;
2. ignores SIGINT: Ctrl-C in a terminal reaches every process of the foreground group, and the
   parent is the one that decides (it ends its servers on its way out); SIGTERM ends it;
3. pins itself to ``cores`` (``os.sched_setaffinity``, before TensorFlow sizes its thread
   pools) where the system has it;
4. starts the server with ``threads`` inter-op and intra-op threads and ``cpus`` logical CPU
   devices, prints ``ready <pid>`` on standard output, and serves until it is ended. If the
   server cannot start (its port was taken), it prints ``error <message>`` and exits 1.

It imports nothing of tf_autoplace, so it starts as fast as TensorFlow does.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(parent: int) -> None:
    """Make this process end when ``parent`` (its parent's pid) does (module docstring)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the kernel was told to watch it
        os._exit(1)

    def watch_pipe():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        finally:
            os._exit(0)

    threading.Thread(target=watch_pipe, name="parent-pipe", daemon=True).start()


def main(argv: list[str]) -> int:
    settings = json.loads(argv[1])
    end_with_parent(int(settings["parent"]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if settings.get("cores") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, settings["cores"])
    import tensorflow as tf  # after pinning: TF sizes its pools from the cores it may use

    threads = int(settings["threads"])
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                      inter_op_parallelism_threads=threads,
                                      device_count={"CPU": int(settings["cpus"])})
    try:  # kept in a name: a collected Server stops serving
        server = tf.distribute.Server(tf.train.ClusterSpec(settings["cluster"]),
                             job_name=settings["job"], task_index=int(settings["index"]),
                             config=config, start=True)
    except Exception as e:  # noqa: BLE001  (the parent reads why, then ends the others)
        print(f"error {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
              flush=True)
        os._exit(1)
    print(f"ready {os.getpid()}", flush=True)
    threading.Event().wait()  # serve until the parent's pipe closes or a signal ends it
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
