"""The peak resident memory of a command, measured so that its caller's size does not count.

Linux carries a process's ``ru_maxrss`` over a fork and an exec: a command started by pytest (hundreds of MB,
torch imported) reports at least pytest's size, and a child started by an 80 MB process at least 80 MB. So the
command is started by a launcher that is itself small (``python -S``, no imports) and forks: ``os.wait4`` then
gives the peak of the command and its descendants alone, above the launcher's few MB. A process's own peak,
``VmHWM`` in ``/proc/self/status`` (:data:`VMHWM`), is also exact: it belongs to the address space an exec makes.
Used by tests/test_intake.py and benchmarks/intake_memory.py.
"""
from __future__ import annotations

import subprocess
import sys

LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\npeak-kb {usage.ru_maxrss} status {status}\\n")
"""

# Python source for a measured program: its own peak resident memory in bytes, exact (see above).
VMHWM = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1]) * 1024"


def peak(cmd: list, cwd=None) -> tuple[bytes, int]:
    """(stdout of ``cmd``, its peak resident memory in bytes, descendants included)."""
    done = subprocess.run([sys.executable, "-S", "-c", LAUNCH, *cmd], capture_output=True, cwd=cwd)
    last = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1].split()
    if last[:1] != ["peak-kb"] or done.returncode != 0:
        raise RuntimeError(f"measuring {cmd[:3]} failed: {done.stderr[-2000:]!r}")
    return done.stdout, int(last[1]) * 1024
