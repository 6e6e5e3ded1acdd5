"""What each isolation level stops: the expected outcome of every hostile case at every level.

Cases not listed for a level have the outcome written in cases.py (the root level's). docs/isolation.md
carries the same table for instructors; tests/test_isolation.py and tests/test_unprivileged.py assert it.

Level keys: ``root`` (root, cgroup v1 or v2), ``user`` (user namespace; as root on this machine it keeps the
cgroup v1 limits), ``user-rlimits`` (an ordinary account without a delegated cgroup), ``process`` (no
namespaces, as root: cgroup v1), ``process-rlimits`` (no namespaces, an ordinary account).
"""
from __future__ import annotations

import dataclasses

from .cases import CASES, FULL, Case

# No cgroup: the allocation or the fork fails inside the learner's cell (RLIMIT_AS, RLIMIT_NPROC) instead of
# the kernel being killed; the rest of the notebook runs and is graded (here: the reference, full marks).
# Nothing outlives the notebook either way (tests/test_unprivileged.py checks the account has no process left).
RLIMITS = {
    "memory_bomb": {"status": "graded", "score": FULL, "reason": "",
                    "outputs_contain": ("DefaultCPUAllocator: can't allocate memory",)},
    "fork_bomb": {"status": "graded", "score": FULL, "reason": "", "outputs_contain": ("BlockingIOError",)},
}

DIFFERENCES: dict[str, dict[str, dict]] = {
    "root": {},
    # (the user level run by root once read /etc/shadow: its namespace's root is host uid 0. Only the files of
    # policy.ETC_READABLE are bound now, so it asserts the same probe output as the root level.)
    "user": {},
    # Landlock: listing the course root is refused (it is not hidden by a private root: it is unreadable)
    "process": {"read_solutions": {"outputs_contain": ("FOUND []", "PermissionError: [Errno 13] Permission denied")}},
    "user-rlimits": dict(RLIMITS),
    "process-rlimits": {**RLIMITS, "read_solutions": {"outputs_contain": ("FOUND []",
                                                                           "PermissionError: [Errno 13] Permission denied")}},
}


def expected(case: Case, level: str) -> Case:
    return dataclasses.replace(case, **DIFFERENCES[level].get(case.name, {}))


assert all(name in {c.name for c in CASES} for diffs in DIFFERENCES.values() for name in diffs)
