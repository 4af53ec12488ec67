"""The KV block pool, both twins (NumPy and CuPy) by parameter: layout arithmetic, the shared
contract, the GPU path and its CPU fake.
"""
