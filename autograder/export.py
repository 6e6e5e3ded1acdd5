"""Grades for an LMS: ``python -m autograder export [--format canvas|long|wide|all] [--out PATH] [--db URL]
[--roster CANVAS_EXPORT.csv] [--missing blank|zero]``.

Scores come from the nbgrader gradebook (``--db``; the course's ``grading/gradebook.db`` by default), so a
score an instructor changed by hand in formgrader (a manual score overrides the autograded one) is what
is exported, exactly as ``nbgrader export`` would count it. Formats (files under ``grading/export/`` unless
``--out`` names one):

``canvas`` -> ``canvas_grades.csv``: a CSV that Canvas's *Grades > Import* accepts. One row per learner,
    one column per chapter, and Canvas's identity columns first:

    ============== =====================================================================================
    column         content
    ============== =====================================================================================
    Student        "Last, First" when the gradebook knows the names, else the nbgrader student id
    ID             the Canvas user id (nbgrader's ``lms_user_id``; empty when unknown)
    SIS User ID    empty unless the roster gives it
    SIS Login ID   the nbgrader student id (the login under which the learner submitted)
    Section        empty unless the roster gives it
    <chapter>      one column per chapter, named by its id (e.g. ``03_scoring_functions``): the score
    ============== =====================================================================================

    The second row is Canvas's ``Points Possible`` row (the label in the Student column, the identity
    columns empty, each chapter's maximum score), which Canvas uses as the points of a new assignment.
    A learner who did not submit a chapter gets an empty cell (Canvas leaves that grade unchanged;
    ``--missing zero`` writes 0 instead). Canvas matches learners on ID, SIS User ID or SIS Login ID:
    pass ``--roster`` a gradebook export from Canvas to copy its Student, ID, SIS User ID and Section
    for every learner whose SIS Login ID (or ID) is the nbgrader student id.

Every score is after the chapter's late penalty (nbgrader's ``late_submission_penalty``, see
``autograder/deadlines.py``), as ``nbgrader export``'s ``score`` column is. A submission *held for the
instructor* (a due date is set and no arrival time is recorded: ``late_policy.held``) has no final score: its
cell is empty in every format (Canvas leaves that grade unchanged, even with ``--missing zero``), ``long``
gives it the status ``held`` and an empty ``late_penalty``, and ``wide``'s totals leave it out.

``long`` -> ``grades_long.csv``: one row per learner and chapter (what most scripts want):
    ``student, chapter, score, max_score, percent, status, manual, late_penalty`` where ``status`` is ``graded``,
    ``zero`` (the autograder could not grade it: see grades.csv's reason), ``missing`` (not submitted)
    or ``nbgrader`` (graded by stock nbgrader, not by ``python -m autograder grade``), and ``manual`` is
    ``yes`` when an instructor's manual score changed the autograded total.

``wide`` -> ``grades_wide.csv``: ``student``, one column per chapter and ``total``, ``max_total``,
    ``late_penalty`` (the points lateness took off the total).

Every text cell of every CSV the grader writes goes through :func:`safe_cell`: student ids are folder names a
learner chose, and a cell that starts like a formula (``=``, ``+``, ``-``, ``@``, a tab or a carriage return)
would run as one when the file is opened in Excel or Sheets. Such a cell is written with a leading ``'``
(the spreadsheets' own "this is text" mark); numbers are written as they are. An LMS import that matches
learners on such an id sees the ``'`` too: rename the folder (and the gradebook's student) if that matters.
"""
from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook
from sqlalchemy import inspect, select

from .course import COURSE_ID, Course
from .gradebook import RESULTS
from .late_policy import held

FORMATS = {"canvas": "canvas_grades.csv", "long": "grades_long.csv", "wide": "grades_wide.csv"}
CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_LABEL = "Points Possible"
HELD_STATUS = "held"  # long format's status of a submission held for the instructor (autograder/deadlines.py)


@dataclass
class Learner:
    id: str
    first_name: str = ""
    last_name: str = ""
    lms_user_id: str = ""


@dataclass
class Grades:
    """Everything an export needs, read once from the gradebook."""
    chapters: list[str]
    max_score: dict[str, float]
    learners: list[Learner]
    # (student, chapter) -> {"score", "max_score", "status", "manual"}
    scores: dict[tuple[str, str], dict] = field(default_factory=dict)


def read_grades(db_url: str, chapters: list[str] | None = None) -> Grades:
    with Gradebook(db_url, course_id=COURSE_ID) as gb:
        names = [a.name for a in gb.assignments]
        order = [c for c in (chapters or sorted(names)) if c in names]
        ours = {}
        if inspect(gb.engine).has_table(RESULTS.name):
            for st, ch, status, score in gb.db.execute(select(RESULTS.c.student, RESULTS.c.chapter,
                                                              RESULTS.c.status, RESULTS.c.score)):
                ours[(st, ch)] = (status, float(score))
        grades = Grades(order, {}, [Learner(s.id, s.first_name or "", s.last_name or "", s.lms_user_id or "")
                                    for s in sorted(gb.students, key=lambda s: s.id)])
        for chapter in order:
            assignment = gb.find_assignment(chapter)
            grades.max_score[chapter] = float(assignment.max_score)
            for sub in gb.assignment_submissions(chapter):
                raw = float(sub.score)
                # nbgrader's late_submission_penalty (autograder/deadlines.py); exported scores are after it,
                # as nbgrader export's "score" column is.
                penalty = float(sub.late_submission_penalty or 0.0)
                status, auto = ours.get((sub.student_id, chapter), ("nbgrader", raw))
                withheld = held(assignment.duedate, sub.timestamp, raw)  # no recorded arrival: no final score
                grades.scores[(sub.student_id, chapter)] = {
                    "score": None if withheld else max(0.0, raw - penalty), "raw_score": raw,
                    "penalty": None if withheld else penalty, "max_score": float(sub.max_score),
                    "status": HELD_STATUS if withheld else status,
                    "manual": status != "nbgrader" and abs(raw - auto) > 1e-9}
    return grades


# What Excel, LibreOffice and Google Sheets read as the start of a formula (OWASP's CSV injection list).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value):
    """A CSV cell that no spreadsheet runs as a formula: text starting with one of :data:`FORMULA_START` gets a
    leading ``'``; numbers (and text that is just a number, such as ``-1.5``) and other values pass unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


class _SafeWriter:
    """``csv.writer`` whose every cell goes through :func:`safe_cell`."""

    def __init__(self, f, **options):
        self._writer = csv.writer(f, **options)
        # Python's csv quotes a field only for the line ending's own characters: with "\n" endings a lone "\r"
        # is written bare, and readers take it for the end of the row. Such a row is written fully quoted.
        self._quoted = csv.writer(f, **dict(options, quoting=csv.QUOTE_ALL))
        self._bare_cr = "\r" not in self._writer.dialect.lineterminator

    def writerow(self, row):
        cells = [safe_cell(c) for c in row]
        if self._bare_cr and any(isinstance(c, str) and "\r" in c for c in cells):
            return self._quoted.writerow(cells)
        return self._writer.writerow(cells)


def safe_writer(f, **options) -> _SafeWriter:
    """The CSV writer for every file the grader writes (see :func:`safe_cell`)."""
    return _SafeWriter(f, **options)


def _fmt(x: float) -> str:
    return f"{x:.10g}"


def _cell(grades: Grades, student: str, chapter: str, missing: str) -> str:
    got = grades.scores.get((student, chapter))
    if got is None:
        return "0" if missing == "zero" else ""
    return "" if got["score"] is None else _fmt(got["score"])  # held: withheld, the LMS grade left unchanged


def read_roster(path: Path) -> dict[str, dict]:
    """A Canvas gradebook export: {login or Canvas id: its identity columns}."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    roster = {}
    for row in rows:
        if CANVAS_POINTS_LABEL in (row.get("Student") or "") or not (row.get("Student") or "").strip():
            continue  # the points-possible row (Canvas pads its label with spaces)
        identity = {k: (row.get(k) or "").strip() for k in CANVAS_IDENTITY}
        for key in (identity["SIS Login ID"], identity["ID"]):
            if key:
                roster.setdefault(key, identity)
    return roster


def canvas_csv(grades: Grades, missing: str = "blank", roster: dict[str, dict] | None = None) -> str:
    buf = io.StringIO()
    w = safe_writer(buf, lineterminator="\n")
    w.writerow(CANVAS_IDENTITY + grades.chapters)
    w.writerow([CANVAS_POINTS_LABEL, "", "", "", ""] + [_fmt(grades.max_score[c]) for c in grades.chapters])
    for learner in grades.learners:
        name = f"{learner.last_name}, {learner.first_name}" if learner.last_name and learner.first_name \
            else (learner.last_name or learner.first_name or learner.id)
        identity = {"Student": name, "ID": learner.lms_user_id, "SIS User ID": "", "SIS Login ID": learner.id,
                    "Section": ""}
        known = (roster or {}).get(learner.id) or (roster or {}).get(learner.lms_user_id or "\0")
        if known:
            identity.update({k: v for k, v in known.items() if v})
        w.writerow([identity[k] for k in CANVAS_IDENTITY]
                   + [_cell(grades, learner.id, c, missing) for c in grades.chapters])
    return buf.getvalue()


def long_csv(grades: Grades) -> str:
    buf = io.StringIO()
    w = safe_writer(buf, lineterminator="\n")
    w.writerow(["student", "chapter", "score", "max_score", "percent", "status", "manual", "late_penalty"])
    for learner in grades.learners:
        for chapter in grades.chapters:
            got = grades.scores.get((learner.id, chapter))
            mx = grades.max_score[chapter]
            if got is None:
                w.writerow([learner.id, chapter, "0", _fmt(mx), "0.0", "missing", "no", "0"])
                continue
            if got["score"] is None:  # held for the instructor: no final score to export
                w.writerow([learner.id, chapter, "", _fmt(mx), "", got["status"], "yes" if got["manual"] else "no", ""])
                continue
            pct = 100.0 * got["score"] / mx if mx else 0.0
            w.writerow([learner.id, chapter, _fmt(got["score"]), _fmt(mx), f"{pct:.1f}", got["status"],
                        "yes" if got["manual"] else "no", _fmt(got["penalty"])])
    return buf.getvalue()


def wide_csv(grades: Grades, missing: str = "blank") -> str:
    buf = io.StringIO()
    w = safe_writer(buf, lineterminator="\n")
    w.writerow(["student", *grades.chapters, "total", "max_total", "late_penalty"])
    for learner in grades.learners:
        got = [grades.scores[(learner.id, c)] for c in grades.chapters
               if (learner.id, c) in grades.scores and grades.scores[(learner.id, c)]["score"] is not None]
        w.writerow([learner.id, *[_cell(grades, learner.id, c, missing) for c in grades.chapters],
                    _fmt(sum(g["score"] for g in got)), _fmt(sum(grades.max_score.values())),
                    _fmt(sum(g["penalty"] for g in got))])
    return buf.getvalue()


def export(course: Course, fmt: str = "canvas", out: Path | None = None, db_url: str | None = None,
           missing: str = "blank", roster: Path | None = None, chapters: list[str] | None = None) -> list[Path]:
    grades = read_grades(db_url or course.db_url, chapters or course.chapters())
    known = read_roster(roster) if roster else None
    texts = {"canvas": lambda: canvas_csv(grades, missing, known), "long": lambda: long_csv(grades),
             "wide": lambda: wide_csv(grades, missing)}
    wanted = list(FORMATS) if fmt == "all" else [fmt]
    if out is not None and len(wanted) > 1:
        raise SystemExit("--out names one file; with --format all the files go under grading/export/")
    written = []
    for name in wanted:
        path = Path(out) if out is not None else course.grading / "export" / FORMATS[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(texts[name](), encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder export",
                                     description="Write the gradebook's grades for an LMS (see autograder/export.py "
                                                 "for the columns).")
    parser.add_argument("--format", choices=[*FORMATS, "all"], default="canvas")
    parser.add_argument("--out", type=Path, help="the file to write (default: grading/export/<format file>)")
    parser.add_argument("--db", metavar="URL", help="gradebook URL (default: sqlite grading/gradebook.db)")
    parser.add_argument("--course", type=Path, metavar="DIR", help="course root (default: this repository)")
    parser.add_argument("--chapters", nargs="*", metavar="CHAPTER", help="only these chapters (default: all)")
    parser.add_argument("--missing", choices=["blank", "zero"], default="blank",
                        help="a chapter not submitted: an empty cell (LMS grade unchanged) or 0")
    parser.add_argument("--roster", type=Path, metavar="CANVAS_EXPORT.csv",
                        help="a gradebook export from Canvas: identity columns are copied from it")
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    for path in export(course, args.format, args.out, args.db, args.missing, args.roster, args.chapters):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
