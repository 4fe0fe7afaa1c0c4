"""Benchmarks that print ratios measured side by side in one process (never timed tests).

``python -m cadence_harness.benchmarks`` (``make bench``) runs them all.
"""
