"""What a grading run writes besides the gradebook: the executed notebook and feedback page per learner (with the
exchange files nbgrader's release_feedback reads), ``grades.csv`` and ``grades_by_exercise.csv``. The sinks of
a result, after the gradebook: ``grade`` (autograder/batch.py) calls them for every result it records.
"""
from __future__ import annotations

import importlib
import io
import json
import time
from pathlib import Path

from attention_course.language import speaking

from . import learner_files, safe_output
from .class_language import class_language
from .atomic_files import write_atomic, write_atomic_bytes
from .course import Course
from .discovery import Task, engine_module_name
from .export import safe_writer  # ids, flags, reasons and messages are learner text: no cell runs as a formula
from .late_policy import HELD  # the words of a held submission's flag
from .output_files import BY_EXERCISE_CSV, GRADES_CSV
from .report import outcome  # "graded", "scored zero" or "not gradable": the report's and summary's words
from .results import GradingResult
from .run_summary import Summary


def write_outputs(course: Course, result: GradingResult, summary: Summary | None = None) -> None:
    """The executed notebook (for formgrader) and the learner's feedback page.

    The notebook is written only through safe_output.safe_notebook: formgrader renders it in the instructor's
    Jupyter session, so nothing the learner wrote or their kernel produced may be active there (issue 24)."""
    student, chapter = result.student, result.chapter
    t0 = time.perf_counter()
    if result.executed_notebook:
        known = safe_output.chapter_texts(course.source_notebook(chapter), course.release_notebook(chapter))
        write_atomic(course.grading / "autograded" / student / chapter / f"{chapter}.ipynb",
                      json.dumps(safe_output.safe_notebook(result.executed_notebook, known), indent=1,
                                 ensure_ascii=False))
    t1 = time.perf_counter()
    page = result.feedback_html  # rendered by the worker
    if result.late:  # the lateness is known here, not in the worker: render the page here, with it
        page = None
    if page is None:
        feedback_html = getattr(importlib.import_module(engine_module_name()), "feedback_html", None)
        with speaking(class_language(course)):
            page = feedback_html(result) if feedback_html is not None else None
    if page is not None:
        write_atomic(course.grading / "feedback" / student / chapter / f"{chapter}.html", page)
    if summary is not None:
        summary.add_stage("executed notebook write", t1 - t0)
        summary.add_stage("feedback write", time.perf_counter() - t1)


def copy_exchange_files(course: Course, task: Task) -> None:
    """The exchange's bookkeeping that nbgrader's collect leaves beside a submission (``timestamp.txt``,
    ``submission_secret.txt``), beside the learner's feedback page and autograded notebook: ``nbgrader
    release_feedback`` names each learner's page from them, and stops for the whole class when one is missing
    or unreadable. Only the copies discovery read and validated are written (never the learner's files
    themselves); beside a feedback page whose learner had no valid ones, learner_files.feedback_exchange_files
    puts stand-ins, so everyone else's feedback is still released (that learner is flagged)."""
    feedback = course.grading / "feedback" / task.student / task.chapter
    if feedback.is_dir():
        for name, data in learner_files.feedback_exchange_files(task.exchange).items():
            write_atomic_bytes(feedback / name, data)
    autograded = course.grading / "autograded" / task.student / task.chapter
    if autograded.is_dir():
        for name, data in task.exchange.items():
            write_atomic_bytes(autograded / name, data)


def write_csv(course: Course, rows: list[GradingResult]) -> tuple[Path, Path]:
    out = course.grading / GRADES_CSV
    buf = io.StringIO()
    w = safe_writer(buf)
    # score is before any late penalty; late_hours, late_penalty and final_score (after it) come from the
    # gradebook's nbgrader columns (autograder/deadlines.py). suspicion: the instructor's evidence (a copy of the
    # course's hidden tests), which no learner sees: flagged and flags are what the feedback page shows.
    w.writerow(["student", "chapter", "status", "score", "max_score", "percent", "flagged", "flags", "reason",
                "graded_at", "late_hours", "late_penalty", "final_score", "outcome", "suspicion", "submitted_at",
                "learner_claimed_at"])
    # Held for the instructor (no recorded arrival while a due date is set, late_policy.held): flagged, and no final
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
    write_atomic(out, buf.getvalue())
    per_cell = course.grading / BY_EXERCISE_CSV
    buf = io.StringIO()
    w = safe_writer(buf)
    w.writerow(["student", "chapter", "cell", "score", "max_score", "passed", "messages"])
    for r in sorted(rows, key=lambda r: (r.student, r.chapter)):
        for v in sorted(r.cells, key=lambda c: c.grade_id):
            w.writerow([r.student, r.chapter, v.grade_id, f"{v.score:g}", f"{v.max_score:g}",
                        "yes" if v.passed else "no", " | ".join(v.messages)])
    write_atomic(per_cell, buf.getvalue())
    return out, per_cell
