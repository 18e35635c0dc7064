"""``python tools/train_placeto.py ...`` is ``tf-autoplace train-placeto ...``
(:mod:`tf_autoplace.cli.train_placeto`): kept so that a command recorded with this path, as the
shipped policy's manifest records it, still runs from a checkout."""

import sys

from tf_autoplace.cli.main import main

if __name__ == "__main__":
    sys.exit(main([sys.argv[0], "train-placeto", *sys.argv[1:]]))
