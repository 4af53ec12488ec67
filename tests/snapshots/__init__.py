"""Snapshots and reader epochs, both twins by parameter: versions, quarantine, threads, leaks, the
soak.
"""
