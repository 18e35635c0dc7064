"""Write testdata/gdp_golden.json: the shipped GDP policy's greedy placement and its simulated
step time on fixed generated graphs, which tests/placers/test_gdp_golden.py pins.

    PYTHONPATH=. python tools/make_gdp_golden.py --out=testdata/gdp_golden.json

Run it again, and commit the result, only when a change to the features, the grouping, the
reading order, the network or the shipped weights is meant to change what the policy does; the
test exists to make every other such change fail loudly.
"""

from __future__ import annotations

import json

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "testdata/gdp_golden.json", "Where to write the golden file.")

# The graphs: tf_autoplace.testing.problems.random_problem(**case) for each case.
CASES = ({"n": 600, "seed": 0, "num_gpus": 2}, {"n": 600, "seed": 0, "num_gpus": 4},
         {"n": 600, "seed": 0, "num_gpus": 8})


def golden(case: dict) -> dict:
    """The shipped policy's greedy placement of ``random_problem(**case)``: per op device,
    simulated step time, and the group count."""
    from tf_autoplace.placers import GdpPlacer
    from tf_autoplace.rl.eager import policy_context
    from tf_autoplace.rl.gdp_features import graph_features
    from tf_autoplace.rl.policies.gdp import greedy
    from tf_autoplace.testing.problems import random_problem

    problem = random_problem(**case)
    with policy_context():
        policy, _ = GdpPlacer().load_policy()
        graph = graph_features(problem, hint=policy.config["hint"])
        devices = graph.op_placement(greedy(policy.graph_logits(graph)))
    return dict(case=case, groups=graph.num_groups, devices=devices.tolist(),
                step_s=problem.simulator.run(devices).makespan)


def main(argv):
    del argv
    with open(FLAGS.out, "w", encoding="utf-8") as f:
        json.dump([golden(dict(case)) for case in CASES], f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
    app.run(main)
