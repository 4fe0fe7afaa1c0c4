"""``python -m cadence_mlflow import <spill_dir> --tracking-uri <uri>``."""

import sys

from cadence_mlflow.importer import main

sys.exit(main())
