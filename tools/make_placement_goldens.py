"""Write testdata/placement_goldens.json: every placer's placement digest on the golden problems.

    python tools/make_placement_goldens.py

Run it only for a change that is meant to move placements (tf_autoplace/testing/goldens.py says
which problems and settings); tests/test_placement_goldens.py checks the file.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tf_autoplace.testing import goldens  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata",
                   "placement_goldens.json")


def main():
    out = {}
    for problem_name, build in goldens.problems():
        problem = build()
        for placer_name in goldens.placer_names():
            devices = goldens.make_placer(placer_name).propose(problem, seed=0)
            out[f"{problem_name}/{placer_name}"] = goldens.placement_digest(devices)
            print(problem_name, placer_name, out[f"{problem_name}/{placer_name}"], flush=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
