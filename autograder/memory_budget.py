"""Memory budgets: a graded test cell whose memory is decided outside the learner's process.

A test cell may declare, in the chapter's source notebook, a budget in MiB::

    "metadata": {"attention_course": {"memory_budget_mb": 96,
                                      "memory_budget_hint": "hold a few block x block tiles, never a row of scores"}}

The isolated engine (:mod:`autograder.isolation`) then does not run that cell in the notebook's job. It runs it
in a job of its own, a fresh fork of the zygote that runs only the notebook's setup cells, the learner's
solution cells and that one test cell, with ``Limits.memory_mb`` set to the budget. The limit is the kernel's,
not Python's: the cgroup's memory limit where the sandbox has a cgroup (the kernel is killed when it goes
past it), else ``RLIMIT_AS`` at the zygote's address space plus the budget (the allocation fails). Both are
set by the sandbox's monitor before any learner code runs, and neither can be raised from inside (a cgroup
is not the kernel's to write; an rlimit's hard value can only be lowered).

The budget itself earns nothing. The cell's points come, as everywhere, from value checks decided on the
trusted side (``close`` / ``matches_reference`` against values the learner's process never sees); such a
check can only pass if the call that computes the value finished under the budget. So the test calls the
learner's function at a size where the naive computation needs several times the budget and a correct one
needs a small part of it. A cell whose job was stopped, or whose checks could not run, loses its points and
its feedback says it ran under a budget (:func:`note`).

Under stock ``nbgrader autograde`` there is no sandbox: the cell runs in the notebook's kernel, with no
limit, and whatever in-process observation the test makes (chapter 9 watches every tensor an operator
creates) is what decides. That observation is a claim (the learner's code could switch it off); the budget
is not.

This module owns the metadata key, how a budget job is planned from a notebook's cells and how its report
is folded back into the notebook's report. The engine owns running jobs.

A budget's job may start no process and no program (``Limits.processes`` is False in :func:`limits_for`; the
sandbox's seccomp filter refuses ``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``, ``execve`` and
``execveat``, at every level): an rlimit holds per process, so without this a fresh Python or a fork would compute
what the budget forbids under a budget of its own (issue 41). The attempt fails in the cell with a
``PermissionError``, and the cell's feedback says processes cannot be started there.
"""
from __future__ import annotations

import secrets
from dataclasses import replace

from attention_course.cells import grade_id, is_graded_test, is_setup, is_solution
from attention_course.language import N_

from .class_language import tr

KEY = "attention_course"
BUDGET = "memory_budget_mb"
HINT = "memory_budget_hint"


def budget_of(cell) -> float | None:
    """The cell's memory budget in MiB, or None (only graded test cells may have one)."""
    if not is_graded_test(cell):
        return None
    meta = cell.get("metadata", {}).get(KEY, {}) or {}
    value = meta.get(BUDGET)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"test cell {grade_id(cell)}: {KEY}.{BUDGET} must be a positive number of MiB")
    return float(value)


def budgets(nb) -> dict[str, dict]:
    """``{grade_id: {"mb": budget, "hint": text}}`` for every test cell of ``nb`` (the chapter's source, never a
    submission) that declares a budget."""
    out = {}
    for cell in nb.cells:
        mb = budget_of(cell)
        if mb is not None:
            out[grade_id(cell)] = {"mb": mb, "hint": str((cell.metadata.get(KEY) or {}).get(HINT, ""))}
    return out


def draw(budget_ids) -> dict[str, int]:
    """A fresh random seed for each budget cell, drawn when the grader builds the chapter's reference profile. The
    cell draws the sizes it runs at from it (``attention_course.checks.grading_seed``), the profile records it, and
    every notebook's budget job is given the same seed, so the reference values are for the same sizes. Neither the
    notebook nor the release holds it: a learner's function cannot single out the sizes it is graded at."""
    return {gid: secrets.randbits(31) for gid in budget_ids}


def limits_for(limits, mb: float):
    """The notebook's limits with the memory limit lowered to the budget (a budget never raises it), in a job
    that may start no process or program (``processes=False``: a child would have a budget of its own) and whose
    allocator returns freed blocks to the operating system at once (``release_freed_memory``: the budget counts
    what the notebook holds, not what glibc's heap kept; autograder/sandbox/policy.py allocator_options)."""
    return replace(limits, memory_mb=int(min(float(limits.memory_mb), mb)), processes=False, release_freed_memory=True)


def plan(nb, cells: list[dict], budget_ids: dict[str, dict]) -> tuple[list[dict], list[tuple[str, dict, list[dict]]]]:
    """Split a job's cells (entries of ``Engine._cells_to_run``) into the notebook's job, without the budget
    cells, and one job per budget cell: the setup and solution cells that come before it, then the cell.

    Returns ``(main_cells, [(grade_id, budget, cells), ...])``."""
    kind = {i: c for i, c in enumerate(nb.cells)}
    main, jobs = [], []
    for entry in cells:
        gid = entry.get("grade_id") if entry.get("test") else None
        if gid in budget_ids:
            before = [e for e in cells if e["index"] < entry["index"] and not e.get("test")
                      and (is_setup(kind[e["index"]]) or is_solution(kind[e["index"]]))]
            jobs.append((gid, budget_ids[gid], before + [entry]))
        else:
            main.append(entry)
    return main, jobs


def merge(report: dict, index: int, budget: dict, job_report: dict) -> str | None:
    """Put the budget job's outputs for the test cell at ``index`` into the notebook's ``report``. Returns the
    note to add to the cell's feedback when that job did not finish (None when it did)."""
    cells = report.setdefault("cells", {})
    if job_report.get("status") == "ok":
        got = (job_report.get("cells") or {}).get(str(index))
        if isinstance(got, dict):
            cells[str(index)] = got
        return None
    cells[str(index)] = {"outputs": [], "execution_count": None}
    reason = str(job_report.get("reason", ""))
    sentence = (N_("this test went past its memory budget of {mb} MiB and was stopped{peak}") if "out of memory" in reason
                else N_("this test did not finish (it runs alone, under a memory budget of {mb} MiB{peak})"))
    return _with_hint(tr(sentence, mb=f"{budget['mb']:g}", peak=peak(job_report)), budget)


def _with_hint(text: str, budget: dict) -> str:
    return tr("{note}: {hint}", note=text, hint=budget["hint"]) if budget["hint"] else text


def peak(job_report: dict) -> str:
    """What the budget's memory cgroup saw the job hold at most, as a clause of the feedback ("" where there was no
    cgroup to ask). It counts every page the job touched: Python, PyTorch and the setup cells (about 25 MiB for
    chapter 9's reference job, its tiles included) as well as the test's calls."""
    value = job_report.get("memory_peak_mb")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return ""
    return tr(" (the job's peak, counted by its memory cgroup: {peak} MiB, Python and PyTorch included)",
              peak=f"{value:.1f}")


def refused_a_process(job_report: dict, index: int) -> bool:
    """Did the budget cell at ``index`` stop on a process or program the job's seccomp filter refused (a
    ``PermissionError`` with EPERM)? Read from the kernel's report, which the learner's code can forge: it only
    chooses which of two fixed lines the learner is shown (:func:`note`)."""
    cell = (job_report.get("cells") or {}).get(str(index))
    outputs = cell.get("outputs") if isinstance(cell, dict) else None
    return any(isinstance(o, dict) and o.get("output_type") == "error" and o.get("ename") == "PermissionError"
               and "[Errno 1]" in str(o.get("evalue", "")) for o in (outputs if isinstance(outputs, list) else ()))


def note(budget: dict, refused: bool = False) -> str:
    """The feedback line of a budget cell that lost its points while its job finished (an allocation over the
    budget raises inside the kernel where there is no cgroup; a new process or program is refused at every
    level: ``refused``, :func:`refused_a_process`)."""
    sentence = (N_("this test runs under a memory budget of {mb} MiB, in one process: it cannot start processes or "
                   "programs (the notebook tried, and was refused)") if refused
                else N_("this test runs under a memory budget of {mb} MiB"))
    return _with_hint(tr(sentence, mb=f"{budget['mb']:g}"), budget)


# -- where a budget is proven ---------------------------------------------------------------------------------
# A budget is proven only by a memory cgroup, which charges the pages a job touches. Without one the limit is
# RLIMIT_AS, which counts address space, and a process can free address space inside itself: an independent
# examination (issue 41) unmapped libtorch's 325 MB of code in chapter 9's tiled_attention, built the whole
# 256 MiB score table in NumPy, freed it and mapped the code back, and kept both budget cells' points at the user
# and process levels as an ordinary account (36/36 against 32/36; at the root level, with a cgroup, 32/36). So
# where the sandbox has no cgroup a budget cell earns nothing: its checks still run and their messages are shown
# (the learner learns whether the values are right), and the instructor is told which points were withheld.
def proven(isolation: dict) -> bool:
    """Whether the sandbox level described by ``isolation`` (``levels.describe``: its ``cgroup`` backend) holds a
    memory budget from outside the learner's process."""
    return str(isolation.get("cgroup") or "none") != "none"


def not_proven(budget: dict, label: str) -> str:
    """The learner's line for a budget cell whose points are withheld (the grader's own words only)."""
    return tr("not awarded here: this test's memory budget of {mb} MiB can only be proven under a memory cgroup, and "
              "this grader runs without one (isolation: {label}); your instructor can regrade it where one exists",
              mb=f"{budget['mb']:g}", label=label)


def withhold(cells: list, notes: dict[str, dict], label: str) -> tuple[list, str | None]:
    """Budget cells scored 0 with :func:`not_proven` first in their messages, and the instructor's flag naming the
    cells and points withheld (None when no budget cell had points to withhold). ``cells`` are CellResults."""
    out, withheld = [], []
    for cell in cells:
        info = notes.get(cell.grade_id)
        if info is not None:
            if cell.score:
                withheld.append(f"{cell.grade_id} ({cell.score:g} of {cell.max_score:g})")
            cell = replace(cell, passed=False, score=0.0, messages=(not_proven(info["budget"], label), *cell.messages))
        out.append(cell)
    flag = None
    if withheld:
        flag = ("memory-budget points withheld: this sandbox has no memory cgroup, so a budget is not proven "
                f"(isolation: {label}): " + ", ".join(withheld))
    return out, flag
