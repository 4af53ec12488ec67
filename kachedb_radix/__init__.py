"""kachedb-radix command line: the demo, the conformance kit and the benchmarks' front door."""
