"""tf_autoplace.zoo.benchmark (behind tf-autoplace benchmark): counting, OOM and error rows, outputs,
and one quick end-to-end pair."""

import csv
import math
import os
import stat

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.cost import TableCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.placers import Placer, get_placer
from tf_autoplace.zoo import benchmark as bench

GB = 10**9


def _problem(cpu=True):
    # Four 4 GB variables feeding a sum: 16 GB do not fit one 10 GB GPU but fit two.
    graph = from_edges(5, [(0, 4, 8), (1, 4, 8), (2, 4, 8), (3, 4, 8)],
                       persistent_bytes=[4 * GB] * 4 + [0])
    devices = [Device(f"/device:GPU:{i}", "GPU", memory_bytes=10 * GB) for i in range(2)]
    if cpu:
        devices.append(Device("/device:CPU:0", "CPU", memory_bytes=100 * GB))
    cluster = Cluster.uniform(devices, bandwidth_gbps=1.0, latency_us=10.0)
    times = {"GPU": np.full(5, 1e-3), "CPU": np.full(5, 1.0)}
    op_time = TableCostModel({d.kind: times[d.kind] for d in devices}).op_time(graph, cluster)
    return bench.CountedProblem(graph=graph, cluster=cluster, op_time=op_time,
                                grouping=Grouping.from_labels(graph, graph.colocation))


class _Searching(Placer):
    """Simulates three candidates, returns the all-on-GPU-0 one."""

    name = "searching"

    def _place(self, problem, rng):
        candidate = np.zeros(problem.graph.num_ops, np.int32)
        problem.simulator.run(candidate)
        problem.simulator.run(candidate)
        problem.simulator.makespan(candidate)
        return candidate


def test_run_placer_counts_search_simulations_only():
    row = bench.run_placer(_problem(), _Searching(), seed=0, model="m", cluster="c")
    assert row.sims == 3
    assert row.search_s >= 0 and not row.error
    assert bench.run_placer(_problem(), get_placer("single"), seed=0, model="m",
                            cluster="c").sims == 0


def test_run_placer_flags_oom_instead_of_failing():
    problem = _problem()
    single = bench.run_placer(problem, get_placer("single"), seed=0, model="m", cluster="c")
    assert single.oom and math.isfinite(single.step_s)
    assert single.peak_gb[0] == pytest.approx(16.0, abs=0.01)
    spread = bench.run_placer(problem, get_placer("m_etf"), seed=0, model="m", cluster="c")
    assert not spread.oom and max(spread.peak_gb[:2]) <= 10.0


def test_run_placer_reports_a_failing_placer_as_an_error_row():
    row = bench.run_placer(_problem(cpu=False), get_placer("cpu_only"), seed=0, model="m",
                           cluster="c")
    assert "needs a CPU" in row.error
    assert math.isnan(row.step_s)
    assert "error: cpu_only needs a CPU" in bench.markdown([row], [], title="t")


def test_search_curves_are_read_timed_or_estimated_and_reached():
    post = dict(curve=[(12, 0.9), (24, 0.8), (36, 0.7)], curve_s=[1.0, 1.5, 4.0])
    curve, timed = bench.search_curve(post, search_s=5.0)
    assert timed and curve == ((12, 1.0, 0.9), (24, 1.5, 0.8), (36, 4.0, 0.7))
    assert bench.reach(curve, 0.8) == (24, 1.5)
    assert bench.reach(curve, 0.69) is None
    placeto = dict(curve=[(10, 0.9), (40, 0.7)])  # no seconds: in proportion to placements
    curve, timed = bench.search_curve(placeto, search_s=8.0)
    assert not timed and curve == ((10, 2.0, 0.9), (40, 8.0, 0.7))
    assert bench.search_curve({}, 1.0) == ((), True)


def test_markdown_counts_the_learned_searches_against_the_expert_and_their_own_best():
    rows = [bench.Row("m", "c", 5, 5, "expert", step_s=0.75),
            bench.Row("m", "c", 5, 5, "post", step_s=0.6,
                      curve=((12, 1.0, 0.9), (24, 2.0, 0.74), (36, 3.0, 0.605), (48, 4.0, 0.6))),
            bench.Row("m", "c", 5, 5, "placeto", step_s=0.8, curve=((10, 5.0, 0.8),),
                      curve_timed=False)]
    text = bench.markdown(rows, [], title="t")
    assert "| m | c | post | 48 | 0.6 | 0.75 | 24 / 2.0 s | 36 / 3.0 s |" in text
    assert "| m | c | placeto | 10 | 0.8 | 0.75 | never | 10 / ~5.0 s |" in text


def test_parse_pairs():
    assert bench.parse_pairs(["nmt4:k80x4", "inception_v3:x/y.pbtxt"]) == [
        ("nmt4", "k80x4"), ("inception_v3", "x/y.pbtxt")]
    for bad in ("nmt4", "nmt3:k80x4", "nmt4:"):
        with pytest.raises(ConfigError):
            bench.parse_pairs([bad])
    for name, _ in bench.parse_pairs(bench.FULL_PAIRS + bench.QUICK_PAIRS):
        assert name in bench.MODELS


@pytest.fixture(scope="module")
def quick_rnnlm():
    rows, infos = bench.benchmark([("rnnlm2", "k80x2")], ["single", "expert", "metis"],
                                  quick=True, sim_runs=2)
    return rows, infos


def test_placer_items_name_a_budget_for_placers_that_search():
    assert bench.parse_placer("m_etf") == ("m_etf", None)
    assert bench.parse_placer("gdp@0") == ("gdp", 0.0)
    assert bench.parse_placer("gdp@60") == ("gdp", 60.0)
    assert bench.make_placer("gdp@0", None).config.zero_shot
    assert bench.make_placer("gdp@12.5", None).config.budget_s == 12.5
    for bad in ("nope", "m_etf@5", "gdp@-1", "gdp@soon"):
        with pytest.raises(ConfigError, match="nope|@SECONDS"):
            bench.parse_placer(bad)


def test_quick_benchmark_end_to_end(quick_rnnlm, tmp_path):
    rows, infos = quick_rnnlm
    assert [r.placer for r in rows] == ["single", "expert", "metis"]
    assert all(math.isfinite(r.step_s) and not r.error and not r.oom for r in rows)
    assert all(r.ratio >= 1 for r in rows)  # the lower bound holds
    assert all(r.lp_ratio >= 1 and r.lp_bound_s >= r.lower_bound_s for r in rows)
    # Solved, or shown unable to raise the path with windows (which binds on RNNLM).
    assert infos[0].lp_status in ("optimal", "dominated")
    assert infos[0].lp_bound_s == rows[0].lp_bound_s
    by_name = {r.placer: r for r in rows}
    assert by_name["expert"].step_s < by_name["single"].step_s  # one LSTM layer per GPU
    assert len(infos) == 1 and infos[0].sims_per_s > 0 and infos[0].ops == rows[0].ops

    text = bench.markdown(rows, infos, title="quick")
    assert text.count("| rnnlm2 | k80x2 |") == 4  # three placers and the simulator row
    path = tmp_path / "rows.csv"
    bench.write_csv(str(path), rows)
    with open(path, newline="", encoding="utf-8") as f:
        read = list(csv.DictReader(f))
    assert [r["placer"] for r in read] == ["single", "expert", "metis"]
    assert float(read[1]["step_s"]) == pytest.approx(by_name["expert"].step_s)


def test_plot_writes_a_png(quick_rnnlm, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    rows, _ = quick_rnnlm
    path = tmp_path / "plot.png"
    bench.write_plot(str(path), rows, ["single", "expert", "metis"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_make_placer_gives_searching_placers_the_budget_and_others_their_defaults():
    assert bench.make_placer("auto", None, budget_s=5.0).config.budget_s == 5.0
    assert bench.make_placer("post", None, budget_s=7.0).config.budget_s == 7.0
    assert bench.make_placer("auto", None).config.budget_s == bench.make_placer(
        "auto", None, None).config.budget_s == 120.0
    assert bench.make_placer("metis", None, budget_s=5.0).name == "metis"


def test_summary_marks_the_fastest_fitting_placer_and_compares_the_default(tmp_path):
    rows = [bench.Row("m", "c", 5, 5, "auto", step_s=0.5, lp_bound_s=0.25, search_s=3.0),
            bench.Row("m", "c", 5, 5, "expert", step_s=0.625, lp_bound_s=0.25),
            bench.Row("m", "c", 5, 5, "single", step_s=0.25, lp_bound_s=0.25, oom=True),
            bench.Row("m", "c", 5, 5, "metis", error="boom", lp_bound_s=0.25)]
    lines = bench.summary_markdown(rows)
    assert lines[3] == ("| pair | auto | expert | single | metis | LP bound | auto / expert | "
                        "auto / best other | auto search (s) |")
    assert lines[5] == "| m:c | **500.0** | 625.0 | 250.0 OOM | err | 250.0 | 0.8 | 0.8 | 3 |"
    path = tmp_path / "rows.csv"
    bench.write_csv(str(path), rows)
    back = bench.read_csv(str(path))
    assert bench.summary_markdown(back) == lines
    assert [(r.placer, r.oom, r.error) for r in back] == [(r.placer, r.oom, r.error) for r in rows]


@pytest.mark.parametrize("text, message", [
    ("a,b\n1,2\n", r"line 2 is not a row of a benchmark CSV .*KeyError 'model'"),
    ("model,cluster,ops,groups,placer,step_s,lower_bound_s,lp_bound_s,peak_gb,oom,search_s,"
     "sims,error\nm,c,five,5,auto,0.5,,,,0,,0,\n", r"line 2 .*ValueError"),
    ("model,cluster,ops\nm,c\n", r"line 2 is not a row"),  # a short row
])
def test_a_csv_that_is_not_the_benchmarks_is_a_config_error_naming_the_line(tmp_path, text,
                                                                          message):
    # --from_csv ended in a KeyError or ValueError traceback.
    path = tmp_path / "other.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        bench.read_csv(str(path))
    path.write_bytes(b"\xff\xfe binary")
    with pytest.raises(ConfigError, match="line 1 is not a row"):
        bench.read_csv(str(path))


def test_pair_problems_are_kept_in_a_private_problem_cache(tmp_path, monkeypatch):
    first = bench.pair_problem("rnnlm2", "k80x2", quick=True, cache_dir=tmp_path / "cache")
    (entry,) = os.listdir(tmp_path / "cache")
    assert entry.startswith("pair_rnnlm2_quick_") and entry.endswith(".npz")
    assert stat.S_IMODE(os.stat(tmp_path / "cache").st_mode) == 0o700
    monkeypatch.setattr(bench, "load_model", lambda *a, **k: pytest.fail("built again"))
    again = bench.pair_problem("rnnlm2", "k80x2", quick=True, cache_dir=tmp_path / "cache")
    assert again.graph.names == first.graph.names
    np.testing.assert_array_equal(again.op_time, first.op_time)
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        bench.pair_problem("nope", "k80x2")
