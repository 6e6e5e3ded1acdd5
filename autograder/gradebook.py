"""Writing batch-grading results into the nbgrader gradebook.

The gradebook is nbgrader's own database (``nbgrader.api``: SQLite by default, PostgreSQL through a
``postgresql+psycopg2://`` URL), so ``nbgrader export``, formgrader and ``nbgrader generate_feedback`` keep
working on it. For every graded notebook we store, in ONE transaction:

- the student, the submission and the submitted notebook (nbgrader's rows, created as nbgrader's own
  ``add_submission`` would: one ``Grade`` per grade cell, one ``Comment`` per solution cell);
- ``Grade.auto_score`` of every graded test cell (manual scores an instructor entered are kept);
- ``SubmittedNotebook.flagged`` when the grader flagged the notebook (edited/deleted/duplicated test cells...)
  or suspects it (a result's ``suspicions``: a copy of the course's hidden tests, for the instructor only),
  and the flags and the reason of a zero as the autograder comment of the first solution cell, which
  formgrader and generated feedback show;
- one row of our own table ``autograder_result`` (student, chapter, the resume key, status, reason, flags,
  score, and in ``cells`` the result's wire form without the executed notebook: autograder/results.py, which
  also reads the rows back). nbgrader ignores this table; it is what makes grading resumable (a submission whose
  key is already there is not graded again) and what the CSV and class report read.

Because the nbgrader rows and the ``autograder_result`` row commit together, a run killed at any point
leaves every notebook either fully recorded or not at all. Transactions that meet a concurrent writer
(``database is locked`` on SQLite, a unique-key race between two runs on PostgreSQL) are retried.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import random
import sqlite3
import time
from pathlib import Path

from nbgrader.api import (Assignment, Comment, Grade, Gradebook, GradeCell, Notebook, SolutionCell, Student,
                          SubmittedAssignment, SubmittedNotebook)
from sqlalchemy import Column, DateTime, Float, MetaData, String, Table, Text, and_, delete, insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from attention_course.cells import grade_id, nbgrader_meta

from . import new_gradebook
from .course import COURSE_ID
from .late_policy import HELD, HELD_UNSURE, Policy
from .results import GradingResult, Late

# Must match c.CourseDirectory.course_id in autograder/nbgrader_config.py.

_meta = MetaData()
RESULTS = Table(
    "autograder_result", _meta,
    Column("student", String(128), primary_key=True),
    Column("chapter", String(128), primary_key=True),
    Column("key", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("flags", Text, nullable=False, default="[]"),
    Column("score", Float, nullable=False),
    Column("max_score", Float, nullable=False),
    Column("cells", Text, nullable=False, default="{}"),  # GradingResult.to_json(notebook=False), versioned
    Column("seconds", Float),
    Column("graded_at", DateTime),
    Column("isolation", Text),  # the level the notebook was graded at, e.g. "user (rlimits, seccomp)"
)

RETRIES = 12


class GradebookUnavailable(RuntimeError):
    """The gradebook cannot be opened for writing; the message is one line an instructor can act on."""


def _check_writable(db_url: str) -> None:
    """A SQLite gradebook's file (or the folder it would be created in) must be writable by this account."""
    url = make_url(db_url)
    if not url.database or url.database == ":memory:":
        return
    path = Path(url.database).resolve()
    folder = next((p for p in [path.parent, *path.parent.parents] if p.exists()), Path("/"))
    if path.exists():
        ok = os.access(path, os.R_OK | os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)  # + journal files
    else:
        ok = os.access(folder, os.W_OK | os.X_OK)
    if not ok:
        raise GradebookUnavailable(f"cannot write the gradebook {path}: permission denied for this account "
                                   f"(uid {os.getuid()}); give it write access to {path if path.exists() else folder}"
                                   " and its folder, or pass --db with a gradebook it can write")


def _prepare_sqlite(db_url: str) -> str:
    """Create the folder, switch the file to WAL (readers never block the writer) and wait on locks."""
    url = make_url(db_url)
    if not url.database or url.database == ":memory:":
        return db_url
    path = Path(url.database)
    path.parent.mkdir(parents=True, exist_ok=True)

    def switch_to_wal():
        # WAL needs the file to itself: runs starting on one new gradebook at once get "database is locked" here
        # without waiting on the busy timeout, so this is retried like any transaction.
        con = sqlite3.connect(path, timeout=60)
        try:
            con.execute("PRAGMA journal_mode=WAL")
        finally:
            con.close()

    retrying(switch_to_wal)
    if "timeout" not in url.query:
        url = url.update_query_dict({"timeout": "60"})
    return url.render_as_string(hide_password=False)


def is_sqlite(db_url: str) -> bool:
    return make_url(db_url).get_backend_name() == "sqlite"


def retrying(action, before_retry=None):
    """Run ``action`` again, after a growing random pause, while it fails only because a concurrent writer got in
    the way (a lock, a lost race on a unique key or a new table, a serialisation failure), at most RETRIES times."""
    for attempt in range(RETRIES):
        try:
            return action()
        except (OperationalError, IntegrityError, DBAPIError, sqlite3.OperationalError) as err:
            if before_retry is not None:
                before_retry()
            transient = isinstance(err, IntegrityError) or any(
                words in str(err) for words in ("locked", "busy", "could not serialize", "deadlock", "already exists"))
            if not transient or attempt == RETRIES - 1:
                raise
            time.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))


def flagged_by_grader(result: GradingResult) -> bool:
    """What makes formgrader show a notebook flagged, besides a hold: the grader's flags (the learner sees them
    too) and its suspicions (issue 41, class 4: a suspected copy of the hidden tests is evidence the instructor
    must see; the learner does not)."""
    return bool(result.flags or result.suspicions)


class GradebookWriter:
    """The one writer of a batch run. Use as a context manager."""

    def __init__(self, db_url: str, course_id: str = COURSE_ID, policy=None):
        self.db_url = db_url
        # The late-penalty policy (autograder/deadlines.py); None: the repository course's, loaded on first use.
        self._policy = policy
        try:
            if is_sqlite(db_url):
                _check_writable(db_url)
                url = _prepare_sqlite(db_url)
            else:
                url = db_url
            # A new gradebook gets nbgrader's schema here, so nbgrader's Gradebook only opens it and never
            # starts its `alembic heads` process (autograder/new_gradebook.py).
            self._retry(lambda: new_gradebook.create(url, course_id), fresh_session=False)
            self.gb = self._retry(lambda: Gradebook(url, course_id=course_id), fresh_session=False)
        except GradebookUnavailable:
            raise
        except (OSError, sqlite3.Error, DBAPIError) as err:
            reason = str(getattr(err, "orig", None) or err).splitlines()[0]
            raise GradebookUnavailable(f"cannot open the gradebook {make_url(db_url).render_as_string()}: "
                                       f"{reason}") from None
        self.course_id = course_id
        self.session = self.gb.db
        self._retry(lambda: _meta.create_all(self.gb.engine))
        self._retry(self._add_isolation_column)

    @property
    def policy(self):
        if self._policy is None:
            self._policy = Policy.for_course()
        return self._policy

    # -- plumbing -------------------------------------------------------------------------------
    def close(self) -> None:
        self.gb.close()

    def __enter__(self) -> "GradebookWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _retry(self, action, fresh_session: bool = True):
        """Run ``action`` (one transaction) again when a concurrent writer got in the way; with ``fresh_session``
        the session is rolled back before each new try."""
        return retrying(action, before_retry=self.session.rollback if fresh_session else None)

    def _add_isolation_column(self) -> None:
        """Gradebooks written before the isolation column existed get it (NULL for their old rows)."""
        from sqlalchemy import inspect, text

        names = {c["name"] for c in inspect(self.gb.engine).get_columns(RESULTS.name)}
        if "isolation" not in names:
            with self.gb.engine.begin() as con:
                con.execute(text(f"ALTER TABLE {RESULTS.name} ADD COLUMN isolation TEXT"))

    # -- chapters ---------------------------------------------------------------------------------
    def register_chapter(self, chapter: str, source_nb) -> None:
        """Make sure the gradebook knows the chapter with the grade and solution cells of its source.

        ``python -m autograder release`` registers chapters through nbgrader already; this covers a fresh
        database (e.g. a new PostgreSQL gradebook) and a source notebook that gained cells since.
        """
        self._retry(lambda: self._register(chapter, source_nb))

    def _register(self, chapter: str, source_nb) -> None:
        s = self.session
        assignment = s.execute(select(Assignment).filter_by(name=chapter)).scalar_one_or_none()
        if assignment is None:
            assignment = Assignment(name=chapter, course_id=self.course_id)
            s.add(assignment)
            s.flush()
        notebook = s.execute(select(Notebook).filter_by(name=chapter, assignment_id=assignment.id)
                             ).scalar_one_or_none()
        if notebook is None:
            kernelspec = source_nb.metadata.get("kernelspec")
            notebook = Notebook(name=chapter, assignment=assignment,
                                kernelspec=json.dumps(dict(kernelspec)) if kernelspec else None)
            s.add(notebook)
            s.flush()
        grade_cells = {c.name: c for c in notebook.grade_cells}
        solution_cells = {c.name for c in notebook.solution_cells}
        for cell in source_nb.cells:
            meta = nbgrader_meta(cell)
            name = grade_id(cell)
            if not name:
                continue
            if meta.get("grade") and not meta.get("task"):
                points = float(meta.get("points", 0))
                cell_type = "code" if cell.cell_type == "code" else "markdown"
                existing = grade_cells.get(name)
                if existing is None:
                    s.add(GradeCell(name=name, notebook=notebook, max_score=points, cell_type=cell_type))
                elif existing.max_score != points or existing.cell_type != cell_type:
                    existing.max_score, existing.cell_type = points, cell_type
            if meta.get("solution") and name not in solution_cells:
                s.add(SolutionCell(name=name, notebook=notebook))
        s.commit()

    # -- results ----------------------------------------------------------------------------------
    def write_result(self, result: GradingResult, key: str, timestamp: _dt.datetime | None = None,
                     unsure_until: _dt.datetime | None = None) -> None:
        """Record one graded notebook (status graded or zero), all in one transaction."""
        if not result.recorded:
            raise ValueError(f"only graded/zero results go into the gradebook, not {result.status!r}")
        self._retry(lambda: self._write(result, key, timestamp, unsure_until))

    def _write(self, result: GradingResult, key: str, timestamp, unsure_until=None) -> None:
        s = self.session
        student_id, chapter = result.student, result.chapter
        student = s.get(Student, student_id)
        if student is None:
            student = Student(id=student_id)
            s.add(student)
        assignment = s.execute(select(Assignment).filter_by(name=chapter)).scalar_one()
        sub = s.execute(select(SubmittedAssignment).filter_by(assignment_id=assignment.id,
                                                              student_id=student_id)).scalar_one_or_none()
        if sub is None:
            sub = SubmittedAssignment(assignment=assignment, student=student)
            s.add(sub)
        # Only ever the recorded arrival (autograder/arrivals.py), None when there is none: a time recorded for an
        # earlier notebook must not stay with a new one. The learner's timestamp.txt never comes here.
        sub.timestamp = timestamp
        note = _autograder_comment(result)
        with s.no_autoflush:
            for notebook in assignment.notebooks:
                subnb = next((n for n in sub.notebooks if n.notebook_id == notebook.id), None)
                if subnb is None:
                    subnb = SubmittedNotebook(notebook=notebook, assignment=sub)
                    s.add(subnb)
                grades = {g.cell_id: g for g in subnb.grades}
                comments = {c.cell_id: c for c in subnb.comments}

                def grade_of(cell_id):
                    if cell_id not in grades:
                        grades[cell_id] = Grade(cell_id=cell_id, notebook=subnb)
                        s.add(grades[cell_id])
                    return grades[cell_id]

                def comment_of(cell_id):
                    if cell_id not in comments:
                        comments[cell_id] = Comment(cell_id=cell_id, notebook=subnb)
                        s.add(comments[cell_id])
                    return comments[cell_id]

                for gc in notebook.grade_cells:
                    grade = grade_of(gc.id)
                    if gc.cell_type != "code":  # a written answer: left to the instructor
                        grade.auto_score, grade.needs_manual_grade = None, True
                        continue
                    verdict = result.cell(gc.name)
                    graded = verdict is not None and result.status == "graded"
                    grade.auto_score = verdict.score if graded else 0.0
                    grade.needs_manual_grade = False
                for tc in notebook.task_cells:
                    grade_of(tc.id)
                    comment_of(tc.id)
                for i, sc in enumerate(sorted(notebook.solution_cells, key=lambda c: c.name)):
                    comment = comment_of(sc.id)
                    if i == 0:
                        comment.auto_comment = note
                # As nbgrader's AssignLatePenalties: the score (manual scores and extra credit included),
                # the lateness of the submission against its due date plus extension, the course's plugin;
                # with no arrival time while a due date is set, the whole score withheld (late_policy.held).
                score = sum(_grade_score(g) for g in grades.values())
                late = self.policy.lateness(student_id, score, sub.timestamp, assignment.duedate, sub.extension,
                                            unsure_until)
                if late.reason == HELD_UNSURE:
                    # nbgrader's column holds one time: none, so that every later recomputation (a due date moved,
                    # the report) keeps it held until the instructor records the arrival
                    sub.timestamp = None
                subnb.late_submission_penalty = late.penalty
                subnb.flagged = flagged_by_grader(result) or late.held
                solution_cells = sorted(notebook.solution_cells, key=lambda c: c.name)
                if late.held and solution_cells:  # where formgrader shows the autograder's comment
                    comment_of(solution_cells[0].id).auto_comment = " ".join(
                        p for p in (note, f"Autograder: {late.reason or HELD}.") if p)
        s.execute(delete(RESULTS).where(and_(RESULTS.c.student == student_id, RESULTS.c.chapter == chapter)))
        s.execute(insert(RESULTS).values(
            **result.to_row(), key=key, graded_at=_dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)))
        s.commit()

    def due_dates(self) -> dict[str, _dt.datetime]:
        """{chapter: due date (naive UTC)} of every chapter that has one."""
        s = self.session
        rows = s.execute(select(Assignment.name, Assignment.duedate)).all()
        s.commit()
        return {name: due for name, due in rows if due is not None}

    def done_keys(self) -> dict[tuple[str, str], str]:
        """{(student, chapter): key} of every notebook recorded in full (our row and nbgrader's)."""
        s = self.session
        have = {(st, ch) for st, ch in s.execute(
            select(SubmittedAssignment.student_id, Assignment.name)
            .join(Assignment, Assignment.id == SubmittedAssignment.assignment_id))}
        rows = s.execute(select(RESULTS.c.student, RESULTS.c.chapter, RESULTS.c.key)).all()
        s.commit()
        return {(st, ch): key for st, ch, key in rows if (st, ch) in have}

    def results(self, chapters: list[str] | None = None) -> list[GradingResult]:
        """Every recorded result (without the executed notebooks, with its key, time and lateness from nbgrader's
        columns), sorted by chapter then student."""
        query = select(RESULTS)
        if chapters:
            query = query.where(RESULTS.c.chapter.in_(chapters))
        late = self.lateness(chapters)
        rows = []
        for r in self.session.execute(query).mappings():
            timing = late.get((r["student"], r["chapter"]))
            if timing is not None:  # the learner's claim is not nbgrader's: the result recorded it at grading
                timing = dataclasses.replace(timing, claimed=_recorded_claim(r["cells"]))
            rows.append(GradingResult.from_row(r, timing))
        self.session.commit()
        return sorted(rows, key=lambda r: (r.chapter, r.student))

    def lateness_of(self, student_id: str, chapter: str, timestamp, score: float, unsure_until=None):
        """How late this submission is and what it costs (late_policy.Lateness), before it is recorded: the
        chapter's due date and the learner's extension as the gradebook has them now."""
        s = self.session
        assignment = s.execute(select(Assignment).filter_by(name=chapter)).scalar_one_or_none()
        sub = None if assignment is None else s.execute(select(SubmittedAssignment).filter_by(
            assignment_id=assignment.id, student_id=student_id)).scalar_one_or_none()
        late = self.policy.lateness(student_id, score, timestamp, assignment.duedate if assignment else None,
                                    sub.extension if sub is not None else None, unsure_until)
        s.commit()
        return late

    def lateness(self, chapters: list[str] | None = None) -> dict[tuple[str, str], Late]:
        """{(student, chapter): Late} of every submission, from nbgrader's columns: seconds late, points lost,
        whether it is held (late_policy.held) and its recorded arrival time."""
        from sqlalchemy.orm import selectinload

        # a few queries in all, not some per submission (results() runs this for the whole class; the grades give
        # the score late_policy.held needs)
        query = select(SubmittedAssignment).join(Assignment).options(
            selectinload(SubmittedAssignment.notebooks).selectinload(SubmittedNotebook.grades),
            selectinload(SubmittedAssignment.assignment))
        if chapters:
            query = query.where(Assignment.name.in_(chapters))
        out = {}
        for sub in self.session.execute(query).scalars():
            penalty = sum(float(n.late_submission_penalty or 0.0) for n in sub.notebooks)
            score = sum(_grade_score(g) for n in sub.notebooks for g in n.grades)
            # seconds late as nbgrader's total_seconds_late counts them (which fails on an extension without a
            # due date); the points lost are the recorded ones
            late = self.policy.lateness(sub.student_id, score, sub.timestamp, sub.assignment.duedate, sub.extension)
            out[(sub.student_id, sub.assignment.name)] = Late(
                late.seconds_late, penalty, held=late.held,
                arrived=f"{sub.timestamp:%Y-%m-%d %H:%M:%S} UTC" if sub.timestamp else "")
        return out

    def reapply_penalties(self, chapter: str) -> int:
        """Recompute every recorded penalty of ``chapter`` (after its due date or an extension changed)."""
        def action():
            s, changed = self.session, 0
            # flagged as grading left it (our row's flags), plus held: a hold the change lifts unflags it
            flagged = {row.student: flagged_by_grader(GradingResult.from_row(row)) for row in s.execute(
                select(RESULTS).where(RESULTS.c.chapter == chapter)).mappings()}
            for sub in s.execute(select(SubmittedAssignment).join(Assignment)
                                 .where(Assignment.name == chapter)).scalars():
                for subnb in sub.notebooks:
                    score = sum(_grade_score(g) for g in subnb.grades)
                    late = self.policy.lateness(sub.student_id, score, sub.timestamp, sub.assignment.duedate,
                                                sub.extension)
                    changed += (subnb.late_submission_penalty or 0.0) != (late.penalty or 0.0)
                    subnb.late_submission_penalty = late.penalty
                    subnb.flagged = flagged.get(sub.student_id, bool(subnb.flagged)) or late.held
            s.commit()
            return changed
        return self._retry(action)

    def snapshot(self) -> dict:
        """Everything that grading decides, in a comparable form (no times, no generated ids)."""
        s = self.session
        grades = s.execute(
            select(Student.id, Assignment.name, Notebook.name, GradeCell.name, Grade.auto_score,
                   GradeCell.max_score, Grade.needs_manual_grade, SubmittedNotebook.flagged)
            .join(SubmittedAssignment, SubmittedAssignment.student_id == Student.id)
            .join(Assignment, Assignment.id == SubmittedAssignment.assignment_id)
            .join(SubmittedNotebook, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
            .join(Notebook, Notebook.id == SubmittedNotebook.notebook_id)
            .join(Grade, Grade.notebook_id == SubmittedNotebook.id)
            .join(GradeCell, GradeCell.id == Grade.cell_id)).all()
        results = {f"{r.student}/{r.chapter}": {"key": r.key, "status": r.status, "reason": r.reason,
                                                "flags": list(r.flags), "score": r.score, "max_score": r.max_score,
                                                "cells": r.to_json()["cells"]}
                   for r in self.results()}
        s.commit()
        return {"grades": sorted(tuple(g) for g in grades), "results": results}


def _grade_score(grade: Grade) -> float:
    """nbgrader's ``Grade.score`` (a manual score overrides the automatic one; extra credit adds), in Python:
    the column property is not refreshed until the transaction is flushed."""
    base = grade.manual_score if grade.manual_score is not None else grade.auto_score
    if base is None:
        return 0.0
    return float(base) + float(grade.extra_credit or 0.0)


def _recorded_claim(cells_json) -> str:
    """The learner's claimed time (timestamp.txt) that grading recorded in the result's wire form ("" if none)."""
    try:
        late = json.loads(cells_json or "{}").get("late")
    except (ValueError, AttributeError):
        return ""
    claimed = late.get("claimed") if isinstance(late, dict) else None
    return claimed if isinstance(claimed, str) else ""


def _autograder_comment(result: GradingResult) -> str | None:
    parts = []
    if result.status == "zero":
        parts.append(f"Autograder: this notebook scored zero: {result.reason or 'unusable notebook'}.")
    if result.flags:
        parts.append("Autograder flags: " + "; ".join(result.flags) + ".")
    return " ".join(parts) or None


def snapshot(db_url: str) -> dict:
    with GradebookWriter(db_url) as writer:
        return writer.snapshot()
