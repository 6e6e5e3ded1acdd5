"""The result of grading one notebook: its one definition, and the constructors every producer uses.

A result is plain JSON (a ``TypedDict``), because it crosses process and machine boundaries (worker
processes, Dask) and lands in the gradebook, the CSV files, the class report and the learner's feedback.
"""
from __future__ import annotations

from typing import Literal, TypedDict

Status = Literal["graded", "zero", "failed"]  # zero: unusable or killed notebook; failed: the grader's fault


class CellResult(TypedDict):
    score: float
    max_score: float
    passed: bool
    messages: list[str]  # trusted text only (see autograder/TRUST.md)


class Result(TypedDict):
    student: str
    chapter: str
    status: Status
    reason: str
    flags: list[str]
    score: float
    max_score: float
    cells: dict[str, CellResult]  # by grade_id, in the chapter's order
    executed_notebook: dict | None  # nbformat JSON, for instructors only
    seconds: float
    isolation: str  # the sandbox level it ran at, e.g. "root (cgroup v1)" (docs/isolation.md)


def new(student: str, chapter: str, status: Status = "graded", reason: str = "", max_score: float = 0.0,
        isolation: str = "") -> Result:
    return Result(student=student, chapter=chapter, status=status, reason=reason, flags=[], score=0.0,
                  max_score=float(max_score), cells={}, executed_notebook=None, seconds=0.0, isolation=isolation)


def cell(passed: bool, max_score: float, messages: list[str]) -> CellResult:
    return CellResult(score=float(max_score) if passed else 0.0, max_score=float(max_score), passed=bool(passed),
                      messages=list(messages))


def set_cells(result: Result, cells: dict[str, CellResult]) -> None:
    """The result's cells, and its score and maximum as their sums."""
    result["cells"] = cells
    result["score"] = float(sum(c["score"] for c in cells.values()))
    result["max_score"] = float(sum(c["max_score"] for c in cells.values()))


def zero_cells(result: Result, graded: list[tuple[str, float]], message: str) -> None:
    """Every graded cell scores 0 with ``message`` (an unusable, killed or ungraded notebook)."""
    set_cells(result, {gid: cell(False, pts, [message]) for gid, pts in graded})
