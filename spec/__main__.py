"""``python -m spec``: the ``kachedb-radix`` command line, without the console script."""

import sys

from spec.cli import main

sys.exit(main())
