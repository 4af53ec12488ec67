"""The C twin's own tests: its compiled types, snapshots, leaks, the differential test against the
reference and the fuzz harness.
"""
