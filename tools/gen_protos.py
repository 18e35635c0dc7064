"""Generate the Python modules of every ``protos/*.proto`` into ``tf_autoplace/proto/``.

    python tools/gen_protos.py                  # regenerate the committed modules
    python tools/gen_protos.py --out_dir=/tmp/x # somewhere else (tests/test_protos.py)
    python3 tools/gen_protos.py --proto_dir=protos --out_dir=...  # Bazel's //protos:py_pb2

Runs protoc from ``grpcio-tools`` (``python -m grpc_tools.protoc``) with ``protos/`` as the only
include path, so each module's ``# source:`` line is the bare file name. The committed modules
were made with grpcio-tools ``GRPCIO_TOOLS_VERSION`` (protoc 35.1): another version writes other
bytes, so the tool refuses it unless ``--any_version``.

Then it takes out of each module the runtime-version check protoc writes
(:func:`without_version_check`): that check refuses every protobuf runtime older than the
protoc that made the module (7.35.1 here), while TensorFlow 2.16-2.19 require protobuf below 5
or 6. What the modules call otherwise (``AddSerializedFile`` and ``internal.builder``) is in
every protobuf since 3.20, so without the check they load wherever TensorFlow 2.16 or newer does.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

from absl import app, flags

GRPCIO_TOOLS_VERSION = "1.85.1"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(REPO, "protos")
DEFAULT_OUT = os.path.join(REPO, "tf_autoplace", "proto")

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command's flags, defined when it runs (tests import the module's functions)."""
    flags.DEFINE_string("out_dir", DEFAULT_OUT, "Directory to write the *_pb2.py modules into.")
    flags.DEFINE_string("proto_dir", PROTO_DIR,
                        "Directory of the .proto sources (the include path).")
    flags.DEFINE_bool("any_version", False,
                      f"Run with an installed grpcio-tools other than {GRPCIO_TOOLS_VERSION}.")


def proto_files(proto_dir: str = PROTO_DIR) -> list[str]:
    """The .proto sources, sorted by name."""
    return sorted(glob.glob(os.path.join(proto_dir, "*.proto")))


def installed_version() -> str | None:
    """The installed grpcio-tools version, or None if it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("grpcio-tools")
    except metadata.PackageNotFoundError:
        return None


CHECK_REMOVED = ("# tf_autoplace: protoc's runtime-version check is taken out by "
                 "tools/gen_protos.py\n")


def without_version_check(module: str) -> str:
    """``module`` (the text of a ``*_pb2.py`` protoc wrote) without the import of
    ``google.protobuf.runtime_version`` and the ``ValidateProtobufRuntimeVersion(...)`` call,
    with a comment saying so in their place (module docstring).

    Raises:
      ValueError: the module has no such check to take out (another protoc's output).
    """
    lines = module.splitlines(keepends=True)
    try:
        imported = lines.index("from google.protobuf import runtime_version as _runtime_version\n")
        start = lines.index("_runtime_version.ValidateProtobufRuntimeVersion(\n")
        end = lines.index(")\n", start)
    except ValueError:
        raise ValueError("no runtime-version check to take out: not protoc 35.1's output") from None
    kept = lines[:imported] + lines[imported + 1:start] + [CHECK_REMOVED] + lines[end + 1:]
    return "".join(kept)


def generate(out_dir: str, proto_dir: str = PROTO_DIR) -> list[str]:
    """Run protoc on every proto of ``proto_dir`` and take the runtime-version check out of each
    module (:func:`without_version_check`); returns the paths of the modules written."""
    protos = proto_files(proto_dir)
    if not protos:
        raise FileNotFoundError(f"no .proto files in {proto_dir}")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_dir}",
           f"--python_out={out_dir}", *protos]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"protoc failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    written = [os.path.join(out_dir, os.path.basename(p)[:-len(".proto")] + "_pb2.py")
               for p in protos]
    for path in written:
        with open(path, encoding="utf-8") as f:
            text = without_version_check(f.read())
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return written


def main(argv):
    del argv
    version = installed_version()
    if version is None:
        print("error: grpcio-tools is not installed; "
              f"pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}", file=sys.stderr)
        return 1
    if version != GRPCIO_TOOLS_VERSION and not FLAGS.any_version:
        print(f"error: grpcio-tools {version} is installed but the committed modules come from "
              f"{GRPCIO_TOOLS_VERSION}; pip install grpcio-tools=={GRPCIO_TOOLS_VERSION} "
              "(or pass --any_version and raise the protobuf requirement in setup.py)",
              file=sys.stderr)
        return 1
    try:
        written = generate(FLAGS.out_dir, FLAGS.proto_dir)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
