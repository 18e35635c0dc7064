"""A placement saved as a ``PlacementResult`` proto (``protos/placement.proto``): read it, write
it, and map it onto a placement problem.

``PlacementReport.to_proto()`` makes one (``--placement_pb`` writes it);
:class:`tf_autoplace.placers.SavedPlacement` applies one to a graph
(:func:`tf_autoplace.apply_placement`, ``--placement``, ``--autoplace_placement``), and the
placement cache (:mod:`tf_autoplace.pipeline.cache`) keeps its entries in the same message.

**Which op is which** (:func:`match`). A saved placement records the fingerprint of the graph it
was made for (:mod:`tf_autoplace.graph.fingerprint`). Where it equals this graph's, the op
counts agree and each saved op's name is the graph's op at its position but for TensorFlow's
uniquifying counters (``dense_1`` for ``dense``), the i-th saved op is this graph's i-th op:
the graph is the same one, built again, so matching by position is exact where matching by
name would fail. Where every op the file names is in the graph by its exact name, names decide
(two towers ``tower_0`` and ``tower_1`` built in the other order have the same fingerprint,
and position would swap their devices). Otherwise (the graph changed, or the file's ops were
reordered) ops are matched by name, and an op the file does not name is left for the caller
to place (-1).

**Which device is which.** A saved device string matches the cluster device of the same name,
or else the one cluster device whose ``tf.DeviceSpec`` agrees with it wherever both say
something (``/device:gpu:0`` is ``/job:localhost/replica:0/task:0/device:GPU:0``, as TensorFlow
reads it in a local session). A device the cluster lacks, or one that could be several, is an
:class:`~tf_autoplace.errors.InfeasiblePlacementError` that names it; on a cluster of
TensorFlow tasks, a device of a job or task the cluster lacks is a
:class:`~tf_autoplace.errors.ClusterSpecError` that names the job or task.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
from google.protobuf import json_format, message, text_format

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import (ClusterSpecError, ConfigError, InfeasiblePlacementError,
                                 InvalidGraphError)
from tf_autoplace.graph.costgraph import file_format
from tf_autoplace.graph.fingerprint import normalized_name
from tf_autoplace.outputs.files import write_atomically
from tf_autoplace.proto import placement_pb2
from tf_autoplace.rewrite import canonical_device


def read_placement(source) -> placement_pb2.PlacementResult:
    """A ``PlacementResult`` from a message (copied), serialized bytes, or a file (text format
    when it ends in .pbtxt/.txt, JSON for .json, else binary; the other formats are tried if
    that fails).
    ConfigError if it cannot be read or holds no op."""
    if isinstance(source, placement_pb2.PlacementResult):
        out = placement_pb2.PlacementResult()
        out.CopyFrom(source)
        what, data, first = "the given PlacementResult", None, "binary"
    elif isinstance(source, (bytes, bytearray)):
        what, data, first = "the given bytes", bytes(source), "binary"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        what, first = f"placement file {path!r}", file_format(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read {what}: {e.strerror or e}") from e
    else:
        raise ConfigError(f"a saved placement is a PlacementResult, its bytes or a file path; "
                          f"got {type(source).__name__}")
    if data is not None:
        out = _parse(data, first)
        if out is None and _is_report(data):
            raise ConfigError(f"{what} is a placement report (JSON) and holds no op's device; "
                              "a saved placement is a PlacementResult: --placement_pb, "
                              "--autoplace_save_placement or report.to_proto() write one")
        if out is None:
            raise ConfigError(f"{what} is not a PlacementResult in binary, text or JSON format"
                              + (_incomplete(data, first) or _parse_error(data, first)))
    if not out.op:
        raise ConfigError(f"{what} places no op (a PlacementResult from "
                          "PlacementReport.to_proto() or --placement_pb has one entry per op)")
    counted = sum(device.num_ops for device in out.device)
    listed = len({op.name for op in out.op})
    if out.device and counted != listed:  # a file cut short can still parse, with fewer ops
        raise ConfigError(
            f"{what} is incomplete or damaged: its devices hold {counted} ops and it lists "
            f"{listed} (a copy cut short?); to apply a list of ops written or edited by hand, "
            "leave out the per-device entries ('device')")
    return out


def _is_report(data: bytes) -> bool:
    """Whether ``data`` is a PlacementReport's JSON (``to_json``, ``--report_json``)."""
    try:
        report = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # (lists nested thousands deep)
        return False
    return isinstance(report, dict) and {"baseline_devices", "step_time_s"} <= report.keys()


def _decode(data: bytes, form: str) -> placement_pb2.PlacementResult | None:
    """``data`` parsed as a PlacementResult in ``form`` ("binary", "text", "json"); None if
    it does not parse."""
    out = placement_pb2.PlacementResult()
    try:
        if form == "text":
            text_format.Parse(data.decode("utf-8"), out)
        elif form == "json":
            json_format.Parse(data.decode("utf-8"), out)
        else:
            out.ParseFromString(data)
    except (message.DecodeError, text_format.ParseError, json_format.ParseError,
            UnicodeDecodeError):
        return None
    return out


def _parse_error(data: bytes, form: str) -> str:
    """What the parser of text or JSON said of ``data`` (the line, the unknown field), for
    the error message: in the file's own format (``form``), or for a binary name, in the text
    format the bytes look like; ``""`` for bytes that are not text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    if form == "binary":
        form = "json" if text.lstrip().startswith("{") else "text"
    try:
        if form == "json":
            json_format.Parse(text, placement_pb2.PlacementResult())
        else:
            text_format.Parse(text, placement_pb2.PlacementResult())
    except (text_format.ParseError, json_format.ParseError) as e:
        return f" (read as {'JSON' if form == 'json' else 'text'}: {e})"
    return ""


def _parse(data: bytes, first: str) -> placement_pb2.PlacementResult | None:
    for form in [first] + [f for f in ("binary", "text", "json") if f != first]:
        out = _decode(data, form)
        if out is not None and out.op and all(op.name and op.device for op in out.op):
            return out
    return None


def _incomplete(data: bytes, form: str) -> str:
    """Where ``data`` parses in its own format (``form``, named by the file) but an entry has
    no op name or no device: which entry, for the error message; else ``""``. (Only the file's
    own format is asked: bytes of another format can parse as nonsense entries.)"""
    out = _decode(data, form)
    for k, op in enumerate(out.op if out is not None else ()):
        if not op.name:
            return f" (its op entry {k} has no name)"
        if not op.device:
            return f" (it parses as {form}, but op {op.name!r} has no device)"
    return ""


def serialize(result: placement_pb2.PlacementResult, path) -> bytes:
    """``result`` in the format ``path`` asks for: text for .pbtxt/.txt, JSON for .json, else
    binary."""
    form = file_format(path)
    if form == "text":
        return text_format.MessageToString(result).encode("utf-8")
    if form == "json":
        return json_format.MessageToJson(result, preserving_proto_field_name=True).encode("utf-8")
    return result.SerializeToString(deterministic=True)


def write_placement(path, result: placement_pb2.PlacementResult) -> None:
    """Write ``result`` to ``path`` atomically: into a temporary file beside it, then renamed
    over it, so a reader (or a concurrent writer) never sees a half-written file."""
    write_atomically(path, serialize(result, path))


@dataclasses.dataclass(frozen=True)
class Match:
    """A saved placement read against a problem.

    Attributes:
      devices: [n] int32 cluster index of each op's saved device, -1 where nothing is saved.
      by: "position" (same graph fingerprint and op count) or "name".
      unknown: saved op names this graph lacks (matching by name only), in saved order.
      repeated: op names the file gives more than once, each time with the same device, in
        saved order (a name given with different devices is an error, :func:`match`).
    """

    devices: np.ndarray
    by: str
    unknown: tuple[str, ...]
    repeated: tuple[str, ...] = ()

    @property
    def num_named(self) -> int:
        return int((self.devices >= 0).sum())


def match(problem: PlacementProblem, result: placement_pb2.PlacementResult,
          fingerprint: str) -> Match:
    """Read ``result`` against ``problem``, whose graph has fingerprint ``fingerprint`` (module
    docstring).

    Raises:
      InvalidGraphError: the file names one op twice with different devices (which one is
        meant cannot be told).
      InfeasiblePlacementError: a saved device the cluster lacks.
    """
    repeated = _repeated_ops(result)
    names = problem.graph.names
    n = len(names)
    present = set(names)
    by_position = bool(result.graph_fingerprint) and result.graph_fingerprint == fingerprint \
        and len(result.op) == n and not all(op.name in present for op in result.op) and all(
            normalized_name(op.name) == normalized_name(name)
            for op, name in zip(result.op, names))
    index = _device_index(problem, {op.device for op in result.op})
    devices = np.full(n, -1, np.int32)
    unknown = []
    if by_position:
        devices[:] = [index[op.device] for op in result.op]
    else:
        for op in result.op:
            try:
                i = problem.graph.index(op.name)
            except KeyError:
                unknown.append(op.name)
                continue
            devices[i] = index[op.device]
    return Match(devices=devices, by="position" if by_position else "name",
                 unknown=tuple(unknown), repeated=repeated)


def _repeated_ops(result: placement_pb2.PlacementResult) -> tuple[str, ...]:
    """Op names ``result`` gives more than once with the same device (saved order);
    InvalidGraphError naming the first op it gives with two different devices."""
    seen: dict[str, str] = {}
    repeated: dict[str, None] = {}  # ordered set
    for op in result.op:
        if op.name not in seen:
            seen[op.name] = op.device
            continue
        if seen[op.name] != op.device:
            raise InvalidGraphError(
                f"the saved placement names op {op.name!r} twice, on {seen[op.name]!r} and on "
                f"{op.device!r}; which one is meant cannot be told (a PlacementResult names "
                "each op once)")
        repeated[op.name] = None
    return tuple(repeated)


def _device_index(problem: PlacementProblem, saved: set[str]) -> dict[str, int]:
    """Saved device string -> cluster index (module docstring)."""
    cluster_names = problem.cluster.names
    exact = {name: i for i, name in enumerate(cluster_names)}
    specs = None
    out = {}
    for device in sorted(saved):
        if device in exact:
            out[device] = exact[device]
            continue
        problem.cluster.check_task(device)  # another TF cluster's job or task: say which
        if specs is None:
            specs = [_spec(name) for name in cluster_names]
        want = _spec(device)
        found = [i for i, have in enumerate(specs) if _same_device(want, have)]
        if not found and not problem.cluster.tasks and (want[0] not in (None, "localhost")
                                                        or want[2] not in (None, 0)):
            # as check_task says of a cluster with tasks: the job or task is what is missing
            raise ClusterSpecError(
                f"the saved placement puts ops on {device!r}, a device of a TensorFlow "
                f"cluster's {'job ' + repr(want[0]) if want[0] is not None else 'task'}, and "
                f"this cluster has no tasks (its devices are {list(cluster_names)}); give the "
                "cluster the placement was made for")
        if len(found) != 1:
            what = "which the cluster does not have" if not found else \
                f"which could be any of {[cluster_names[i] for i in found]}"
            raise InfeasiblePlacementError(
                f"the saved placement puts ops on {device!r}, {what} (its devices are "
                f"{list(cluster_names)}); give the cluster the placement was made for")
        out[device] = found[0]
    return out


def _spec(device: str) -> tuple:
    """(job, replica, task, device type, index) of a device string, None where not given."""
    spec = tf.DeviceSpec.from_string(canonical_device(device))
    return (spec.job, spec.replica, spec.task, (spec.device_type or "").upper(),
            spec.device_index)


def _same_device(a: tuple, b: tuple) -> bool:
    """Whether two device specs name the same device: equal wherever both say something (a
    spec without a job is the local task's, as TensorFlow reads it)."""
    return all(x == y for x, y in zip(a, b) if x is not None and y is not None)
