"""The console command ``tf-autoplace`` (installed by ``pip install .``) and its subcommands,
one module each: :mod:`~tf_autoplace.cli.main` dispatches. The top layer of the package."""

import functools
import sys

from tf_autoplace.errors import AutoplaceError


def one_line_errors(run):
    """``run()`` as a command's absl ``main(argv)``: an AutoplaceError (bad settings, bad
    input) ends in one ``error:`` line and status 1, as every command says what is wrong."""
    @functools.wraps(run)
    def main(argv):
        del argv
        try:
            return run()
        except AutoplaceError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    return main
