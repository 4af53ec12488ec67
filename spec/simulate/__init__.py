"""The simulator: replay serving workloads through the cache and plan its capacity.

``kachedb-radix simulate`` (:mod:`kachedb_radix.spec.cli.simulate`) is the command; this package is
the machinery, one concept per module:

* :mod:`~kachedb_radix.spec.simulate.trace` -- requests and the mapping from tree blocks to tokens;
* :mod:`~kachedb_radix.spec.simulate.formats` -- the Mooncake and token trace formats, checked;
* :mod:`~kachedb_radix.spec.simulate.workload` -- the embedded, seeded chat-and-agent workload;
* :mod:`~kachedb_radix.spec.simulate.sequential`, :mod:`~kachedb_radix.spec.simulate.timed`,
  :mod:`~kachedb_radix.spec.simulate.service` -- the two modes and the timed mode's service model;
* :mod:`~kachedb_radix.spec.simulate.prefix`, :mod:`~kachedb_radix.spec.simulate.bounds`
  -- infinite capacity and the offline Belady bound;
* :mod:`~kachedb_radix.spec.simulate.metrics`, :mod:`~kachedb_radix.spec.simulate.point`
  -- the figures at one capacity;
* :mod:`~kachedb_radix.spec.simulate.sweep`, :mod:`~kachedb_radix.spec.simulate.executors`,
  :mod:`~kachedb_radix.spec.simulate.run` -- which capacities, where they run, a whole simulation;
* :mod:`~kachedb_radix.spec.simulate.results` (and ``results.schema.json``),
  :mod:`~kachedb_radix.spec.simulate.summary`, :mod:`~kachedb_radix.spec.simulate.plots`,
  :mod:`~kachedb_radix.spec.simulate.progress` -- what a run writes and shows;
* :mod:`~kachedb_radix.spec.simulate.export` -- traces written back (token and Mooncake formats);
* :mod:`~kachedb_radix.spec.simulate.errors` -- the one error type, with line and field.
"""
