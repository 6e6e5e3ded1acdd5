"""A stand-in grading engine with autograder.isolation's interface, for testing the batch driver's handling
of workers that die (``AUTOGRADER_ENGINE=tests.stub_engine``). It runs no learner code: every graded cell
passes, except that learner ``crash`` kills the worker process every time and learner ``flaky`` the first
time only (a marker file next to the submission remembers)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attention_course.cells import graded_cells
from autograder.results import CellResult, GradingResult


@dataclass
class Limits:
    cell_timeout_s: float = 60
    notebook_timeout_s: float = 300


class Engine:
    def __init__(self, course_root: Path, limits: Limits = Limits()):
        self.root = Path(course_root)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def grade(self, chapter: str, submission: Path, student: str) -> GradingResult:
        marker = Path(submission).with_name(".stub-engine-crashed")
        if student == "crash" or (student == "flaky" and not marker.exists()):
            marker.touch()
            os._exit(3)
        src = nbformat.read(self.root / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
        return GradingResult(student, chapter, cells=tuple(CellResult(gid, pts, True) for gid, pts in graded_cells(src)))


def feedback_html(result: GradingResult) -> str:
    return f"<p>{result.student}: {result.score:g} / {result.max_score:g}</p>"
