"""``python -m cadence_harness`` is ``cadence-bench``."""

import signal
import sys

if sys.argv[1:2] == ["worker"]:
    # A grid stops its workers with SIGINT (`running.runners.Interruption`). A grid started with SIGINT ignored
    # (a script's background job: POSIX shells ignore it there) passes that on, and Python leaves an inherited
    # SIGINT ignored, so `kill GRID_PID` would let the running run go on to its end. A worker takes SIGINT back
    # here, before the seconds of imports below, so that a stop sent while it starts is not lost.
    signal.signal(signal.SIGINT, signal.default_int_handler)

from cadence_harness.cli import main  # after the signal, on purpose: its imports take seconds

sys.exit(main())
