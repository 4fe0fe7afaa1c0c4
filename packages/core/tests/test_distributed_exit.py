"""`exit_without_finalization`: a torchrun worker runs its exit handlers, then leaves before the interpreter's
finalisation (where a C++ thread of the distributed stack can abort a finished run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = """
import atexit, sys
from pathlib import Path
from cadence.distributed import exit_without_finalization

out = Path(sys.argv[1])

class FinalisedLast:
    def __del__(self):  # runs only when the interpreter tears its modules down
        (out / "finalised").write_text("yes")

keep = FinalisedLast()
atexit.register(lambda: (out / "exit_handler").write_text("ran"))
print("printed before leaving", end="")  # unflushed: must still reach the pipe
exit_without_finalization(3)
"""


def test_exit_handlers_run_output_is_flushed_and_finalisation_is_skipped(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 3
    assert result.stdout == "printed before leaving"
    assert (tmp_path / "exit_handler").read_text() == "ran"
    assert not (tmp_path / "finalised").exists()


def test_without_it_the_same_object_is_finalised(tmp_path: Path) -> None:
    """The control: a plain exit does finalise, so the test above tells the two apart."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("exit_without_finalization(3)", "sys.exit(3)"))
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 3 and (tmp_path / "finalised").read_text() == "yes"
