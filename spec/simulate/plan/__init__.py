"""The capacity planner: what turns a replay into GiB, GPUs, TTFT and throughput.

``kachedb-radix simulate`` replays a workload through the cache
(:mod:`kachedb_radix.spec.simulate`); with a model and GPUs, this package prices what
the replay did and says what a deployment needs, one concept per module:

* :mod:`.models` -- a model's dimensions: KV bytes a token, FLOPs, weights (presets,
  a shape, or a Hugging Face ``config.json``);
* :mod:`.hardware` -- GPU classes from their datasheets, a deployment of a model on
  workers of GPUs, and sizes: blocks to GiB and GPUs and back;
* :mod:`.service` -- the scheduler's parameters (vLLM's): batch and token budgets, the
  fixed cost of a request outside the GPU;
* :mod:`.memory` -- the KV pool a worker's running requests hold: the cache's tree, or
  a counter of blocks for the no-cache baseline, with the same admission;
* :mod:`.cost` -- what an engine step costs: a roofline of compute and memory;
* :mod:`.engine` -- one worker run step by step: admission, chunked prefill, decode,
  preemption;
* :mod:`.figures` -- a timed run's service figures: TTFT and TPOT percentiles (after a
  warm-up, per load stage), the makespan and tokens a second, the offered load;
* :mod:`.knee`, :mod:`.slo` -- the pool a hit-ratio curve needs, and the load an SLO
  allows;
* :mod:`.report` -- the planner's tables and warnings.
"""
