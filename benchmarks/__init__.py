"""kachedb-radix benchmarks: the pytest-benchmark suite (``bench_*.py``), the project's
gate baselines (``baseline-*.json``, for ``kachedb-radix gate``), the match-latency plot
(``python -m benchmarks.plot``) and the flat hash-map index used as a peer baseline. See
``benchmarks/README.md``.
"""
