"""The simulator: replay serving workloads through the cache and plan its capacity.

``kachedb-radix simulate`` (:mod:`kachedb_radix.spec.cli.simulate`) is the command; this package is
the machinery, one concept per module:

* :mod:`~kachedb_radix.spec.simulate.trace` -- requests and the mapping from tree blocks to tokens;
* :mod:`~kachedb_radix.spec.simulate.formats` -- the Mooncake and token trace formats, checked;
* :mod:`~kachedb_radix.spec.simulate.workload` -- the embedded, seeded chat-and-agent workload;
  :mod:`~kachedb_radix.spec.simulate.published` -- the published benchmarks' workloads
  (llm-d's, SGLang v0.4's router's), regenerated;
* :mod:`~kachedb_radix.spec.simulate.sequential`, :mod:`~kachedb_radix.spec.simulate.timed`
  -- the two modes;
* :mod:`~kachedb_radix.spec.simulate.plan` -- the capacity planner: models, GPUs and
  deployments, the service model (scheduler, memory, engine, step costs), its figures,
  the knee, the SLO, the planner's tables;
* :mod:`~kachedb_radix.spec.simulate.cluster` -- workers behind a router fed by their
  events, or learning at routing time;
* :mod:`~kachedb_radix.spec.simulate.prefix`, :mod:`~kachedb_radix.spec.simulate.bounds`
  -- infinite capacity and the offline Belady bound;
* :mod:`~kachedb_radix.spec.simulate.metrics`, :mod:`~kachedb_radix.spec.simulate.point`
  -- the figures, configurations and tasks at one capacity;
* :mod:`~kachedb_radix.spec.simulate.sweep`, :mod:`~kachedb_radix.spec.simulate.executors`,
  :mod:`~kachedb_radix.spec.simulate.run` -- which capacities, where tasks run, a whole
  simulation;
* :mod:`~kachedb_radix.spec.simulate.results` (and ``results.schema.json``),
  :mod:`~kachedb_radix.spec.simulate.summary`, :mod:`~kachedb_radix.spec.simulate.text`,
  :mod:`~kachedb_radix.spec.simulate.plots`, :mod:`~kachedb_radix.spec.simulate.report`,
  :mod:`~kachedb_radix.spec.simulate.progress` -- what a run writes and shows;
* :mod:`~kachedb_radix.spec.simulate.export` -- traces written back (token and Mooncake formats);
* :mod:`~kachedb_radix.spec.simulate.errors` -- the one error type, with line and field.
"""
