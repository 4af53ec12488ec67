"""The ``kachedb-radix`` command line (also ``python -m kachedb_radix.spec``).

One subcommand per tool, each in its own module of this package, registered by
:mod:`kachedb_radix.spec.cli.main`: ``demo`` (:mod:`.demo`, the teaching scenario),
``conform`` and ``replay`` (:mod:`.conform`, the conformance kit), ``explain``
(:mod:`.explain`), ``simulate`` (:mod:`.simulate`), ``gate`` (:mod:`.gate`), ``serve``
(:mod:`.serve`, the stdio server). Exit status: 0 success, 1 a finding (a
disagreement, a regression), 2 a usage error. Nothing is imported here, so a module of
the package (the demo's scenario, which ``explain`` also shows) can be used alone.
"""
