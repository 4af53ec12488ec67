"""Helpers the tests share (not tests themselves): trees, twins, the brute-force model, the soak,
block pools, fake CuPy, traces.
"""
