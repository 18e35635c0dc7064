"""``python tools/fidelity.py ...`` is ``tf-autoplace fidelity ...``
(:mod:`tf_autoplace.cli.fidelity`): kept so that commands written with this path still run from a checkout."""

import sys

from tf_autoplace.cli.main import main

if __name__ == "__main__":
    sys.exit(main([sys.argv[0], "fidelity", *sys.argv[1:]]))
