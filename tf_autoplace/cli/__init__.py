"""The console command ``tf-autoplace`` (installed by ``pip install .``) and its subcommands,
one module each: :mod:`~tf_autoplace.cli.main` dispatches. The top layer of the package."""
