"""The performance gate and the benchmarks' flat-index baseline."""
