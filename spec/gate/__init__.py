"""The performance gate: ``kachedb-radix gate TARGET --baseline FILE``.

It times the standard cases (:mod:`kachedb_radix.spec.gate.cases`: match by shape and length,
insert, the request cycle, the first eviction after a fill; memory per block and the block pool's
host side where they apply) on any conformance target (:mod:`kachedb_radix.spec.gate.trees`),
normalises each figure by the anchor loop of its kind timed between its rounds
(:mod:`kachedb_radix.spec.gate.timing`), compares with the target's baseline file and its limits
(:mod:`kachedb_radix.spec.gate.verdicts`), re-measures failures once
(:mod:`kachedb_radix.spec.gate.run`), prints one table and exits 1 on a regression.  The command
line is :mod:`kachedb_radix.spec.cli.gate`.
"""
