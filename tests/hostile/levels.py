"""What each isolation level stops: the expected outcome of every hostile case at every level.

Cases not listed for a level have the outcome written in cases.py (the root level's). docs/isolation.md
carries the same table for instructors; tests/test_isolation.py and tests/test_unprivileged.py assert it, each case
at every level except the level-independent ones (LEVEL_INDEPENDENT), which are graded at the root level only.

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


# The level every case is graded at: the fullest (namespaces, cgroup, Landlock, seccomp).
FULLEST = "root"

# The cases no isolation level can change, graded at FULLEST only. The rule: a case is level-independent only when
# its notebook uses no OS resource the levels confine (files, the network, processes, memory, clocks and signals,
# IPC, pipes and descriptors, /proc, the environment, links) and only rebinds Python names, builds objects and
# prints or displays small outputs, or when the file is refused before any kernel starts (what decides it runs on
# the trusted side, the same code at every level). What the levels differ in is the kernel's jail; these cases'
# outcomes are decided by the trusted side's reading of the records and the file, which no jail changes.
# tests/test_isolation.py (test_level_independent_cases_touch_nothing_a_level_confines) fails a case listed here
# whose own code names an OS resource. When in doubt a case stays at every level: exfiltrate_hidden_source
# (linecache may read a file), recorder_forwarding (reads the environment), forged_exception (its outcome is the
# kernel's death), print_100mb (100 MB through the kernel's memory), the three links and the FIFO (what the
# engine opens). To grade one of these at every level again, remove it from this set.
LEVEL_INDEPENDENT = frozenset({
    # Python-level cheats: decided by the trusted side's reading of the check records
    "sys_exit", "patch_numpy_torch", "patch_builtins", "rigged_eq", "tensor_subclass", "fake_records",
    "check_library_swap", "recorder_tamper", "dtype_bent", "pre_run_cell_exfiltration", "empty_answer",
    # the structure repair (trusted side) restores the test cells before the kernel starts
    "edited_test_cell", "deleted_test_cell", "duplicated_grade_id",
    # outputs the trusted side cleans (small: the cap is proven by print_100mb at every level)
    "deep_json_output", "lone_surrogate_output", "active_outputs", "warning",
    # refused or repaired by the trusted side before any kernel starts
    "malformed_json", "empty_file", "wrong_file_name", "not_a_notebook", "hostile_file", "deep_file",
    "json_too_deep_to_read", "node_bomb", "not_utf8",
    # the reference, graded under a hostile id: the id never enters the sandbox (autograder/sandbox has no student)
    "hostile_student_id",
})


def graded_at(case: Case, level: str) -> bool:
    """Whether the suite grades ``case`` at ``level``: a level-independent case at FULLEST only, any other at every
    level (and user-rlimits/process-rlimits, the ordinary account's, are levels like the others)."""
    return level == FULLEST or case.name not in LEVEL_INDEPENDENT


def expected(case: Case, level: str) -> Case:
    return dataclasses.replace(case, **DIFFERENCES[level].get(case.name, {}))


assert all(name in {c.name for c in CASES} for diffs in DIFFERENCES.values() for name in diffs)
assert LEVEL_INDEPENDENT <= {c.name for c in CASES}
# a case whose outcome differs between levels is level-dependent by definition
assert not LEVEL_INDEPENDENT & {name for diffs in DIFFERENCES.values() for name in diffs}
