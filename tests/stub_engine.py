"""A stand-in grading engine with autograder.isolation's interface, for testing the batch driver's handling
of workers that die (``AUTOGRADER_ENGINE=tests.stub_engine``). It runs no learner code: every graded cell
passes, except that learner ``crash`` kills the worker process every time and learner ``flaky`` the first
time only (a marker file next to the submission remembers).

With ``STUB_ENGINE_SECONDS=S`` each notebook takes S seconds, and with ``STUB_ENGINE_VARIED=1`` a cell passes only
when a hash of the notebook's bytes and the cell's id says so: scores then differ from learner to learner and are
the same every time one notebook is graded (the grading-on-submission crash test compares gradebooks)."""
from __future__ import annotations

import hashlib
import os
import time
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
        time.sleep(float(os.environ.get("STUB_ENGINE_SECONDS", "0")))
        data = Path(submission).read_bytes() if os.environ.get("STUB_ENGINE_VARIED") else b""

        def passed(gid: str) -> bool:
            return not data or hashlib.sha256(data + gid.encode()).digest()[0] % 2 == 0

        return GradingResult(student, chapter, cells=tuple(CellResult(gid, pts, passed(gid))
                                                           for gid, pts in graded_cells(src)))


def feedback_html(result: GradingResult) -> str:
    return f"<p>{result.student}: {result.score:g} / {result.max_score:g}</p>"
