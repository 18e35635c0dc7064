"""Child process for tests/test_fuzz.py: runs fuzz cases and prints one JSON line per case.

Before a case it prints ``{"start": i}`` (flushed), after it the case's result, so a parent
whose child died (an abort in C++ code) can name the case that killed it.

    python tests/fuzz_child.py SEED FIRST COUNT [all]

With ``all``, cases also use the learned placer (``fuzz.ALL_PLACERS``), which compiles its
policy once: seconds.
"""

import json
import sys

from tf_autoplace.testing import fuzz


def main(seed: int, first: int, count: int, placers=fuzz.PLACERS) -> None:
    for index in range(first, first + count):
        print(json.dumps({"start": index}), flush=True)
        case = fuzz.make_case(seed, index, placers)
        print(json.dumps(fuzz.run_case(case)), flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]),
         placers=fuzz.ALL_PLACERS if sys.argv[4:] == ["all"] else fuzz.PLACERS)
