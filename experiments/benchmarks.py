"""Rerun every table of BENCHMARKS.md at one commit, and write the tables back into it.

    python experiments/benchmarks.py --list                 # sections, commands, hours
    python experiments/benchmarks.py --sections=all         # every table (hours: see --list)
    python experiments/benchmarks.py --sections=zoo,bounds --out_dir=build/benchmarks
    python experiments/benchmarks.py --assemble             # tables into BENCHMARKS.md

Each section of :data:`SECTIONS` is one or more commands that print markdown (every
``tf-autoplace`` subcommand and ``experiments/`` script that makes a BENCHMARKS table prints its
table on stdout). Running a section writes ``<out_dir>/<name>.md``: a header line with the
commit (``git rev-parse --short HEAD``, and ``+changes`` when the tree is not clean), the
machine (cores, memory, CPU model), the 1-minute load before and after, the wall time and the
commands, then the commands' output. ``--assemble`` replaces the text between
``<!-- benchmarks:NAME -->`` and ``<!-- /benchmarks:NAME -->`` in BENCHMARKS.md with that
file, so the prose around a table is written by hand and the table itself always comes from
its command at a named commit. A section whose run failed is not assembled.

Simulated figures depend only on the code, the graph and the seed; measured ones (the
``measured`` kind) need a quiet machine: the script waits for a 1-minute load at most
``--max_load`` before each of those, and says so in the header when it ran busier.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shlex
import subprocess
import sys
import time

from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = [sys.executable, "-m", "tf_autoplace.cli"]


@dataclasses.dataclass(frozen=True)
class Section:
    """One table of BENCHMARKS.md.

    Attributes:
      name: the marker name in BENCHMARKS.md.
      commands: the commands (argument lists) whose stdout is the section's markdown.
      hours: about how long it takes on the 2-core development machine.
      measured: whether it times real runs (needs a quiet machine), else simulated only.
    """

    name: str
    commands: tuple[tuple[str, ...], ...]
    hours: float
    measured: bool = False


def _cli(*args) -> tuple[str, ...]:
    return tuple(CLI + list(args))


def _script(name, *args) -> tuple[str, ...]:
    return (sys.executable, os.path.join("experiments", name), *args)


ZOO_PLACERS = "auto,best_heuristic,expert,metis,m_etf,placeto,post,hdp,gdp@0,gdp"
SECTIONS = {s.name: s for s in (
    Section("zoo", (_cli("benchmark", f"--placers={ZOO_PLACERS}", "--budget_s=3600"),), 0.7),
    Section("auto_search", (_cli("benchmark", "--placers=auto"),), 1.0, measured=True),
    Section("anytime", (_script("bench_anytime.py"),), 0.1, measured=True),
    Section("zoo_new_gpus", (_cli(
        "benchmark", "--quick", "--placers=auto,best_heuristic,expert,metis,m_etf",
        "--budget_s=3600", "--pairs=" + ",".join(
            f"{pair}:{gpu}{n}" for gpu in ("a100x", "h100x") for pair, n in (
                ("inception_v3", 2), ("nmt2", 2), ("rnnlm4", 4), ("nmt4", 4),
                ("transformer8", 8), ("nmt8", 8)))),), 1.0),
    Section("optimality", (_script("bench_optimality.py"),), 1.0),
    Section("ray", (_script("bench_ray.py", "--pair=nmt8_long:k80x8", "--workers=1,2",
                            "--batch=16", "--batches=10", "--ray_address=local"),), 0.3,
            measured=True),
    Section("bounds", (_script("bench_bound.py"),), 0.5),
    Section("gdp", (_script("eval_gdp.py", "--long_steps=200", "--long_budget_s=600"),), 4.0),
    Section("hdp_seeds", (_script("eval_hdp.py", "--pairs=nmt2:k80x2,nmt4:k80x4,nmt8:k80x8",
                                  "--max_samples=1024", "--seed=1"),), 1.0),
    Section("post_ablation", (_script("eval_post.py", "--pairs=nmt2:k80x2,nmt4:k80x4",
                                      "--algorithms=ce+ppo,ce,ppo"),), 1.5),
    Section("scale", (_script("bench_scale.py", "--lengths=64,192", "--rounds=3"),), 0.3,
            measured=True),
    Section("simulator_speed", (_script("bench_sim.py", "--runs=100", "--pairs=inception_v3:"
                                        "k80x2,inception_v3:k80x4,inception_v3:k80x8,"
                                        "nmt8_long:k80x8"),), 0.3, measured=True),
    Section("fidelity", (_cli("fidelity", "--max_load=0.8", "--graphs=lstm,transformer,"
                              "cnn_branches,two_tower,wide_deep"),), 0.3, measured=True),
    Section("fidelity_components", (_cli("fidelity", "--components", "--max_load=1.5"),), 0.5,
            measured=True),
    Section("tf_cluster2", (_script("bench_tf_cluster.py", "--tasks=2", "--ps_tasks=1"),), 0.1,
            measured=True),
    Section("tf_cluster4", (_script("bench_tf_cluster.py", "--tasks=4", "--ps_tasks=1"),), 0.3,
            measured=True),
    Section("policy_reuse", tuple(
        _script("bench_policy_reuse.py", f"--placer={p}", "--model=transformer",
                "--base=layers=2", "--variant=layers=3", "--variant=batch=16",
                "--cluster=k80x2", f"--seeds={seeds}", "--samples=256")
        for p, seeds in (("placeto", "0,1,2"), ("hdp", "0,1"), ("gdp", "0,1"))), 2.0),
    Section("reliability", ((sys.executable, os.path.join("tests", "fuzz_child.py"), "0", "0",
                             "300"),), 0.2),
)}

FLAGS = flags.FLAGS
flags.DEFINE_bool("list", False, "List the sections with their commands and hours, then stop.")
flags.DEFINE_list("sections", [], "Sections to run ('all': every one).")
flags.DEFINE_string("out_dir", os.path.join(REPO, "build", "benchmarks"),
                    "Where each section's markdown goes.")
flags.DEFINE_bool("assemble", False, "Replace the tables in BENCHMARKS.md with the files in "
                  "--out_dir.")
flags.DEFINE_float("max_load", 1.5, "Before a measured section, wait until the 1-minute load "
                   "is at most this (0: do not wait).")


def commit() -> str:
    """The checkout's short commit, with ``+changes`` when the tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                          capture_output=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, text=True,
                           capture_output=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def machine() -> str:
    """``"2 cores, 24 GiB, <CPU model>"``."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            found = re.search(r"model name\s*:\s*(.+)", f.read())
        model = found.group(1).strip() if found else model
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {model}"


def _load() -> float:
    return os.getloadavg()[0]


def run_section(section: Section, out_dir: str, max_load: float) -> bool:
    """Run ``section``'s commands and write its markdown; returns whether all succeeded."""
    if section.measured and max_load > 0:
        while _load() > max_load:
            print(f"[{section.name}] load {_load():.2f} > {max_load}; waiting 60 s",
                  file=sys.stderr, flush=True)
            time.sleep(60)
    # The commit before the commands run: a section may write files into the checkout (its
    # charts), which would make the tree look changed afterwards.
    revision, before, began = commit(), _load(), time.perf_counter()
    outputs, ok = [], True
    for command in section.commands:
        print(f"[{section.name}] {shlex.join(command)}", file=sys.stderr, flush=True)
        done = subprocess.run(command, cwd=REPO, text=True, stdout=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=REPO))
        outputs.append(done.stdout)
        ok &= done.returncode == 0
    after, seconds = _load(), time.perf_counter() - began
    shown = " && ".join(shlex.join(c).replace(sys.executable, "python").replace(
        "python -m tf_autoplace.cli", "tf-autoplace") for c in section.commands)
    header = (f"<!-- made by experiments/benchmarks.py --sections={section.name} -->\n"
              f"Commit {revision}; {machine()}; load {before:.2f} -> {after:.2f}"
              f"{'' if max(before, after) <= 1.5 or not section.measured else ' (busy: not publishable)'}"
              f"; {seconds / 60:.0f} min. Command: `{shown}`\n\n")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{section.name}.md" if ok else f"{section.name}.failed.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "\n".join(o.strip() for o in outputs) + "\n")
    return ok


def assemble(out_dir: str, path: str = os.path.join(REPO, "BENCHMARKS.md")) -> list[str]:
    """Replace each marked table in ``path`` whose section has a file in ``out_dir``; returns
    the names replaced. Every table's headings are nested under the hand-written heading above
    its marker (see :func:`_nest_headings`), the ones kept as well as the new ones."""
    text = open(path, encoding="utf-8").read()
    done = []
    for name in SECTIONS:
        source = os.path.join(out_dir, f"{name}.md")
        pattern = re.compile(rf"(<!-- benchmarks:{name} -->\n)(.*?)(<!-- /benchmarks:{name} -->)",
                             re.S)
        match = pattern.search(text)
        if not match:
            continue
        table = match.group(2)
        if os.path.exists(source):
            table = open(source, encoding="utf-8").read()
            done.append(name)
        table = _nest_headings(table, *_enclosing_heading(text[:match.start()]))
        text = text[:match.start()] + match.group(1) + table + match.group(3) + text[match.end():]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return done


_HEADING = re.compile(r"^(#+) (.*)$", re.M)


def _enclosing_heading(before: str) -> tuple[int, str]:
    """Level and title of the last hand-written heading in ``before`` (text inside other
    sections' markers is skipped: a table's headings do not enclose the next table)."""
    prose = re.sub(r"<!-- benchmarks:(\w+) -->\n.*?<!-- /benchmarks:\1 -->", "", before, flags=re.S)
    headings = _HEADING.findall(prose)
    return (len(headings[-1][0]), headings[-1][1].strip()) if headings else (0, "")


def _nest_headings(table: str, level: int, title: str) -> str:
    """A command's markdown (a report with its own ``##`` title) nested under the heading at
    ``level``: its headings moved down so that the shallowest is one level deeper, and a title
    that only repeats the enclosing heading dropped, so BENCHMARKS.md's outline shows each
    section once."""
    lines = [line for line in table.split("\n")
             if not ((m := _HEADING.match(line)) and m.group(2).strip() == title)]
    levels = [len(m.group(1)) for m in map(_HEADING.match, lines) if m]
    shift = max(0, level + 1 - min(levels, default=level + 1))
    out = ["#" * shift + line if _HEADING.match(line) else line for line in lines]
    return "\n".join(out)


def main(argv):
    del argv
    if FLAGS.list:
        for s in SECTIONS.values():
            kind = "measured" if s.measured else "simulated"
            print(f"{s.name:<20} {s.hours:>4.1f} h  {kind}")
            for c in s.commands:
                print(f"    {shlex.join(c)}")
        print(f"all: about {sum(s.hours for s in SECTIONS.values()):.0f} h on 2 cores")
        return 0
    names = list(SECTIONS) if FLAGS.sections == ["all"] else FLAGS.sections
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        raise app.UsageError(f"unknown sections {unknown}; known: {sorted(SECTIONS)}")
    failed = [n for n in names if not run_section(SECTIONS[n], FLAGS.out_dir, FLAGS.max_load)]
    if FLAGS.assemble:
        print("assembled:", ", ".join(assemble(FLAGS.out_dir)) or "nothing")
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    app.run(main)
