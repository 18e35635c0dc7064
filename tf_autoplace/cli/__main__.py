"""``python -m tf_autoplace.cli COMMAND ...``: the ``tf-autoplace`` command from a checkout."""

import sys

from tf_autoplace.cli.main import main

sys.exit(main())
