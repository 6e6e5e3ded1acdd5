"""Memory budgets (autograder/memory_budget.py): which cells have one, how a budget job is planned from a
notebook's cells, and how its report is folded back. The kernel-enforced limit itself is exercised through the
engine by chapter 9's catalogue (tests/test_catalogues.py: query-only tiling loses the memory cell), and for the whole
process tree by tests/test_ch9_cheats.py (the score table computed in another process loses it at every level)."""
from __future__ import annotations

from dataclasses import asdict

import nbformat
import pytest

from attention_course.cells import cell_seed
from autograder import memory_budget
from autograder.isolation import Limits
from autograder.sandbox import policy

pytestmark = pytest.mark.unit


def _nb(budget=64):
    setup = nbformat.v4.new_code_cell("import torch", metadata={"tags": ["setup"]})
    sol = nbformat.v4.new_code_cell("def f(): pass", metadata={"nbgrader": {"solution": True, "grade_id": "f"}})
    demo = nbformat.v4.new_code_cell("big = 1")
    plain = nbformat.v4.new_code_cell("check", metadata={"nbgrader": {"grade": True, "grade_id": "t1", "points": 1}})
    budgeted = nbformat.v4.new_code_cell("check", metadata={
        "nbgrader": {"grade": True, "grade_id": "t2", "points": 2},
        memory_budget.KEY: {memory_budget.BUDGET: budget, memory_budget.HINT: "use tiles"}})
    later = nbformat.v4.new_code_cell("def g(): pass", metadata={"nbgrader": {"solution": True, "grade_id": "g"}})
    return nbformat.v4.new_notebook(cells=[setup, sol, demo, plain, budgeted, later])


def test_budgets_come_from_test_cells_and_bad_values_are_refused():
    assert memory_budget.budgets(_nb()) == {"t2": {"mb": 64.0, "hint": "use tiles"}}
    for bad in (0, -5, "64", True):
        with pytest.raises(ValueError, match="memory_budget_mb"):
            memory_budget.budgets(_nb(bad))


def test_plan_runs_a_budget_cell_alone_with_the_setup_and_solutions_before_it():
    nb = _nb()
    cells = [{"index": i, "code": c.source} for i, c in enumerate(nb.cells)]
    cells[3].update(test=True, grade_id="t1")
    cells[4].update(test=True, grade_id="t2")
    main, jobs = memory_budget.plan(nb, cells, memory_budget.budgets(nb))
    assert [e["index"] for e in main] == [0, 1, 2, 3, 5]
    [(gid, budget, job)] = jobs
    assert gid == "t2" and budget["mb"] == 64.0
    assert [e["index"] for e in job] == [0, 1, 4]  # no demo, no other test, nothing after it


def test_limits_for_lowers_the_memory_limit_and_refuses_new_processes():
    lowered = memory_budget.limits_for(Limits(memory_mb=2048, cell_timeout_s=30), 64)
    assert lowered.memory_mb == 64 and lowered.cell_timeout_s == 30
    assert memory_budget.limits_for(Limits(memory_mb=32), 64).memory_mb == 32
    # an rlimit holds per process: a child would have a budget of its own (the seccomp step refuses it)
    assert Limits().processes and not lowered.processes
    # glibc's heap keeps freed pages that a budget's cgroup counts: a budget job returns them at once
    assert lowered.release_freed_memory and not Limits().release_freed_memory
    assert policy.allocator_options(asdict(lowered)) == {policy.M_MMAP_THRESHOLD: 64 << 10,
                                                         policy.M_TRIM_THRESHOLD: 64 << 10}
    assert policy.allocator_options(asdict(Limits())) == {}


def test_merge_folds_outputs_back_and_names_a_stopped_job():
    report = {"status": "ok", "cells": {"0": {"outputs": []}}}
    done = {"status": "ok", "cells": {"4": {"outputs": [{"output_type": "stream", "name": "stdout", "text": "x"}]}}}
    assert memory_budget.merge(report, 4, {"mb": 64.0, "hint": "use tiles"}, done) is None
    assert report["cells"]["4"]["outputs"][0]["text"] == "x"
    killed = {"status": "zero", "reason": "kernel died (out of memory: limit 64 MB)", "cells": {}}
    note = memory_budget.merge(report, 4, {"mb": 64.0, "hint": "use tiles"}, killed)
    assert report["cells"]["4"]["outputs"] == []
    assert note == "this test went past its memory budget of 64 MiB and was stopped: use tiles"
    # where the cgroup reported its peak, the feedback gives it next to the budget
    killed["memory_peak_mb"] = 64.004
    note = memory_budget.merge(report, 4, {"mb": 64.0, "hint": "use tiles"}, killed)
    assert note == ("this test went past its memory budget of 64 MiB and was stopped (the job's peak, counted by its "
                    "memory cgroup: 64.0 MiB, Python and PyTorch included): use tiles")


def test_a_refused_process_is_named_in_the_budget_cells_feedback():
    budget = {"mb": 64.0, "hint": "use tiles"}
    refused = {"status": "ok", "cells": {"4": {"outputs": [
        {"output_type": "error", "ename": "PermissionError", "evalue": "[Errno 1] Operation not permitted"}]}}}
    assert memory_budget.refused_a_process(refused, 4)
    assert memory_budget.note(budget, True) == ("this test runs under a memory budget of 64 MiB, in one process: it "
                                                "cannot start processes or programs (the notebook tried, and was "
                                                "refused): use tiles")
    assert memory_budget.note(budget) == "this test runs under a memory budget of 64 MiB: use tiles"
    # a file the learner may not open (EACCES), another error, another cell, or no outputs at all: not a process
    for report, index in (
            ({"cells": {"4": {"outputs": [{"output_type": "error", "ename": "PermissionError",
                                           "evalue": "[Errno 13] Permission denied: '/etc/shadow'"}]}}}, 4),
            ({"cells": {"4": {"outputs": [{"output_type": "error", "ename": "ValueError", "evalue": "[Errno 1]"}]}}}, 4),
            (refused, 5), ({"status": "zero", "cells": {}}, 4), ({"cells": {"4": {"outputs": "forged"}}}, 4),
            ({"cells": {"4": ["forged"]}}, 4)):
        assert not memory_budget.refused_a_process(report, index)


def test_without_a_cgroup_budget_cells_earn_nothing_and_the_instructor_is_told():
    """An rlimit counts address space, which a process can free inside itself (issue 41's examination kept both
    chapter 9 budget cells that way): only a cgroup proves a budget, so elsewhere its points are withheld."""
    from autograder.results import CellResult
    from autograder.sandbox import levels

    assert memory_budget.proven({"cgroup": "v1"}) and memory_budget.proven({"cgroup": "v2"})
    assert not memory_budget.proven({"cgroup": "none"}) and not memory_budget.proven({})
    found = {"cgroup": type("B", (), {"name": "none"})(), "seccomp": True, "landlock": 6, "root": False,
             "cgroup_reasons": []}
    assert memory_budget.proven(levels.describe("user", found)) is False
    budget = {"mb": 64.0, "hint": "use tiles"}
    cells = [CellResult("t1", 1.0, True), CellResult("t2", 2.0, True, ("values right",)),
             CellResult("t3", 2.0, False, ("wrong values",))]
    out, flag = memory_budget.withhold(cells, {"t2": {"budget": budget}, "t3": {"budget": budget}},
                                       "user (rlimits, seccomp)")
    assert [(c.grade_id, c.score, c.passed) for c in out] == [("t1", 1.0, True), ("t2", 0.0, False), ("t3", 0.0, False)]
    assert out[1].messages == (memory_budget.not_proven(budget, "user (rlimits, seccomp)"), "values right")
    assert out[1].messages[0].startswith("not awarded here: this test's memory budget of 64 MiB can only be proven")
    assert flag == ("memory-budget points withheld: this sandbox has no memory cgroup, so a budget is not proven "
                    "(isolation: user (rlimits, seccomp)): t2 (2 of 2)")  # t3 had no points to withhold
    assert memory_budget.withhold(cells[:1], {}, "x") == (cells[:1], None)


def test_budget_cells_draw_their_sizes_from_a_seed_only_the_profile_records(monkeypatch):
    """memory_budget.draw: a fresh secret seed per budget cell each time a profile is built; the profile records it
    (expected.drawn_seeds) and checks.grading_seed hands it to the cell: the engine's seed in the sandbox, the
    profile's under stock nbgrader, the cell's own seed in a kernel with no grader."""
    import torch

    from attention_course import checks, expected

    first, second = memory_budget.draw(["t1", "t2"]), memory_budget.draw(["t1", "t2"])
    assert set(first) == {"t1", "t2"} and all(isinstance(s, int) and 0 <= s < 2 ** 31 for s in first.values())
    assert first != second  # 2**-62 to collide
    prof = {"cells": {"t1": {"checks": [], "seed": 12345}, "t2": {"checks": []}, "t3": {"checks": [], "seed": True}}}
    assert expected.drawn_seeds(prof) == {"t1": 12345}
    monkeypatch.setenv("ATTENTION_COURSE_CELL_SEEDING", "engine")
    torch.manual_seed(777)
    assert checks.grading_seed("t1") == 777
    monkeypatch.delenv("ATTENTION_COURSE_CELL_SEEDING")
    monkeypatch.setitem(expected._loaded, "99_demo", {})
    monkeypatch.setitem(expected._seeds, "99_demo", expected.drawn_seeds(prof))
    monkeypatch.setattr(checks, "current_chapter", lambda: "99_demo")
    assert checks.grading_seed("t1") == 12345
    assert checks.grading_seed("t2") == cell_seed("t2")
    monkeypatch.setattr(checks, "current_chapter", lambda: None)  # no chapter, no grader: the cell's own seed
    assert checks.grading_seed("t1") == cell_seed("t1")
