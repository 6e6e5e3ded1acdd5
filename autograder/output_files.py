"""The class-wide files a grading run writes from the gradebook's results (``grades.csv``,
``grades_by_exercise.csv``, the class report), by name, and whether they are current: a run with nothing to grade
ends early only when they were last written from exactly the results recorded now. Importing this module loads
nothing heavy: grade's nothing-to-do check reads it before anything else is loaded."""
from __future__ import annotations

import json

from .course import Course
from .digests import framed_sha256

GRADES_CSV = "grades.csv"
BY_EXERCISE_CSV = "grades_by_exercise.csv"
REPORT_NAME = "class_report.html"  # under grading/reports/
OUTPUTS_STATE = ".outputs-state.json"  # under grading/: the digest they were last written from


def outputs_digest(done: dict[tuple[str, str], str]) -> str:
    """What grades.csv, grades_by_exercise.csv and the class report were last written from."""
    return framed_sha256(*(f"{st}\0{ch}\0{key}".encode() for (st, ch), key in sorted(done.items())))


def outputs_current(course: Course, done: dict[tuple[str, str], str], report: bool) -> bool:
    state = course.grading / OUTPUTS_STATE
    wanted = [course.grading / GRADES_CSV, course.grading / BY_EXERCISE_CSV]
    if report:
        wanted.append(course.grading / "reports" / REPORT_NAME)
    try:
        recorded = json.loads(state.read_text())
    except (OSError, ValueError):
        return False
    return (all(p.is_file() for p in wanted) and recorded.get("digest") == outputs_digest(done)
            and (recorded.get("report") or not report))
