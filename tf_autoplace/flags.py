"""absl flags that give an existing TF1-style training binary automatic placement.

One line in a training script that runs under ``absl.app``::

    import tf_autoplace.flags  # noqa: F401  (defines --autoplace, --autoplace_cluster, ...)

then ``python train.py --autoplace=m_etf --autoplace_cluster=cpu2``.

Flags:
  --autoplace           placer name (``tf_autoplace.core.registry``); "" or "off" (default)
                        disables autoplacement and nothing is patched.
  --autoplace_cluster   a shipped cluster name (``k80x4``, ``cpu2``), a cluster spec file (text
                        ``ClusterSpec``) or "local" (default: this machine's devices, with
                        as many CPU devices as the Session has).
  --autoplace_budget_s  time budget in seconds (>= 0; default: the placer's own, e.g. 120 s for
                        ``auto``) for placers that search or learn: passed to the placer's
                        constructor when it takes ``budget_s`` (``auto``, ``placeto``,
                        ``post``, ``hdp``, ``gdp``; 0 makes ``gdp`` place zero-shot, the
                        others need > 0); the heuristic placers take none. Recorded in the
                        JSON report either way.
  --autoplace_report    write the PlacementReport as JSON here (optional); a later graph the
                        process places gets its own file beside it (``report.2.json``...).
  --autoplace_save_placement  write the placement (a PlacementResult: binary, or text for
                        .pbtxt/.txt, JSON for .json) here, for ``--autoplace_placement`` or
                        ``tf-autoplace place --placement`` to apply again without a search;
                        later graphs get their own files as reports do.
  --autoplace_ray_address  run the placer's simulations on a Ray cluster: "auto" (the cluster
                        ``ray start --head`` made on this machine), HOST:PORT, or "local";
                        for placers that take it (``auto``, ``placeto``, ``post``, ``hdp``).
                        Default: local.
  --autoplace_placement apply this saved placement (a PlacementResult file, from
                        ``--placement_pb`` or ``report.to_proto()``) instead of searching; it
                        turns the hook on by itself, and ``--autoplace``'s placer (if named, a
                        registered one) is not run.
  --autoplace_cache     keep placements in the placement cache (default true), so a restarted
                        binary gets its placement at once (``tf_autoplace.pipeline.cache``).
  --autoplace_cache_dir the cache's directory (default: the user's cache directory,
                        ``$XDG_CACHE_HOME/tf_autoplace/placements`` or ``~/.cache/...``).
  --autoplace_policy    a saved policy's directory for a learned placer to start from
                        (``placeto``, ``hdp``, ``gdp``), e.g. one ``--autoplace_save_policy``
                        wrote.
  --autoplace_save_policy  write the policy the learned placer fine-tuned here.
  --autoplace_verify    timed steps per candidate of verified placement (>= 15; 0: off): the
                        placer's placement, the best heuristic's and the single-device one run
                        on this machine in interleaved rounds and the measured fastest is
                        applied, never one measured slower than the single-device placement.
                        Default -1: on (15 steps) when the cluster is "local" or a spec of a
                        TensorFlow cluster with a target, since the binary is about to run the
                        graph there anyway; off for other clusters. Asked for a cluster whose
                        devices this machine does not have, it is a ConfigError at flag
                        parsing. When it is on by default and the graph
                        cannot be run on its own (a step that needs a queue runner or an input
                        the binary feeds), the graph keeps TensorFlow's default placement and a
                        warning says why.
  --autoplace_unknown_dim  elements assumed for a dimension of unknown size (a placeholder's
                        None batch: the batch the binary feeds), in tensor sizes and estimated
                        op times (default 1).
  --autoplace_progress  log the search's progress (INFO lines of the Python logger
                        ``tf_autoplace.progress`` every 10 s for a search longer than 2 s:
                        placements done of the budget, best step time so far, time left;
                        default true).
  --autoplace_progress_logdir  also write the search curve as TensorBoard scalars here.

How it works (checked on TF 2.21). A v1 ``Session`` hands its graph to the runtime in
``BaseSession._extend_graph``, which every ``run``, ``partial_run_setup``, ``make_callable`` and
Keras-1 callable calls before anything executes; the runtime partitions the graph by device when
it first runs it. Once flags are parsed (``absl.app.call_after_init``) and only if ``--autoplace``
is set, that method is wrapped: the first time any session is about to hand over a graph that was
not placed yet (by the hook, or by the script's own ``tf_autoplace.autoplace`` call, whose
placement is kept), :func:`tf_autoplace.autoplace` places it in place, then the session proceeds.
So the graph is placed once, before its first step, with no other change to the script;
``MonitoredSession``/``MonitoredTrainingSession`` are covered because they run through a plain
Session (placing a finalized graph is fine: devices are not graph mutations TF forbids). Devices
set after a session has run a graph are ignored by TF (it warns that the mutation has no effect),
which is why placement happens at the first hand-over and never later: ops created after the
first run keep TF's default placement. A program in which no session hands a graph over (eager
TF2, a Keras ``fit`` in eager mode) places nothing: a warning at exit says so, and what does.

Before placing, the session's devices (``Session.list_devices``) are checked against the
cluster: a cluster device the session lacks is an error unless the session allows soft placement
(a warning then) and the device's task is one the session has (soft placement moves ops between
a task's devices, never to another task).
A v1 Session sees one CPU device unless created with ``ConfigProto(device_count={'CPU': N})``,
so a cluster of N logical CPUs (``cpu2``) needs that config in the script
(``tools/example_train.py --num_cpus``).

Errors: bad flag values stop the program at flag parsing (absl's "FATAL Flags parsing error"
with the value and the reason, exit status 1). A placement that fails raises its
:class:`AutoplaceError` out of the session call that triggered it, so the program stops with
that message; nothing is swallowed and the graph is left unplaced.

Scripts that parse flags without ``absl.app.run`` call :func:`install` after parsing; code
and tests can pass an :class:`AutoplaceSettings` to :func:`install` instead of flags, and
:func:`uninstall` restores the session.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import weakref

from absl import flags, logging

from tf_autoplace.core import registry

FLAGS = flags.FLAGS
_THEIRS = frozenset(FLAGS)  # the binary's flags, defined before it imported this module
_OFF = ("", "off")

flags.DEFINE_string("autoplace", "off",
                    "Place the training graph before its first step with this placer "
                    f"({registry.listing()}); '' or 'off' disables.")
flags.DEFINE_string("autoplace_cluster", "local",
                    "Cluster for --autoplace: a shipped cluster name (k80x4, cpu2, ...), a text "
                    "ClusterSpec file or 'local'.")
flags.DEFINE_float("autoplace_budget_s", None,
                   "Time budget in seconds (>= 0) for placers that search or learn (default: "
                   "the placer's own, as autoplace() gives it; 0: gdp places zero-shot).")
flags.DEFINE_string("autoplace_report", None,
                    "Write the --autoplace PlacementReport as JSON to this path.")
flags.DEFINE_string("autoplace_save_placement", None,
                    "Write the --autoplace placement (a PlacementResult) to this path, for "
                    "--autoplace_placement to apply again without a search.")
flags.DEFINE_string("autoplace_ray_address", None,
                    "Simulate on this Ray cluster ('auto', HOST:PORT or 'local'; placers "
                    f"{', '.join(registry.able('ray_address'))}); default: this machine's "
                    "processes.")
flags.DEFINE_string("autoplace_placement", None,
                    "Apply this saved placement (PlacementResult file) instead of searching.")
flags.DEFINE_bool("autoplace_cache", True,
                  "Keep placements in the placement cache; a restart gets them at once.")
flags.DEFINE_string("autoplace_cache_dir", None,
                    "Placement cache directory (default: the user's cache directory).")
flags.DEFINE_string("autoplace_policy", None,
                    "Saved policy directory a learned placer "
                    f"({', '.join(registry.able('policy'))}) starts from.")
flags.DEFINE_string("autoplace_save_policy", None,
                    "Write the policy the learned placer fine-tuned to this directory.")
flags.DEFINE_multi_string("autoplace_placer_option", [],
                          "NAME=VALUE: a setting of the --autoplace placer's config (e.g. "
                          "--autoplace=hdp --autoplace_placer_option=start=uniform); "
                          "repeatable.")
flags.DEFINE_string("autoplace_cost_profile", None,
                    "A text CostProfile (tf-autoplace profile writes one) whose measured op "
                    "times replace the analytical estimates; ops it lacks keep them.")
flags.DEFINE_integer("autoplace_verify", -1,
                     "Measure the placer's placement, the best heuristic's and the "
                     "single-device one for this many steps each (>= 15) on this machine (or "
                     "a TensorFlow cluster's servers) and apply the measured fastest; 0: off; "
                     "-1 (default): 15 when --autoplace_cluster is 'local' (this machine) or a "
                     "spec with a target (its servers), off otherwise.")
flags.DEFINE_integer("autoplace_unknown_dim", None,
                     "Elements assumed for a dimension of unknown size (a placeholder's None "
                     "batch: the batch the binary feeds), in tensor sizes and estimated op "
                     "times (default 1).", lower_bound=1)
flags.DEFINE_bool("autoplace_progress", True,
                  "Log the placement search's progress (INFO lines, logger "
                  "tf_autoplace.progress).")
flags.DEFINE_string("autoplace_progress_logdir", None,
                    "Also write the search curve as TensorBoard scalars here.")


def _enabled(name) -> bool:
    return (name or "").strip().lower() not in _OFF


_SETTINGS_FLAGS = sorted(name for name in FLAGS if name.startswith("autoplace_")
                         and name != "autoplace_placement"
                         and name not in _THEIRS)  # every one defined above
_warned: set = set()


@flags.multi_flags_validator(["autoplace", "autoplace_placement", *_SETTINGS_FLAGS])
def _warn_settings_without_autoplace(values) -> bool:
    """An --autoplace_* setting given while autoplacement is off (no --autoplace, no
    --autoplace_placement) does nothing: say so at parsing, once per set of flags."""
    if _enabled(values["autoplace"]) or values["autoplace_placement"]:
        return True
    given = tuple(name for name in _SETTINGS_FLAGS if FLAGS[name].present)
    if given and given not in _warned:
        _warned.add(given)
        logging.warning(
            "%s given without --autoplace: autoplacement is off and %s nothing; add "
            "--autoplace=auto (or another placer) to place the graph",
            ", ".join(f"--{name}" for name in given), "it does" if len(given) == 1 else "they do")
    return True


@flags.validator("autoplace_budget_s", message="--autoplace_budget_s must be >= 0 seconds")
def _check_budget(value) -> bool:
    return value is None or value >= 0


@flags.multi_flags_validator(["autoplace", "autoplace_cluster", "autoplace_ray_address",
                              "autoplace_placement", "autoplace_placer_option",
                              "autoplace_budget_s"])
def _check_placer_and_cluster(values) -> bool:
    """Only when enabled: the placer is registered (or off, when a saved placement replaces
    it), the cluster spec reads, a Ray address goes to a placer that takes one, and the placer takes
    the budget and the options (it is built once here, so its config checks them)."""
    if not (_enabled(values["autoplace"]) or values["autoplace_placement"]):
        return True
    from tf_autoplace.core import registry
    from tf_autoplace.core.cluster import resolve_cluster
    from tf_autoplace.errors import AutoplaceError
    from tf_autoplace.placers import get_placer

    name = values["autoplace"].strip()
    # With a saved placement the placer is not run, but a name that is none is still a typo.
    if name not in registry.names() and (not values["autoplace_placement"] or _enabled(name)):
        raise flags.ValidationError(
            f"--autoplace={name!r} is not a placer; choose one of {registry.names()} "
            "(or 'off')")
    if values["autoplace_ray_address"] is not None:
        from tf_autoplace.learning.workers import check_ray_address
        try:
            check_ray_address(values["autoplace_ray_address"])
        except AutoplaceError as e:
            raise flags.ValidationError(f"--autoplace_ray_address: {e}") from e
    if (values["autoplace_ray_address"] and name in registry.names()
            and not registry.accepts(name, "ray_address")):
        raise flags.ValidationError(
            f"--autoplace_ray_address={values['autoplace_ray_address']!r}: placer {name!r} "
            "runs no simulations on workers")
    options = values.get("autoplace_placer_option") or []
    if options and values["autoplace_placement"]:
        raise flags.ValidationError("--autoplace_placer_option sets a placer's search; "
                                    "--autoplace_placement applies a saved placement")
    budget = values.get("autoplace_budget_s")
    if not values["autoplace_placement"]:
        try:  # gdp's budget may be 0 (zero-shot); the searching placers' must be > 0
            get_placer(name, budget_s=budget)
        except AutoplaceError as e:
            raise flags.ValidationError(f"--autoplace_budget_s={budget!r}: {e}") from e
    try:
        if options:
            get_placer(name, budget_s=budget, options=options)
    except AutoplaceError as e:
        raise flags.ValidationError(f"--autoplace_placer_option: {e}") from e
    spec = values["autoplace_cluster"]
    if spec != "local":
        try:
            resolve_cluster(spec)
        except AutoplaceError as e:
            raise flags.ValidationError(f"--autoplace_cluster={spec!r}: {e}") from e
    return True


@flags.validator("autoplace_cache_dir")
def _check_cache_dir(value) -> bool:
    """A given cache directory that exists must be a private directory: a file, or one others
    can write to, is refused here, before the program builds its model; one that cannot be
    created only means nothing is stored, as for the command."""
    if not value:
        return True
    from tf_autoplace.core.cachedir import check_private_directory
    from tf_autoplace.errors import AutoplaceError

    try:
        check_private_directory(value, "the placement cache")
    except AutoplaceError as e:
        raise flags.ValidationError(f"--autoplace_cache_dir={value!r}: {e}") from e
    return True


@flags.validator("autoplace_cost_profile")
def _check_cost_profile(value) -> bool:
    """A given profile must read as a CostProfile (checked at flag parsing, not at the first
    session run)."""
    if not value:
        return True
    from tf_autoplace.cost.profile import ProfileCostModel
    from tf_autoplace.errors import AutoplaceError

    try:
        ProfileCostModel.from_file(value)
    except AutoplaceError as e:
        raise flags.ValidationError(f"--autoplace_cost_profile={value!r}: {e}") from e
    return True


def _is_output_path(value) -> bool:
    """The commands' check of their outputs: a file in an existing, writable directory."""
    if value is None:
        return True
    from tf_autoplace.errors import AutoplaceError
    from tf_autoplace.outputs import files

    try:
        files.check_output_path(value, "the output")
    except AutoplaceError:
        return False
    return True


for _flag in ("autoplace_report", "autoplace_save_placement"):
    flags.register_validator(_flag, _is_output_path,
                             message=f"--{_flag} must be a file path in an existing directory")


@flags.validator("autoplace_placement",
                 message="--autoplace_placement must be a readable PlacementResult file")
def _check_placement_file(value) -> bool:
    if value is None:
        return True
    from tf_autoplace.errors import AutoplaceError
    from tf_autoplace.outputs.saved_placement import read_placement

    try:
        read_placement(value)
    except AutoplaceError as e:
        raise flags.ValidationError(f"--autoplace_placement={value!r}: {e}") from e
    return True


@flags.multi_flags_validator(["autoplace", "autoplace_policy", "autoplace_save_policy"])
def _check_policy_flags(values) -> bool:
    """A policy to start from exists; both policy flags go with a learned placer."""
    start, save = values["autoplace_policy"], values["autoplace_save_policy"]
    if start is None and save is None:
        return True
    from tf_autoplace.core import registry
    from tf_autoplace.placers import policy_placers

    name = (values["autoplace"] or "").strip()
    if name not in registry.names() or not registry.accepts(name, "policy"):
        raise flags.ValidationError(f"--autoplace_policy and --autoplace_save_policy go with "
                                    f"a learned placer that keeps a policy "
                                    f"({policy_placers()}), not --autoplace={name!r}")
    if start is not None and not os.path.isfile(os.path.join(start, "policy.json")):
        raise flags.ValidationError(f"--autoplace_policy={start!r} holds no saved policy "
                                    "(no policy.json)")
    if save is not None and not os.path.isdir(os.path.dirname(os.path.abspath(save))):
        raise flags.ValidationError(f"--autoplace_save_policy={save!r}: its parent directory "
                                    "does not exist")
    return True


# ------------------------------------------------------------------------------ the hook
@dataclasses.dataclass(frozen=True)
class AutoplaceSettings:
    """What the session hook does; built from the flags by :func:`settings_from_flags`.

    Attributes:
      placer: a registered placer name ("off" when ``placement`` is given).
      cluster: a shipped cluster name, a cluster spec file path or "local".
      budget_s: time budget (>= 0) for placers whose constructor takes ``budget_s``; None:
        the placer's own default.
      report_path: where to write the JSON report, or None.
      save_placement: where to write the placement (a PlacementResult), or None.
      seed: the placement seed.
      ray_address: the Ray cluster the placer simulates on, or None (this machine).
      placement: a saved placement file to apply instead of running ``placer``, or None.
      cache: keep placements in the placement cache (in ``cache_dir``; None: the user's).
      policy: a saved policy's directory for a learned placer to start from, or None.
      save_policy: where to write the policy a learned placer fine-tuned, or None.
      progress: log the search's progress; ``progress_logdir``: TensorBoard scalars too.
      cost_profile: a CostProfile file whose op times the placement uses, or None.
      placer_options: ``name=value`` settings of the placer's config.
      verify: timed steps per candidate of verified placement (0: off; else >= 15); the
        cluster must be this machine's devices or a TensorFlow cluster with a target.
      unknown_dim: elements assumed for a dimension of unknown size (>= 1).
      verify_by_default: verify was not asked for but is on because the cluster is this
        machine or a TensorFlow cluster's servers: a graph that cannot be measured then keeps
        TF's default placement (with a warning) instead of failing the binary.
    """

    placer: str
    cluster: str = "local"
    budget_s: float | None = None
    report_path: str | None = None
    save_placement: str | None = None
    seed: int = 0
    ray_address: str | None = None
    placement: str | None = None
    cache: bool = True
    cache_dir: str | None = None
    policy: str | None = None
    save_policy: str | None = None
    progress: bool = True
    progress_logdir: str | None = None
    cost_profile: str | None = None
    placer_options: tuple = ()
    verify: int = 0
    verify_by_default: bool = False
    unknown_dim: int = 1

    def __post_init__(self):
        from tf_autoplace.core.settings import check_int
        from tf_autoplace.errors import ConfigError
        from tf_autoplace.learning.workers import check_ray_address

        if not _enabled(self.placer) and not self.placement:
            raise ConfigError(f"placer {self.placer!r} means autoplacement is off")
        if self.budget_s is not None and (isinstance(self.budget_s, bool) or not (
                isinstance(self.budget_s, (int, float)) and self.budget_s >= 0)):
            raise ConfigError(f"budget_s must be >= 0 seconds, got {self.budget_s!r}")
        check_ray_address(self.ray_address)
        check_int("unknown_dim", self.unknown_dim, low=1)
        if self.verify:
            _check_verify_cluster(self.cluster, self.verify)

    def place_options(self):
        """The :class:`~tf_autoplace.pipeline.options.PlaceOptions` these settings ask for:
        the saved placement (when given) or the named placer with its budget, Ray address,
        policy and options; the cache and progress as the flags say."""
        from tf_autoplace.outputs.progress import SearchProgress
        from tf_autoplace.pipeline.options import PlaceOptions
        from tf_autoplace.placers import SavedPlacement

        saved = bool(self.placement)
        if saved and _enabled(self.placer):
            logging.info("autoplace: applying the saved placement %s; the %s placer is not "
                         "run", self.placement, self.placer)
        return PlaceOptions.make(
            placer=SavedPlacement(self.placement) if saved else self.placer,
            cluster=self.cluster, seed=self.seed,
            budget_s=None if saved else self.budget_s,
            ray_address=None if saved else self.ray_address,
            policy=None if saved else self.policy,
            placer_options=() if saved else self.placer_options,
            cost_profile=self.cost_profile,
            cache=(self.cache_dir or True) if self.cache else False,
            progress=(SearchProgress("log", logdir=self.progress_logdir) if self.progress
                      else False),
            verify=self.verify, unknown_dim=self.unknown_dim)


def _check_verify_cluster(spec, steps) -> None:
    """ConfigError unless ``spec`` (a cluster spec, or "local") names devices this machine can
    run or a TensorFlow cluster with a target (measured on its servers), and ``steps`` is
    enough for the measurement protocol."""
    import tensorflow as tf

    from tf_autoplace.core.cluster import resolve_cluster
    from tf_autoplace.errors import ConfigError
    from tf_autoplace.hw.measure import runs_here
    from tf_autoplace.hw.protocol import check_steps

    check_steps(steps, "--autoplace_verify")
    if spec == "local":
        return
    cluster = resolve_cluster(spec)
    if not cluster.target and not runs_here(cluster, len(tf.config.list_physical_devices("GPU"))):
        raise ConfigError(
            f"--autoplace_verify measures placements on this machine, and "
            f"--autoplace_cluster={spec!r} has devices this machine does not have "
            f"({cluster.names}): a placement planned for another machine cannot be verified "
            "here; set --autoplace_verify=0, or place for --autoplace_cluster=local")


def _verify_steps(flag_value: int, cluster: str) -> tuple[int, bool]:
    """(steps, by default) for ``--autoplace_verify``: -1 is 15 where the binary is about to
    run the graph anyway (on "local", or on a TensorFlow cluster spec with a ``target``: its
    servers), else off."""
    if flag_value == -1:
        return (15, True) if cluster == "local" or _has_target(cluster) else (0, False)
    return flag_value, False


def _has_target(spec: str) -> bool:
    """Whether the cluster spec ``spec`` names TensorFlow servers to run on (a ``target``); a
    spec that does not resolve has none here (the cluster flag's own check says why)."""
    from tf_autoplace.core.cluster import resolve_cluster
    from tf_autoplace.errors import AutoplaceError

    try:
        return bool(resolve_cluster(spec).target)
    except AutoplaceError:
        return False


@flags.multi_flags_validator(["autoplace", "autoplace_placement", "autoplace_cluster",
                              "autoplace_verify"])
def _check_verify(values) -> bool:
    """Only when enabled: verify's steps, and a cluster of this machine's devices."""
    if not (_enabled(values["autoplace"]) or values["autoplace_placement"]):
        return True
    from tf_autoplace.errors import AutoplaceError

    steps, _ = _verify_steps(values["autoplace_verify"], values["autoplace_cluster"])
    if steps < 0:
        raise flags.ValidationError(f"--autoplace_verify must be -1, 0 or >= 15, got {steps}")
    if steps:
        try:
            _check_verify_cluster(values["autoplace_cluster"], steps)
        except AutoplaceError as e:
            raise flags.ValidationError(str(e)) from e
    return True


def settings_from_flags() -> AutoplaceSettings | None:
    """The settings the parsed flags ask for, or None when ``--autoplace`` is off and no
    ``--autoplace_placement`` is given."""
    if not (_enabled(FLAGS.autoplace) or FLAGS.autoplace_placement):
        return None

    def here(path):  # as parsed, from this directory: a binary's main() may chdir later
        return os.path.abspath(path) if path else None

    cluster = FLAGS.autoplace_cluster  # a file here wins over a shipped name (resolve_cluster)
    cluster = os.path.abspath(cluster) if os.path.isfile(cluster) else cluster
    return AutoplaceSettings(placer=FLAGS.autoplace.strip(), cluster=cluster,
                             budget_s=FLAGS.autoplace_budget_s,
                             report_path=here(FLAGS.autoplace_report),
                             save_placement=here(FLAGS.autoplace_save_placement),
                             ray_address=FLAGS.autoplace_ray_address or None,
                             placement=here(FLAGS.autoplace_placement),
                             cache=FLAGS.autoplace_cache, cache_dir=here(FLAGS.autoplace_cache_dir),
                             policy=here(FLAGS.autoplace_policy),
                             save_policy=here(FLAGS.autoplace_save_policy),
                             progress=FLAGS.autoplace_progress,
                             progress_logdir=here(FLAGS.autoplace_progress_logdir),
                             cost_profile=here(FLAGS.autoplace_cost_profile),
                             placer_options=tuple(FLAGS.autoplace_placer_option or ()),
                             unknown_dim=FLAGS.autoplace_unknown_dim or 1,
                             **dict(zip(("verify", "verify_by_default"),
                                        _verify_steps(FLAGS.autoplace_verify,
                                                      FLAGS.autoplace_cluster))))


_lock = threading.RLock()
_placed: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tf.Graph -> report
_graphs_written = [0]  # graphs whose report or placement this process wrote (their paths' kin)
_state = threading.local()
_handed = [0]  # graphs sessions handed to the runtime while the hook was installed
_exit_check = [False]  # _warn_if_no_session_ran is registered with atexit
_settings: AutoplaceSettings | None = None  # set while installed
_original_extend = None


def report_for(graph):
    """The report of ``graph``'s placement by the hook, or None if it was not placed."""
    return _placed.get(graph)


def _session_local_cluster(session):
    """``--autoplace_cluster=local`` for ``session``: this machine's devices, with as many CPU
    devices as the session has (a Session created with ``device_count={'CPU': N}`` has N, one
    given its own ConfigProto has one whatever logical CPUs the program configured with
    ``tf.config``, a Session without a config has those). A session with GPUs keeps them,
    beside its CPUs."""
    import tensorflow as tf

    from tf_autoplace.core.cluster import Cluster

    kinds = [d.device_type for d in session.list_devices()
             if tf.DeviceSpec.from_string(d.name).job in (None, "localhost")]
    cpus = kinds.count("CPU")
    if "GPU" in kinds:  # Cluster.local() has the GPUs; its CPUs: the configured ones, or one
        return Cluster.local(configured=cpus > 1)
    return Cluster.local(num_logical_cpus=max(1, cpus))


def _check_session_devices(session, cluster, spec: str) -> list[str]:
    """Raise ConfigError if ``cluster`` (read from ``spec``) names devices ``session`` lacks
    and the session does not allow soft placement; returns the devices it lacks (soft
    placement will move their ops). A name that leaves out its job, replica or task
    (``/device:CPU:0``) is the session's device of that type and index on any task, as
    TensorFlow places it."""
    import tensorflow as tf

    from tf_autoplace.errors import ConfigError

    have = sorted(tf.DeviceSpec.from_string(d.name).to_string() for d in session.list_devices())
    specs = [tf.DeviceSpec.from_string(d) for d in have]

    def reached(name, fields=("job", "replica", "task", "device_type", "device_index")):
        want = tf.DeviceSpec.from_string(name)
        return any(all(getattr(want, f) is None or getattr(want, f) == getattr(got, f)
                       for f in fields) for got in specs)

    missing = [n for n in cluster.names if not reached(n)]
    if not missing:
        return []
    elsewhere = [n for n in missing if not reached(n, ("job", "replica", "task"))]
    config = getattr(session, "_config", None)
    if elsewhere:  # soft placement moves ops between a task's devices, never to another task
        raise ConfigError(
            f"--autoplace_cluster={spec!r} has devices {elsewhere} on tasks this session "
            f"cannot reach (it has {sorted(have)}); TensorFlow cannot run ops there, even with "
            "soft placement: create the Session on the cluster's master "
            "(tf.compat.v1.Session(target)), or pick a cluster spec of this session's devices")
    if config is not None and config.allow_soft_placement:
        logging.warning("autoplace: the session lacks cluster devices %s; soft placement will "
                        "move their ops", missing)
        return missing
    on_servers = bool(getattr(session, "sess_str", ""))  # a Session on a server's target
    raise ConfigError(
        f"--autoplace_cluster={spec!r} has devices {missing} that this "
        f"session does not have (it has {sorted(have)}); "
        + ("the servers decide their devices: start them with the spec's devices, or pick a "
           "spec of what they serve (tf_autoplace.hw.cluster_profile.served_devices)"
           if on_servers else
           "create the Session with ConfigProto(device_count={'CPU': N}) for N logical CPUs, "
           "or pick a cluster spec that matches the machine"))


def _place_graph(session, settings: AutoplaceSettings) -> None:
    from tf_autoplace.errors import ConfigError, InputValueError, MeasurementError
    from tf_autoplace.pipeline import engine

    graph = session.graph
    with _lock:
        if graph in _placed:
            return
        if not graph.get_operations():
            return  # nothing to place yet; try again when the session sees ops
        from tf_autoplace.rewrite import was_placed

        if was_placed(graph):  # the script placed it itself (tf_autoplace.autoplace): kept
            logging.info("autoplace: the graph was already placed in this process "
                         "(tf_autoplace.autoplace); that placement is kept")
            _placed[graph] = None
            return
        options = settings.place_options()
        cluster = (_session_local_cluster(session) if options.cluster == "local"
                   else options.resolved_cluster())
        missing = _check_session_devices(session, cluster, settings.cluster)
        if missing and options.verify:  # nothing can be measured on devices that are not there
            if not settings.verify_by_default:
                raise ConfigError(
                    f"--autoplace_verify measures placements on the cluster's devices, and "
                    f"this session lacks {missing} (soft placement would move their ops): set "
                    "--autoplace_verify=0, or pick a cluster spec of this session's devices")
            logging.warning("autoplace: placing without verification: the session lacks "
                            "cluster devices %s to measure placements on", missing)
            options = options.replace(verify=0)
        try:
            report = engine.place_graph(graph, options.replace(cluster=cluster))
        except (MeasurementError, InputValueError) as e:
            # An input without a value: the engine's advice (measure_feeds, --feed_shape) is
            # autoplace()'s and the tf-autoplace command's, no flag of a training binary's.
            fed = isinstance(e, InputValueError)
            why = str(e).split("; ")[0] if fed else str(e)
            if not settings.verify_by_default:
                if fed:
                    raise ConfigError(
                        f"--autoplace_verify cannot step the graph on its own: {why}; give the "
                        "placeholder a static shape, or set --autoplace_verify=0 to place "
                        "without measuring") from e
                raise
            logging.warning("autoplace: verification could not run the graph on its own (%s); "
                            "the graph keeps TensorFlow's default placement. %s "
                            "--autoplace_verify=0 to place without measuring", why,
                            "Give the placeholder a static shape, or set" if fed else "Set")
            _placed[graph] = None
            return
        placer = options.placer
        _placed[graph] = report
    logging.info("autoplace: placed %d ops with %s\n%s", report.num_ops, report.placer, report)
    if settings.save_policy:
        if report.policy is None:
            logging.warning("autoplace: no fine-tuned policy to write to %s (%s)",
                            settings.save_policy, "the placement came from the placement cache"
                            if report.from_cache else "the placer kept none")
        else:
            report.save_policy(settings.save_policy)
            logging.info("autoplace: wrote the fine-tuned policy to %s", settings.save_policy)
    if not (settings.report_path or settings.save_placement):
        return
    with _lock:
        _graphs_written[0] += 1
        k = _graphs_written[0]
    for given, what in ((settings.report_path, "report"),
                        (settings.save_placement, "placement")):
        if given and k > 1:
            logging.warning("autoplace: placed graph %d of this process (%d ops); its %s is %s "
                            "(%s keeps the first graph's)", k, report.num_ops, what,
                            report_path(given, k), given)
    if settings.save_placement:
        _write_placement(report, report_path(settings.save_placement, k))
    if settings.report_path:
        _write_report(settings, report, placer, report_path(settings.report_path, k))


def report_path(path: str, k: int) -> str:
    """Where the report of the ``k``-th graph (from 1) a process places goes: ``path`` for the
    first, ``report.2.json`` beside ``report.json`` for the second, and so on. A binary that
    places a training graph and then an evaluation graph keeps both reports: the later one
    does not replace the first. Counted from the last :func:`install`."""
    if k == 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.{k}{ext}"


def _write_placement(report, path: str) -> None:
    from tf_autoplace.errors import ConfigError
    from tf_autoplace.outputs import files
    from tf_autoplace.outputs.saved_placement import serialize

    outputs = files.Outputs()  # whole or absent, with the user's umask like every output
    outputs.add_file(path, serialize(report.to_proto(), path))
    try:
        outputs.commit()
    except OSError as e:  # checked at parsing; a disk that filled since, a directory removed
        raise ConfigError(f"--autoplace_save_placement: cannot write the placement to {path!r} "
                          f"({e}); the graph is placed") from e


def _write_report(settings: AutoplaceSettings, report, placer, path: str) -> None:
    from tf_autoplace.outputs import files
    from tf_autoplace.outputs.report import json_text
    from tf_autoplace.placers import takes_budget

    out = report.to_dict()
    out["flags"] = {"autoplace": settings.placer, "autoplace_cluster": settings.cluster,
                    "autoplace_budget_s": settings.budget_s,
                    "budget_passed_to_placer": (settings.budget_s is not None
                                                and takes_budget(placer)),
                    "autoplace_placement": settings.placement,
                    "autoplace_cache": settings.cache, "autoplace_policy": settings.policy,
                    "autoplace_cost_profile": settings.cost_profile,
                    "autoplace_placer_option": list(settings.placer_options),
                    "autoplace_verify": settings.verify,
                    "autoplace_unknown_dim": settings.unknown_dim}
    outputs = files.Outputs()  # whole or absent, with the user's umask like every output
    outputs.add_file(path, json_text(out).encode("utf-8"))
    try:
        outputs.commit()
    except OSError as e:  # checked at parsing; a disk that filled since, a directory removed
        from tf_autoplace.errors import ConfigError

        raise ConfigError(f"--autoplace_report: cannot write the report to {path!r} ({e}); "
                          "the graph is placed") from e


def _extend_graph(self):
    from tf_autoplace.hw.runner import is_own_graph  # (TensorFlow is imported by now)

    settings = _settings
    theirs = settings is not None and not is_own_graph(self.graph)  # not our measuring's
    if theirs:
        _handed[0] += 1
    if theirs and not getattr(_state, "busy", False) and self.graph not in _placed:
        _state.busy = True
        try:
            _place_graph(self, settings)
        finally:
            _state.busy = False
    return _original_extend(self)


def install(settings: AutoplaceSettings | None = None) -> bool:
    """Start placing graphs before their first session run.

    Args:
      settings: what to do; by default read from the parsed flags (``--autoplace`` off: nothing
        is patched and False is returned).

    Called for you once ``absl.app`` has parsed the flags. Installing again replaces the
    settings. Returns whether the hook is installed.

    Raises:
      ConfigError: no ``settings`` and the flags are not parsed yet (call it after parsing).
    """
    global _settings, _original_extend
    if settings is None:
        if not FLAGS.is_parsed():
            from tf_autoplace.errors import ConfigError

            raise ConfigError("tf_autoplace.flags.install() needs parsed flags (call it after "
                              "the flags are parsed) or settings")
        settings = settings_from_flags()
        if settings is None:  # --autoplace off now: an earlier install must not go on placing
            uninstall()
            return False
    with _lock:
        from tensorflow.python.client import session as tf_session

        from tf_autoplace.errors import ConfigError
        from tf_autoplace.rewrite import sessions  # noqa: F401  (records runs below the hook)

        if _original_extend is None:
            original = getattr(tf_session.BaseSession, "_extend_graph", None)
            if original is None:
                raise ConfigError("this TensorFlow has no BaseSession._extend_graph, the hook "
                                  "--autoplace relies on; call tf_autoplace.autoplace(graph) "
                                  "before creating the Session instead")
            _original_extend = original
            tf_session.BaseSession._extend_graph = _extend_graph
        _settings = settings
        _graphs_written[0] = 0  # the next graph's report goes to the settings' own path
        if not _exit_check[0]:
            atexit.register(_warn_if_no_session_ran)
            _exit_check[0] = True
    logging.info("autoplace: sessions will place their graph with %s on %s before the first "
                 "run", f"the saved placement {settings.placement}" if settings.placement
                 else settings.placer, settings.cluster)
    return True


def _warn_if_no_session_ran() -> None:
    """At exit, while installed: warn when no Session handed a graph over. The hook places
    graphs that a Session runs; an eager TF2 program or a Keras ``fit`` in eager mode never
    does, and would otherwise end with nothing placed and no report, without a word."""
    if _settings is not None and _handed[0] == 0:
        logging.warning("autoplace: --autoplace was set, but no Session ran a graph in this "
                        "program, so nothing was placed and no report written: TF2 functions "
                        "and Keras models running eagerly are placed with "
                        "tf_autoplace.autoplace(function or model) in the program")


def uninstall() -> None:
    """Undo :func:`install` (graphs already placed keep their devices)."""
    global _settings, _original_extend
    with _lock:
        if _original_extend is not None:
            from tensorflow.python.client import session as tf_session

            tf_session.BaseSession._extend_graph = _original_extend
            _original_extend = None
        _settings = None


def _install_after_init() -> None:
    install()


def _register() -> None:
    from absl import app

    app.call_after_init(_install_after_init)


_register()
