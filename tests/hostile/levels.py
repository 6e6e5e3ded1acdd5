"""What each isolation level stops: the expected outcome of every hostile case at every level.

Cases not listed for a level have the outcome written in cases.py (the root level's). docs/isolation.md
carries the same table for instructors; tests/test_isolation.py and tests/test_unprivileged.py assert it.

Level keys: ``root`` (root, cgroup v1 or v2), ``user`` (user namespace; as root on this machine it keeps the
cgroup v1 limits), ``user-rlimits`` (an ordinary account without a delegated cgroup), ``process`` (no
namespaces, as root: cgroup v1), ``process-rlimits`` (no namespaces, an ordinary account).
"""
from __future__ import annotations

import dataclasses

from .cases import CASES, Case

DIFFERENCES: dict[str, dict[str, dict]] = {
    "root": {},
    "user": {},
    # Landlock: listing the course root is refused (it is not hidden by a private root: it is unreadable)
    "process": {"read_solutions": {"outputs_contain": ("FOUND []", "PermissionError: [Errno 13] Permission denied")}},
    "user-rlimits": {},
    "process-rlimits": {"read_solutions": {"outputs_contain": ("FOUND []",
                                                                "PermissionError: [Errno 13] Permission denied")}},
}


def expected(case: Case, level: str) -> Case:
    return dataclasses.replace(case, **DIFFERENCES[level].get(case.name, {}))


assert all(name in {c.name for c in CASES} for diffs in DIFFERENCES.values() for name in diffs)
