"""The sandbox that runs one learner's notebook: a warm zygote, a fresh fork per notebook, Linux isolation.

Process tree (``python -m autograder.sandbox`` is the zygote; :class:`autograder.isolation.Engine` starts it)::

    Engine (trusted: decides, repairs structure, talks to the gradebook's writer)
      └─ zygote (zygote.py): has imported torch, numpy, matplotlib, IPython and attention_course; runs no
         learner code; probes the isolation level once (levels.py)
          └─ monitor (monitor.py, one per notebook): builds the sandbox, enforces the wall clock, reports
              └─ kernel (runner.py): executes the notebook's code cells, inside the jail

One module per concern:

- ``framing``: the length-prefixed JSON frames on every pipe (never pickle, size-capped on raw bytes at every hop);
- ``sysv``: System V IPC objects of a sandbox uid, removed after each sandbox;
- ``runner``: the kernel's cell runner (captured IPython shell, check recorders, per-cell timeout, seeding);
- ``policy``: the jail as data (levels, binds, rlimits, environment) and the named steps of each level;
- ``jail``: one function per step (namespaces, private root, uid, capabilities, rlimits, Landlock, seccomp);
- ``cgroups``: resource-limit backends: cgroup v1, cgroup v2, none;
- ``seccomp``, ``landlock``, ``syscalls``: the kernel interfaces, through ctypes;
- ``levels``: which level this account reaches here, and what it lacks;
- ``monitor``, ``zygote``: the two process roles above the kernel.

The isolation levels and what each stops are in docs/isolation.md.
"""
from .framing import (ProtocolError, decode_result, read_exact, read_frame, read_raw_frame,  # noqa: F401
                      write_frame)
from .monitor import INTERFERED, read_report, result_cap  # noqa: F401
from ..learner_text import one_line  # noqa: F401
