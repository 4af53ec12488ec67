"""``python -m kachedb_radix.spec``: the ``kachedb-radix`` command line, without the console
script."""

import sys

from .cli.main import main

sys.exit(main())
