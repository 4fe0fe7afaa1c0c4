"""cadence-harness: benchmark speed-up methods on torchvision, timm and HuggingFace models, logged to MLflow.

The command line is ``cadence-bench`` (or ``python -m cadence_harness``): ``run``, ``grid``,
``report`` and ``demo``. Modules, one job each: `recipe` (TOML recipes, validated), `data`
(datasets by name), `loaders` (device-resident batches), `models` (models by name), `timing`
(the training clock), `run` (one run), `grid` (many runs, one process each), `report` and
`stats` (tables, intervals, plots), `cards` (method-card Results).
"""

__version__ = "0.1.0"
