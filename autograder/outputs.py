"""What a grading run writes besides the gradebook: the executed notebook and feedback page per learner (with the
exchange files nbgrader's release_feedback reads), ``grades.csv`` and ``grades_by_exercise.csv``. Split out of
autograder/batch.py (the command), which still exports these names.
"""
from __future__ import annotations

import importlib
import io
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import learner_files
from .course import Course
from .discovery import Task, engine_module_name
from .results import GradingResult

if TYPE_CHECKING:  # the command's run summary (autograder/batch.py imports this module)
    from .batch import Summary


def _write_atomic(path: Path, data: str) -> None:
    _write_atomic_bytes(path, data.encode("utf-8"))


def _write_atomic_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(course: Course, result: GradingResult, summary: Summary | None = None) -> None:
    """The executed notebook (for formgrader) and the learner's feedback page.

    The notebook is written only through safe_output.safe_notebook: formgrader renders it in the instructor's
    Jupyter session, so nothing the learner wrote or their kernel produced may be active there (issue 24)."""
    from . import safe_output

    student, chapter = result.student, result.chapter
    t0 = time.perf_counter()
    if result.executed_notebook:
        known = safe_output.chapter_texts(course.source_notebook(chapter), course.release_notebook(chapter))
        _write_atomic(course.grading / "autograded" / student / chapter / f"{chapter}.ipynb",
                      json.dumps(safe_output.safe_notebook(result.executed_notebook, known), indent=1,
                                 ensure_ascii=False))
    t1 = time.perf_counter()
    page = result.feedback_html  # rendered by the worker
    if result.late:  # the lateness is known here, not in the worker: render the page here, with it
        page = None
    if page is None:
        feedback_html = getattr(importlib.import_module(engine_module_name()), "feedback_html", None)
        page = feedback_html(result) if feedback_html is not None else None
    if page is not None:
        _write_atomic(course.grading / "feedback" / student / chapter / f"{chapter}.html", page)
    if summary is not None:
        summary.add_stage("executed notebook write", t1 - t0)
        summary.add_stage("feedback write", time.perf_counter() - t1)


def _copy_exchange_files(course: Course, task: Task) -> None:
    """The exchange's bookkeeping that nbgrader's collect leaves beside a submission (``timestamp.txt``,
    ``submission_secret.txt``), beside the learner's feedback page and autograded notebook: ``nbgrader
    release_feedback`` names each learner's page from them, and stops for the whole class when one is missing
    or unreadable. Only the copies discovery read and validated are written (never the learner's files
    themselves); beside a feedback page whose learner had no valid ones, learner_files.feedback_exchange_files
    puts stand-ins, so everyone else's feedback is still released (that learner is flagged)."""
    feedback = course.grading / "feedback" / task.student / task.chapter
    if feedback.is_dir():
        for name, data in learner_files.feedback_exchange_files(task.exchange).items():
            _write_atomic_bytes(feedback / name, data)
    autograded = course.grading / "autograded" / task.student / task.chapter
    if autograded.is_dir():
        for name, data in task.exchange.items():
            _write_atomic_bytes(autograded / name, data)


def write_csv(course: Course, rows: list[GradingResult]) -> tuple[Path, Path]:
    from .export import safe_writer  # ids, flags, reasons and messages are learner text: no cell runs as a formula

    out = course.grading / "grades.csv"
    buf = io.StringIO()
    w = safe_writer(buf)
    from .deadlines import HELD  # the words of a held submission's flag
    from .report import outcome  # "graded", "scored zero" or "not gradable": the report's and summary's words

    # score is before any late penalty; late_hours, late_penalty and final_score (after it) come from the
    # gradebook's nbgrader columns (autograder/deadlines.py). suspicion: the instructor's evidence (a copy of the
    # course's hidden tests), which no learner sees: flagged and flags are what the feedback page shows.
    w.writerow(["student", "chapter", "status", "score", "max_score", "percent", "flagged", "flags", "reason",
                "graded_at", "late_hours", "late_penalty", "final_score", "outcome", "suspicion", "submitted_at",
                "learner_claimed_at"])
    # Held for the instructor (no recorded arrival while a due date is set, deadlines.held): flagged, and no final
    # score (late_penalty and final_score empty). submitted_at is the recorded arrival (autograder/arrivals.py);
    # learner_claimed_at is the learner's timestamp.txt, shown beside it and never used.
    for r in sorted(rows, key=lambda r: (r.student, r.chapter)):
        pct = 100.0 * r.score / r.max_score if r.max_score else 0.0
        held = bool(r.late and r.late.held)
        flags = [*r.flags, HELD] if held else list(r.flags)
        w.writerow([r.student, r.chapter, r.status, f"{r.score:g}", f"{r.max_score:g}", f"{pct:.1f}",
                    "yes" if flags else "no", " | ".join(flags), r.reason,
                    r.graded_at.isoformat(timespec="seconds") if r.graded_at else "",
                    f"{r.late_seconds / 3600:.2f}", "" if held else f"{r.penalty:g}",
                    "" if held else f"{max(0.0, r.score - r.penalty):g}", outcome(r),
                    " | ".join(r.suspicions), r.late.arrived if r.late else "", r.late.claimed if r.late else ""])
    _write_atomic(out, buf.getvalue())
    per_cell = course.grading / "grades_by_exercise.csv"
    buf = io.StringIO()
    w = safe_writer(buf)
    w.writerow(["student", "chapter", "cell", "score", "max_score", "passed", "messages"])
    for r in sorted(rows, key=lambda r: (r.student, r.chapter)):
        for v in sorted(r.cells, key=lambda c: c.grade_id):
            w.writerow([r.student, r.chapter, v.grade_id, f"{v.score:g}", f"{v.max_score:g}",
                        "yes" if v.passed else "no", " | ".join(v.messages)])
    _write_atomic(per_cell, buf.getvalue())
    return out, per_cell
