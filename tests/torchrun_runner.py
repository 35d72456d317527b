"""Running `torchrun --nproc_per_node=2 -m xdex train ...` from a test (gloo, one OpenMP thread per process).

A rank that dies by a signal (a crash inside a native library, not an error of xdex's, which exits with a message
and status 1) is reported with the Python stack that ``faulthandler`` prints, as a warning in the test summary, and
the run is made once more in a fresh folder: a rare crash of that kind was seen about once in a hundred two-process
runs on a loaded 2-core machine, always inside a refresh of the training loop, and never reproduced under a
debugging allocator. Any other failure, or a second crash, fails the test with the end of the output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

# torchrun's summary of a rank that a signal ended, e.g. "exitcode  : -11 (pid: 462)"
_KILLED = re.compile(r"exitcode\s*:\s*-\d+ \(pid")
_DUMP_LINES = 40


def torchrun_train(args: list[str], out: Path, timeout: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run ``xdex train ARGS --out OUT`` on two processes; the finished run and the folder it wrote."""
    for attempt in (1, 2):
        folder = out if attempt == 1 else out.with_name(out.name + "-again")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "xdex",
               "train", *args, "--out", str(folder)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if run.returncode == 0 or attempt == 2 or not _KILLED.search(run.stderr):
            break
        warnings.warn(f"a rank of the two-process run was ended by a signal; running it again:\n"
                      f"{_fault_dump(run.stderr)}", RuntimeWarning, stacklevel=2)
    assert run.returncode == 0, _fault_dump(run.stderr) + "\n...\n" + run.stderr[-3000:]
    return run, folder


def _fault_dump(stderr: str) -> str:
    """The lines faulthandler and the C library wrote about a crash (or nothing)."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error") or "malloc" in line]
    return "\n".join(lines[starts[0] : starts[0] + _DUMP_LINES]) if starts else ""
