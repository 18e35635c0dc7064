"""``python tools/train_gdp.py ...`` is ``tf-autoplace train-gdp ...``
(:mod:`tf_autoplace.cli.train_gdp`): kept because the shipped GDP policy's manifest records the command that made it with this path."""

import sys

from tf_autoplace.cli.main import main

if __name__ == "__main__":
    sys.exit(main([sys.argv[0], "train-gdp", *sys.argv[1:]]))
