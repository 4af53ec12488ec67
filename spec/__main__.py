"""``python -m kachedb_radix.spec``: the ``kachedb-radix`` command line, without the console
script."""

import sys

from kachedb_radix.spec.cli import main

sys.exit(main())
