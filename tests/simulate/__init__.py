"""kachedb-radix simulate: trace formats, the workload generator, engines, bounds, the command
line, Ray.
"""
