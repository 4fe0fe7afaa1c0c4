"""Method packages used only by the harness tests, one module per method (each its own entry point):
`explode` crashes its run on purpose, `tuples_only` refuses dict batches, `count` counts its constructions.

They are found through the same entry point group as real methods (``cadence.methods``), via the
``.dist-info`` folder next to this package, when its folder is on ``sys.path`` / ``PYTHONPATH``.
"""
