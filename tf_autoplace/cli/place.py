r"""``tf-autoplace place``: place a GraphDef / MetaGraphDef file offline, write the placed graph.

    tf-autoplace place --input=model.pb --output=placed.pb \
        --cluster=k80x2 --report_json=report.json

The input may be binary or text format; the output format follows ``--output``'s extension
(``.pbtxt``/``.txt`` = text, anything else binary) and its kind follows the input (a MetaGraphDef
stays a MetaGraphDef). The report is printed. The same input and seed give the same bytes (except with ``--verify`` or
``--measure_steps``, whose measured figures depend on the machine and the moment).

Every output path is checked before any work (its directory must exist: none is created).
Nothing is written unless placement succeeds; then all outputs (the graph, ``--report_json``,
``--trace_json``, ...) are written as one set, all new or all old, with the permissions of the
user's umask (:mod:`tf_autoplace.outputs.files`: staged, a commit record, renamed). Ctrl-C or
SIGTERM leaves the previous outputs or the whole new set; after a SIGKILL the next run in the
same directories finishes or undoes the killed run's set before it checks its own outputs.

SavedModel in, SavedModel out: when ``--input`` is a SavedModel directory (it holds
``saved_model.pb``), ``--output`` is a directory to create (it must not exist, or be empty). A TF2
SavedModel has its ``--signature`` placed and is saved again with that signature replaced by the
placed function (variables, other signatures and functions unchanged); a TF1 SavedModel has its
MetaGraph tagged ``--saved_model_tags`` placed as a whole, with ``variables/`` and ``assets/``
copied. Both load with ``tf.saved_model.load``. The directory is written beside ``--output`` and
renamed into place with the other outputs; on error nothing is left.

    tf-autoplace place --input=saved_model_dir --output=placed_dir \
        --cluster=k80x2 --signature=serving_default

Cost graph in, placement out: when ``--input`` is a cost graph (a graph built or profiled
anywhere, with its op times: ``protos/cost_graph.proto``; named ``*.costgraph.pbtxt``,
``*.costgraph.txt``, ``*.costgraph.pb`` or ``*.json``), there is no graph to rewrite, and
``--output`` gets the placement: a ``PlacementResult`` (``protos/placement.proto``: every op's
device and the predicted figures), text for ``.pbtxt``/``.txt``, JSON for ``.json``, else binary.

    tf-autoplace place --input=model.costgraph.pbtxt --output=placement.pbtxt --cluster=k80x4

A placement found once can be applied again without searching: ``--placement_pb`` writes it,
``--placement`` applies it (to the same graph, or one changed a little: ops it does not name are
placed next to their neighbours; see ``tf_autoplace.apply_placement``). ``--cache`` keeps
placements in the placement cache, so running the tool again on the same graph, cluster, placer
and seed reads the placement back at once. ``--save_policy`` keeps the policy a learned placer
(placeto, hdp, gdp) fine-tuned on this graph, and ``--policy`` starts the next run from it. A search
longer than 2 s shows a progress bar on a terminal (``--noprogress``: none).

    tf-autoplace place --input=model.pb --output=placed.pb --cluster=k80x2 \
        --placement=placement.pb

Measured step times: with ``--measure_steps=N`` (GraphDef and MetaGraphDef input) the placed
graph and the single-device baseline also run N timed steps on this machine before anything is
written, and the report (printed, ``--report_json``, ``--placement_pb``) has their median step
times beside the predicted ones; ``--trace_json`` then holds the measured step's lanes beside
the simulated ones. The cluster must be this machine's (``local`` or ``cpu2``); one step runs
the graph's train op (its ``train_op`` collection, or an op named ``train_op`` or ``train``)
after its initializer, fed made-up values of each placeholder's static shape
(``tf_autoplace.hw.workload``), or of the shape ``--feed_shape=NAME=D0,D1,...`` gives a
placeholder whose shape is not fully known (a None batch dimension).

    tf-autoplace place --input=model.pb --output=placed.pb --cluster=local \
        --measure_steps=20 --trace_json=step.json
"""

from __future__ import annotations

import os
import sys

from absl import flags
from google.protobuf import text_format
from tensorflow.core.protobuf import meta_graph_pb2

from tf_autoplace import tf2
from tf_autoplace.cli import place_flags  # noqa: F401  (defines this command's flags)
from tf_autoplace.core import registry
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.graph import costgraph, ingest
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.hw.workload import made_up_feeds, parse_feed_shapes
from tf_autoplace.outputs import files
from tf_autoplace.outputs.progress import SearchProgress
from tf_autoplace.outputs.saved_placement import serialize
from tf_autoplace.pipeline import engine
from tf_autoplace.pipeline.options import PlaceOptions
from tf_autoplace.placers import SavedPlacement

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.place_flags


def _extra_outputs(report, *, trace_json=None, plot_png=None, placement_pb=None) -> dict:
    """{flag name: (path, bytes)} for the optional views of the report; rendered before anything
    is written, so a missing matplotlib fails the run with nothing written."""
    out = {}
    if (trace_json or plot_png) and report.timeline is None:
        raise ConfigError("the report keeps no timeline; cannot write --trace_json/--plot_png")
    if trace_json:
        out["trace_json"] = (trace_json, report.chrome_trace_json())
    if plot_png:
        out["plot_png"] = (plot_png, report.plot_png())
    if placement_pb:
        out["placement_pb"] = (placement_pb, _placement_bytes(report, placement_pb))
    return out


def _placement_bytes(report, path: str) -> bytes:
    """The report's PlacementResult in the form ``path`` names: text, JSON or binary."""
    return serialize(report.to_proto(), path)  # same input and seed, same bytes


def _serialize(report, source, is_meta_graph: bool, output_path: str) -> bytes:
    placed = report.graph_def
    if is_meta_graph:  # every field as it came (a saver_def only if it had one), new devices
        graph_def, placed = placed, meta_graph_pb2.MetaGraphDef()
        placed.CopyFrom(source)
        placed.graph_def.CopyFrom(graph_def)
    text = output_path.endswith((".pbtxt", ".txt"))
    if text:
        return text_format.MessageToString(placed).encode()
    return placed.SerializeToString(deterministic=True)  # same input and seed, same bytes


def _check_outputs(input_path: str, output_path: str, saved_model: bool, paths: dict,
                   directories=frozenset(), *, cost_graph: bool = False) -> None:
    """ConfigError unless every output can be written, no two outputs share a path (also
    through a symbolic link), and none but ``--output`` is the input (a report written over
    the graph it describes) or lies in an input SavedModel's directory; ``paths`` ({flag:
    path}) are files, but for the flags in ``directories`` (new ones). ``--output`` may
    replace an input graph with the placed graph, but not an input ``cost_graph``: its output
    is a placement, which would take the cost graph's place."""
    source = os.path.realpath(input_path)
    seen = {}
    for flag, path in {"output": output_path, **paths}.items():
        if not path and flag != "output":  # an optional output not asked for
            continue
        directory = saved_model if flag == "output" else flag in directories
        full = os.path.realpath(files.check_output_path(path, f"--{flag}", directory=directory))
        if full in seen:
            raise ConfigError(f"--{flag} and --{seen[full]} are the same file {path!r}")
        seen[full] = flag
        inside = saved_model and files.is_within(full, source)
        if (full == source and (flag != "output" or cost_graph)) or inside:
            kind = "SavedModel" if saved_model else "cost graph" if cost_graph else "graph"
            raise ConfigError(f"--{flag} {path!r} would overwrite the input {kind} "
                              f"{input_path!r}"
                              + (" (an output goes outside its directory)" if inside else ""))


def run(input_path: str, output_path: str, *, cluster: str, placer: str, seed: int,
        max_groups: int, report_json: str | None, signature: str | None = None,
        tags=("serve",), budget_s: float | None = None, placement: str | None = None,
        ray_address: str | None = None,
        cache: bool = False, cache_dir: str | None = None, policy: str | None = None,
        save_policy: str | None = None, progress: bool = True,
        progress_logdir: str | None = None, measure_steps: int = 0, verify: int = 0,
        cost_profile: str | None = None, placer_options=(), feed_shapes=(),
        unknown_dim: int | None = None, search_flags=(), **extra_paths) -> int:
    """Place ``input_path`` into ``output_path``; returns a process exit status.
    ``search_flags``: the flags that set a placer's search the command line gave (refused
    with ``placement``, which applies a saved placement without a search)."""
    saved_model = tf2.is_saved_model(input_path)
    cost_graph = not saved_model and costgraph.is_cost_graph_file(input_path)
    try:
        if budget_s is not None and budget_s < 0:
            raise ConfigError(f"--budget_s must be >= 0, got {budget_s!r}")
        _check_outputs(input_path, output_path, saved_model,
                       dict(report_json=report_json, save_policy=save_policy, **extra_paths),
                       directories={"save_policy"}, cost_graph=cost_graph)
        if cache_dir is not None and not cache:  # (it was ignored without a word)
            raise ConfigError("--cache_dir is the directory of the placement cache, which "
                              "--cache turns on: give both")
        search = [*search_flags, *(["--placer_option"] if placer_options else [])]
        if placement and search:  # (they were ignored without a word)
            raise ConfigError(f"{', '.join(search)} set{'s' if len(search) == 1 else ''} a "
                              "placer's search; --placement applies a saved placement without "
                              "one")
        if save_policy and (placement or not registry.accepts(placer, "policy")):
            # (checked before the search, so the run fails at once, not after a whole search)
            raise ConfigError(f"--save_policy keeps the policy a learned placer fine-tuned "
                              f"({', '.join(registry.able('policy'))}); "
                              + ("--placement applies a saved placement" if placement
                                 else f"--placer={placer} keeps none"))
        if (saved_model or cost_graph) and (measure_steps or verify):
            raise ConfigError("--measure_steps and --verify time GraphDef and MetaGraphDef "
                              "input; a SavedModel or a cost graph is placed without them")
        if (saved_model or cost_graph) and cost_profile:
            raise ConfigError("--cost_profile times the ops of GraphDef and MetaGraphDef input; "
                              "a cost graph carries its own times, and a SavedModel's "
                              "function graph has other op names")
        if cost_graph and unknown_dim is not None:
            raise ConfigError("--unknown_dim sizes the unknown dimensions of a TensorFlow "
                              "graph; a cost graph gives every output's size")
        feeds = None
        if feed_shapes:
            if not (measure_steps or verify) or saved_model or cost_graph:
                raise ConfigError("--feed_shape gives the inputs of the steps --measure_steps "
                                  "and --verify time (GraphDef and MetaGraphDef input)")
            feeds = made_up_feeds(input_path, parse_feed_shapes(feed_shapes), seed=seed)
        options = PlaceOptions.make(
            placer=SavedPlacement(placement) if placement else placer, cluster=cluster,
            seed=seed, budget_s=None if placement else budget_s,
            ray_address=None if placement else ray_address,
            policy=None if placement else policy,
            placer_options=placer_options, grouping=GroupingConfig(max_groups=max_groups),
            cost_profile=cost_profile, cache=(cache_dir or True) if cache else False,
            progress=SearchProgress(logdir=progress_logdir) if progress else False,
            measure_steps=measure_steps, measure_feeds=feeds, verify=verify,
            unknown_dim=1 if unknown_dim is None else unknown_dim)
        outputs = files.Outputs()
        if saved_model:  # SavedModel in, SavedModel out
            placed = tf2.load_and_place_saved_model(input_path, options, signature=signature,
                                                    tags=tuple(tags))
            report = placed.report
            outputs.add_directory(output_path, placed.write)
        elif cost_graph:  # nothing to rewrite: the output is the placement
            report = engine.place_cost_graph(input_path, options)
            outputs.add_file(output_path, _placement_bytes(report, output_path))
        else:
            source, is_meta_graph = ingest.read_graph_file(input_path)
            report = engine.place_graph(source, options)
            outputs.add_file(output_path,
                             _serialize(report, source, is_meta_graph, output_path))
        if save_policy:  # ConfigError, with nothing written, when no policy was fine-tuned
            outputs.add_directory(save_policy, report.kept_policy().write)
        if report_json:
            outputs.add_file(report_json, report.to_json().encode())
        for path, data in _extra_outputs(report, **extra_paths).values():
            outputs.add_file(path, data)
        outputs.commit()
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot write output: {e}", file=sys.stderr)
        return 1
    print(report)
    for path in (output_path, save_policy, report_json, *extra_paths.values()):
        if path:  # every output, each written (none is written unless all are)
            print(f"wrote {path}")
    return 0


def main(argv):
    del argv
    return run(FLAGS.input, FLAGS.output, cluster=FLAGS.cluster, placer=FLAGS.placer,
               seed=FLAGS.seed, max_groups=FLAGS.max_groups, report_json=FLAGS.report_json,
               signature=FLAGS.signature if FLAGS["signature"].present else None,
               tags=FLAGS.saved_model_tags, budget_s=FLAGS.budget_s,
               ray_address=FLAGS.ray_address,
               placement=FLAGS.placement, cache=FLAGS.cache, cache_dir=FLAGS.cache_dir,
               policy=FLAGS.policy, save_policy=FLAGS.save_policy, progress=FLAGS.progress,
               progress_logdir=FLAGS.progress_logdir, trace_json=FLAGS.trace_json,
               plot_png=FLAGS.plot_png, placement_pb=FLAGS.placement_pb,
               measure_steps=FLAGS.measure_steps, verify=FLAGS.verify,
               cost_profile=FLAGS.cost_profile,
               placer_options=FLAGS.placer_option, feed_shapes=FLAGS.feed_shape,
               unknown_dim=FLAGS.unknown_dim, search_flags=[f"--{name}" for name in ("placer", "policy", "budget_s",
                                                     "ray_address") if FLAGS[name].present])
