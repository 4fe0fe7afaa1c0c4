"""``python -m cadence_harness`` is ``cadence-bench``."""

import sys

from cadence_harness.cli import main

sys.exit(main())
