"""The radix tree, both twins by parameter: tokens, allocator, match, insert, split, pins,
eviction, namespaces, bad input, clone, the model test.
"""
