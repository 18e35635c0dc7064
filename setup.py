"""tf_autoplace: device placement for TensorFlow training graphs.

Dependencies beyond the project's base set (tensorflow, numpy, networkx, absl-py), each because
a well-kept library does the job better than code we would write:

- numba: the event-based simulator runs thousands of times per placement search and must take
  under 10 ms on an 8k-op graph; numba compiles its one readable Python event loop to machine
  code, where pure Python takes ~100x longer and a C extension would be a second language to
  build and keep in step.
- tf-keras: the Keras applications (Inception-V3, ResNet-50, NASNet) in the model zoo need
  Keras 2's v1 graph mode to build training graphs as tf.Graph.
- tensorboard (extra "train"): tf.summary writes Placeto's training curves through it; TF
  2.21 no longer installs it, and only training tools need it.
- highspy: the LP lower bound on the step time (``tf_autoplace.sim.lp_bound``) is solved by
  HiGHS, a maintained open-source LP solver; highspy is its own thin binding (one wheel, no
  SciPy), and it returns the row duals the bound is certified from, also after a time limit.
- platformdirs: the user's cache directory on every platform (XDG on Linux, ~/Library/Caches on
  macOS, %LOCALAPPDATA% on Windows), where numba's compiled simulator kernels are cached
  (tf_autoplace/core/jit.py) instead of inside the installed package.
- pymetis (where it has wheels: Linux x86_64 and macOS): the ``metis`` placer partitions with
  METIS 5 itself. pymetis publishes no wheel for Windows or Linux aarch64, where TensorFlow has
  wheels; there pip would have to build it from source with a C compiler, so it is not required
  there and the placer falls back to our own multilevel partitioner (it cuts slightly worse;
  ``tf_autoplace/heuristics/metis.py``). The ``metis`` extra builds it anywhere.
- tqdm: the progress bar of placement searches on a terminal (samples done of the budget, best
  step time so far, elapsed and remaining time); a well-kept bar that handles terminals, widths
  and update rates, which we would otherwise write ourselves.
- protobuf >= 4.21: the generated modules in tf_autoplace/proto come from protoc 35.1 with its
  runtime-version check taken out (tools/gen_protos.py says why: TensorFlow 2.16-2.19 require
  protobuf below 5 or 6); what they call is in every protobuf since 3.20, and 4.21 is the
  oldest TensorFlow 2.16 installs. The test extra's grpcio-tools 1.85.1 (protoc 35.1, to check
  the committed modules) needs protobuf 7.35.1, so the tests run on TensorFlow 2.20 or newer.

Not a dependency: tensorflow-probability. Placeto's REINFORCE needs a categorical
distribution's log-probability and entropy, two TensorFlow ops each
(``tf_autoplace/placers/placeto/reinforce.py``); importing the library for them cost every
process that imports the package about 0.65 s. The test extra installs it to check those ops
against its ``Categorical`` bit for bit.

Optional extras:

- plot (matplotlib): ``report.write_plot`` / ``--plot_png`` draw per-device load and memory as a
  PNG; only people who want the picture need a plotting library.
- metis (pymetis): METIS itself on platforms where pymetis is not a dependency (it has no wheel
  there; pip builds it with a C compiler).
- ray: ``ray_address=`` / ``--ray_address`` runs the learned placers' rollouts and the
  pretraining tools' workers as Ray actors on a cluster of machines
  (tf_autoplace/learning/workers.py). Ray gives what a multi-machine pool needs and we would
  otherwise write: an object store that ships a problem to each node once, scheduling, and
  actors that are restarted, their work retried, when a worker process or node dies. Only
  people with a cluster need it; the local process pool stays the default.
- test (pytest; grpcio-tools pinned to the version that generated tf_autoplace/proto, so
  tests/test_protos.py can regenerate the modules and compare them byte for byte; matplotlib
  ray and tensorboard, so the plot, Ray-backend and TensorBoard-scalar tests run rather than
  skip; pytest-xdist, so the suite runs its test files in two processes: most tests are
  single-threaded Python or numba, and on 2 cores one process left the other core idle).
"""

from setuptools import find_packages, setup

setup(
    name="tf_autoplace",
    version="0.1.0",
    description="Learned and heuristic device placement for TensorFlow graphs",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["tf_autoplace", "tf_autoplace.*"]),
    # Data inside the package: the shipped Placeto policy (weights, architecture, manifest) and
    # the cluster specs that every door names by their stem (cluster="k80x4"); the GPU kernel
    # registry snapshot read where TensorFlow has no GPU kernels (tf_autoplace/graph/kernels.py).
    package_data={"tf_autoplace": ["pretrained/*/*.json", "pretrained/*/*.npz",
                                   "clusters/*.pbtxt", "graph/gpu_kernels.json"]},
    install_requires=[
        "tensorflow>=2.16",
        "tf-keras>=2.16",
        "numpy>=1.26",
        "networkx>=3.0",
        "absl-py>=1.0",
        "numba>=0.60",
        "highspy>=1.16",
        "platformdirs>=3.0",
        "protobuf>=4.21",
        "pymetis>=2025.2; (sys_platform == 'linux' and platform_machine == 'x86_64') or "
        "sys_platform == 'darwin'",
        "tqdm>=4.60",
    ],
    # tf-autoplace COMMAND: the offline tool (place), the zoo placement and benchmark tools and
    # the training tools, on PATH as TF's saved_model_cli is (tf_autoplace/cli).
    entry_points={"console_scripts": ["tf-autoplace = tf_autoplace.cli.main:main"]},
    extras_require={
        "metis": ["pymetis>=2025.2"],
        "ray": ["ray>=2.40"],
        "plot": ["matplotlib>=3.6"],
        "train": ["tensorboard>=2.16"],
        "test": ["pytest>=7", "pytest-xdist>=3.0", "grpcio-tools==1.85.1", "matplotlib>=3.6",
                 "ray>=2.40", "tensorboard>=2.16",
                 # Placeto's categorical arithmetic is checked against its Categorical.
                 "tensorflow-probability>=0.24"],
    },
)
