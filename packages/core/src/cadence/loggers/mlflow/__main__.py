"""``python -m cadence.loggers.mlflow import <spill_dir> --tracking-uri <uri>``."""

import sys

from cadence.loggers.mlflow.spill import main

sys.exit(main())
