"""The simulator: replay serving workloads through the cache and plan its capacity.

``kachedb-radix simulate`` (:mod:`spec.cli.simulate`) is the command; this package is
the machinery, one concept per module:

* :mod:`~spec.simulate.trace` -- requests and the mapping from tree blocks to tokens;
* :mod:`~spec.simulate.formats` -- the Mooncake and token trace formats, checked;
* :mod:`~spec.simulate.workload` -- the embedded, seeded chat-and-agent workload;
* :mod:`~spec.simulate.sequential`, :mod:`~spec.simulate.timed`,
  :mod:`~spec.simulate.service` -- the two modes and the timed mode's service model;
* :mod:`~spec.simulate.prefix`, :mod:`~spec.simulate.bounds` -- infinite capacity
  and the offline Belady bound;
* :mod:`~spec.simulate.metrics`, :mod:`~spec.simulate.point` -- the figures at one
  capacity;
* :mod:`~spec.simulate.sweep`, :mod:`~spec.simulate.executors`,
  :mod:`~spec.simulate.run` -- which capacities, where they run, a whole simulation;
* :mod:`~spec.simulate.results` (and ``results.schema.json``),
  :mod:`~spec.simulate.report`, :mod:`~spec.simulate.plots`,
  :mod:`~spec.simulate.progress` -- what a run writes and shows;
* :mod:`~spec.simulate.export` -- traces written back (token and Mooncake formats);
* :mod:`~spec.simulate.errors` -- the one error type, with line and field.
"""
