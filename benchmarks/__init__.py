"""kachedb-radix benchmarks: the pytest-benchmark suite (``bench_*.py``), the regression
gate (``python -m benchmarks.gate``), the match-latency plot (``python -m benchmarks.plot``)
and the flat hash-map index used as a peer baseline. See ``benchmarks/README.md``.
"""
