"""A child that dies with the process that started it, even when that process is killed with SIGKILL: grading
workers, and the ``nbgrader collect`` a collection runs, must not outlive a killed ``grade`` or ``serve`` (a
survivor would go on writing ``grading/submitted/`` beside the restarted one)."""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Linux: SIGKILL this process when its parent dies. With ``parent_pid``, also exit at once when the parent
    died before this call (the signal is only sent for a death after it). Usable as ``preexec_fn``."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(0)
