"""Write testdata/gdp_golden.json: the shipped GDP policy's greedy placement and its simulated
step time on fixed generated graphs, which tests/placers/gdp/test_gdp_golden.py pins.

    PYTHONPATH=. python tools/make_gdp_golden.py --out=testdata/gdp_golden.json

Run it again, and commit the result, only when a change to the features, the grouping, the
reading order, the network or the shipped weights is meant to change what the policy does; the
test exists to make every other such change fail loudly.
"""

from __future__ import annotations

import dataclasses
import json

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "testdata/gdp_golden.json", "Where to write the golden file.")

# The graphs: tf_autoplace.testing.problems.random_problem(**case) for each case.
CASES = ({"n": 600, "seed": 0, "num_gpus": 2}, {"n": 600, "seed": 0, "num_gpus": 4},
         {"n": 600, "seed": 0, "num_gpus": 8})


def golden(case: dict) -> dict:
    """The shipped policy's greedy placement of ``random_problem(**case)``: per op device,
    simulated step time, the group count and the log-probability of each movable group's greedy
    device (``greedy_log_probs``); ``live_greedy`` and ``live_log_probs``: the same with the
    shipped policy's all-zero weights filled by ``tf_autoplace.testing.policies.live_weights``
    and the hint withheld (the shipped output layer is zero, so its own logits are the hint's
    alone and would not see a change of the features, the order or the network)."""
    from tf_autoplace.learning.eager import policy_context
    from tf_autoplace.placers import GdpPlacer
    from tf_autoplace.placers.gdp.features import graph_features
    from tf_autoplace.placers.gdp.policy import greedy, greedy_log_probs
    from tf_autoplace.testing.policies import live_weights
    from tf_autoplace.testing.problems import random_problem

    problem = random_problem(**case)
    with policy_context():
        policy, _ = GdpPlacer().load_policy()
        graph = graph_features(problem, hint=policy.config["hint"])
        logits = policy.graph_logits(graph)
        devices = graph.op_placement(greedy(logits))
        shipped = policy.get_weights()
        policy.set_weights(live_weights(shipped))
        live = policy.graph_logits(dataclasses.replace(graph, hint=0 * graph.hint))
        policy.set_weights(shipped)
    return dict(case=case, groups=graph.num_groups, devices=devices.tolist(),
                step_s=problem.simulator.run(devices).makespan,
                greedy_log_probs=greedy_log_probs(logits)[graph.movable].tolist(),
                live_greedy=greedy(live)[graph.movable].tolist(),
                live_log_probs=greedy_log_probs(live)[graph.movable].tolist())


def main(argv):
    del argv
    with open(FLAGS.out, "w", encoding="utf-8") as f:
        json.dump([golden(dict(case)) for case in CASES], f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
    app.run(main)
