"""The grading pipeline every entry point walks: intake -> tasks -> backend -> ``GradingResult`` -> sinks.

``grade`` (autograder/batch.py) walks it once over a class; ``serve`` (autograder/serve.py) walks it again for every
submission that arrives, with the same backend kept warm. Each stage is one function or class here, and each
stage's concept has its own module:

- **intake** (:func:`intake`): the submissions under nbgrader's ``submitted/`` layout (``discovery``, read without
  trusting them), their digests, recorded arrivals (``arrivals``) and resume keys;
- **backend** (``backends``): local worker processes or a Dask cluster, one warm engine each, yielding
  ``(task, result)``;
- **record** (:class:`Recorder`): one result's lateness, then its sinks: the executed notebook and feedback page
  (``outputs``), the exchange files beside them, and the gradebook (``gradebook``), in that order, so a result
  in the gradebook always has its files;
- **class outputs** (:func:`write_class_outputs`): grades CSVs, the similarity check, the class report, and the
  state that lets a run with nothing to do skip them.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from . import arrivals, learner_files
from .atomic_files import write_atomic
from .course import Course
from .discovery import (Task, attach_arrivals, discover, grading_code_hash, missing_result, submission_digest,
                        submission_key)
from .output_files import OUTPUTS_STATE, outputs_digest
from .results import GradingResult, Late
from .run_summary import Summary


class Intake:
    """What is to be graded: every submission of ``chapters`` with its resume key (a hash of its bytes, its
    chapter's source, the grading code, the limits and its recorded arrival). Cheap: no engine, no nbgrader."""

    def __init__(self, course: Course, chapters: list[str], submitted: Path, limits: dict, warn=None):
        self.course = course
        self.chapters = list(chapters)
        self.submitted = Path(submitted)
        self.limits_repr = json.dumps(dict(limits), sort_keys=True)
        self.code_hash = grading_code_hash()  # the engine's defaults are part of its code (hashed)
        self.sources = {ch: course.source_notebook(ch).read_bytes() for ch in self.chapters}
        self.course_files = learner_files.course_inodes([course.solutions, course.chapters_dir])
        self.warn = warn

    def tasks(self, chapters: list[str] | None = None) -> list[Task]:
        tasks = discover(self.submitted, list(chapters or self.chapters), self.course_files, warn=self.warn)
        # One notebook's bytes at a time (up to intake.MAX_NOTEBOOK_BYTES each, for a whole class): digests are kept.
        digests = {id(task): submission_digest(task) for task in tasks}
        # The submission time is the arrival the instructor's side recorded for this very notebook (autograder/
        # arrivals.py), never the learner's timestamp.txt; it enters the key (a time recorded later regrades).
        attach_arrivals(tasks, arrivals.Ledger.read(arrivals.ledger_path(self.course)), digests)
        for task in tasks:
            task.key = submission_key(task, self.sources[task.chapter], self.code_hash, self.limits_repr,
                                      digests[id(task)])
        return tasks


def intake(course: Course, chapters: list[str], submitted: Path, limits: dict, warn=None) -> tuple[Intake, list[Task]]:
    """The intake stage and its tasks."""
    stage = Intake(course, chapters, submitted, limits, warn)
    return stage, stage.tasks()


def chapter_maxima(writer, sources: dict[str, bytes], chapters) -> dict[str, float]:
    """Register each chapter's cells in the gradebook (once per writer) and return its maximum score."""
    # Heavy and needed only once something is graded: nbformat and the course's cell helpers.
    import nbformat

    from attention_course.cells import graded_cells

    maxima = {}
    for ch in sorted(set(chapters)):
        nb = nbformat.reads(sources[ch].decode(), as_version=4)
        writer.register_chapter(ch, nb)
        maxima[ch] = sum(pts for _, pts in graded_cells(nb))
    return maxima


class Recorder:
    """The sinks of one result, in an order that survives a kill at any point: files first (the executed notebook,
    the feedback page and the exchange files beside it), the gradebook row last. A row in the gradebook is what
    says "done" (its key), so a kill before it grades the notebook again, and never leaves a row without files."""

    def __init__(self, course: Course, writer, summary: Summary, started: float):
        self.course = course
        self.writer = writer
        self.summary = summary
        self.started = started

    def record(self, task: Task, result: GradingResult) -> GradingResult | None:
        """The recorded result (None: the grader failed on it, and nothing was recorded)."""
        # Here, not at the top: outputs and late_policy load nbgrader (and the report's matplotlib), which a run
        # with nothing to grade never needs (tests/test_batch.py checks that it loads none of them).
        from .late_policy import how_late
        from .outputs import copy_exchange_files, write_outputs

        summary = self.summary
        for stage, seconds in result.timings:
            summary.add_stage(stage, seconds)
        if not result.recorded:
            summary.failed += 1
            summary.failures.append({"student": task.student, "chapter": task.chapter, "reason": result.reason})
            return None
        # the task's ids (the worker saw the same) and what discovery found wrong with the folder
        result = result.replace(student=task.student, chapter=task.chapter, flags=(*task.flags, *result.flags))
        t0 = time.perf_counter()
        timestamp = task.arrival.arrived if task.arrival else None  # the recorded arrival, or none
        unsure_until = task.arrival.unsure_until if task.arrival else None  # a ctime's lag (arrivals.py)
        late = self.writer.lateness_of(task.student, task.chapter, timestamp, result.score, unsure_until)
        # shown on the feedback page (autograder/deadlines.py owns the policy): how late, or held, with the
        # recorded arrival and, beside it, the learner's claim
        result = result.replace(late=Late(
            seconds=late.seconds_late, penalty=late.points,
            text=how_late(late.seconds_late) if late.seconds_late > 0 else "", policy=self.writer.policy.describe(),
            held=late.held, arrived=task.arrival.describe() if task.arrival else "",
            claimed=task.claimed_time or ""))
        write_outputs(self.course, result, summary)
        copy_exchange_files(self.course, task)
        t1 = time.perf_counter()
        self.writer.write_result(result, task.key, timestamp, unsure_until)
        summary.add_stage("gradebook write", time.perf_counter() - t1)
        summary.graded += result.status == "graded"
        summary.zero += result.status == "zero"
        summary.scored_zero += result.score <= 0
        summary.flagged += bool(result.flags)
        if summary.first_result_seconds is None and not task.refusal:
            summary.first_result_seconds = t0 - self.started
        return result

    def record_missing(self, task: Task, max_score: float) -> GradingResult | None:
        """A task that is not graded (nothing submitted, or refused): its zero, recorded like any result."""
        return self.record(task, missing_result(task, max_score))


def write_class_outputs(course: Course, chapters: list[str], submitted: Path, rows: list[GradingResult],
                        summary: Summary, *, report: bool = True, similarity: bool = True, log=print) -> None:
    """The class-wide sinks, from the gradebook's rows: grades CSVs, similarity, the class report, and (after a
    run without failures) the state that lets a later run with nothing to grade skip all of this."""
    # Heavy: the report loads matplotlib, similarity its scanner; imported once there is something to write.
    from .outputs import write_csv
    from .report import write_report
    from .similarity import run as find_similar

    t0 = time.perf_counter()
    write_csv(course, rows)
    summary.add_stage("csv", time.perf_counter() - t0)
    similar = None
    if similarity:  # submissions that look copied (autograder/similarity.py), in the CSV and the report
        t0 = time.perf_counter()
        # In a child with CPU, memory and wall budgets (autograder/similarity_stage.py): a check that does not
        # finish is a line here, in similarity.csv and in the report, and grading goes on.
        stage = find_similar(course, chapters, submitted)
        similar = stage.sections
        summary.add_stage("similarity", time.perf_counter() - t0)
        log(stage.line())
    if report:
        t0 = time.perf_counter()
        path = write_report(course, rows, failures=summary.failures, similarity=similar)
        summary.add_stage("report", time.perf_counter() - t0)
        log(f"class report: {path}")
    if not summary.failures:  # a run with failures must write its report again next time
        write_atomic(course.grading / OUTPUTS_STATE, json.dumps(
            {"digest": outputs_digest({(r.student, r.chapter): r.key for r in rows}), "report": report}))
