"""The conformance kit: lockstep, oracle, safety, profiles, rule ids, search, shrinking, targets,
vectors, mutants, real peers.
"""
