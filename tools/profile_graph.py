"""``python tools/profile_graph.py ...`` is ``tf-autoplace profile ...``
(:mod:`tf_autoplace.cli.profile`): kept so that commands written with this path still run from a checkout."""

import sys

from tf_autoplace.cli.main import main

if __name__ == "__main__":
    sys.exit(main([sys.argv[0], "profile", *sys.argv[1:]]))
