"""Due dates, extensions and late penalties, exactly as nbgrader defines them.

``python -m autograder deadlines CHAPTER [--due ISO] [--extend STUDENT=HOURS ...] [--received STUDENT=ISO ...]
[--db URL]``

The facts live in nbgrader's own gradebook columns, so stock nbgrader, formgrader and ``nbgrader export``
read the same ones:

- ``Assignment.duedate``: the chapter's due date (also ``nbgrader db assignment add ID --duedate=...`` or
  ``python -m autograder release CHAPTER --duedate ISO``);
- ``SubmittedAssignment.extension``: a learner's extension (an interval added to the due date);
- ``SubmittedAssignment.timestamp``: the submission time: the arrival the instructor's side recorded
  (autograder/arrivals.py: ``python -m autograder collect``, or ``--received`` below), never the learner's
  ``timestamp.txt``, which is only shown beside it;
- ``SubmittedNotebook.late_submission_penalty``: the points the policy takes off.

**Fail closed.** While a chapter has a due date, a submission with no recorded arrival and points to lose is
*held for the instructor* (:func:`held`): it is graded as usual (the points stay visible in formgrader,
grades.csv and the report), flagged, and its final score is withheld: nbgrader's
``late_submission_penalty`` is the whole score (so ``nbgrader export`` and formgrader's totals count nothing),
grades.csv's ``final_score`` and the LMS exports' cells are empty and their status says ``held``. It is never
"on time". The instructor releases it by recording when it arrived,
``python -m autograder deadlines CHAPTER --received STUDENT=ISO`` (bound to the notebook collected now); the
next ``grade`` applies the policy to that time.

The policy is nbgrader's: ``c.AssignLatePenalties.plugin_class`` in ``autograder/nbgrader_config.py`` names a
``LateSubmissionPlugin`` (nbgrader's own, whose ``penalty_method`` is ``'none'`` (the default) or ``'zero'``,
or :class:`PerHourPenalty` below). :class:`Policy` loads that file with traitlets, builds nbgrader's
``AssignLatePenalties`` preprocessor from it and asks it for the plugin, then applies nbgrader's own clamp
(``AssignLatePenalties._check_late_penalty``): so ``grade`` and ``nbgrader autograde`` compute every penalty
with the same code and the same configuration, rather than two copies that could drift apart.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float

from . import arrivals
from .course import Course

SECONDS_PER_HOUR = 3600.0


class PerHourPenalty(LateSubmissionPlugin):
    """A fraction of the notebook's score lost per started hour late, up to a cap (fractions of the score).

    With the defaults a notebook 1 s to 1 h late loses 10 % of its score, 2 h late 20 %, and from 5 h on
    half of it. A started hour counts in full (as the learner sees the clock, not in prorated seconds)."""

    fraction_per_hour = Float(0.1, help="Fraction of the score lost per started hour late.").tag(config=True)
    cap = Float(0.5, help="Most of the score that lateness can take, as a fraction (1.0: all of it).").tag(
        config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        if total_seconds_late <= 0:
            return None
        hours = math.ceil(total_seconds_late / SECONDS_PER_HOUR)
        return score * min(self.cap, self.fraction_per_hour * hours)

    def describe(self) -> str:
        return (f"{self.fraction_per_hour:.0%} of the score per started hour late, "
                f"at most {self.cap:.0%}")


def describe(plugin) -> str:
    """One line for learners and instructors: which policy is in force."""
    if hasattr(plugin, "describe"):
        return plugin.describe()
    method = getattr(plugin, "penalty_method", None)
    if type(plugin) is LateSubmissionPlugin:
        return "a late notebook scores zero" if method == "zero" else "no late penalty"
    return f"late penalty by {type(plugin).__module__}.{type(plugin).__name__}"


def config_file(course: Course) -> Path:
    """The nbgrader configuration stock nbgrader reads for this course (``Course.nbgrader_env``)."""
    return course.root / "autograder" / "nbgrader_config.py"


def load_config(course: Course):
    """The course's nbgrader configuration, read by traitlets as nbgrader's apps read it."""
    from traitlets.config.loader import PyFileConfigLoader

    path = config_file(course)
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


HELD = ("held for the instructor: no recorded arrival time (timestamp.txt is the learner's claim); the final "
        "score is withheld until the instructor records one (python -m autograder deadlines CHAPTER --received "
        "STUDENT=ISO)")


def held(duedate: _dt.datetime | None, timestamp: _dt.datetime | None, score: float) -> bool:
    """Whether a submission's final score is withheld: a due date is set, no arrival time is recorded, and there
    are points to lose (a zero is final whenever it arrived)."""
    return duedate is not None and timestamp is None and score > 0


@dataclass
class Lateness:
    """How late one submission was and what it cost."""
    seconds_late: float
    penalty: float | None  # None: nbgrader's "no penalty assigned" (also when on time)
    held: bool = False  # no arrival time while a due date is set: the whole score withheld (penalty == score)

    @property
    def points(self) -> float:
        return float(self.penalty or 0.0)


class Policy:
    """The course's late-penalty policy: nbgrader's plugin, built the way ``AssignLatePenalties`` builds it."""

    def __init__(self, config=None):
        from nbgrader.preprocessors import AssignLatePenalties

        self._pre = AssignLatePenalties(config=config) if config is not None else AssignLatePenalties()
        self._pre.init_plugin()  # plugin_class(parent=self), as nbgrader does before every notebook
        self.plugin = self._pre.plugin_inst

    @classmethod
    def for_course(cls, course: Course | None = None) -> "Policy":
        return cls(load_config(course or Course()))

    def describe(self) -> str:
        return describe(self.plugin)

    def penalty(self, student_id: str, score: float, seconds_late: float) -> float | None:
        """The penalty nbgrader's AssignLatePenalties would store: None when on time or when the plugin
        assigns none, else the plugin's answer clamped to [0, score]."""
        if not seconds_late or seconds_late <= 0:
            return None
        raw = self.plugin.late_submission_penalty(student_id, score, seconds_late)
        if raw is None:
            return None
        return float(self._pre._check_late_penalty(SimpleNamespace(score=score), raw))

    def lateness(self, student_id: str, score: float, timestamp: _dt.datetime | None,
                 duedate: _dt.datetime | None, extension: _dt.timedelta | None = None) -> Lateness:
        """nbgrader's ``SubmittedAssignment.total_seconds_late`` and the penalty. ``timestamp`` is the recorded
        arrival (autograder/arrivals.py). No due date: on time. A due date and no arrival: :func:`held`, the whole
        score withheld (never "on time")."""
        if held(duedate, timestamp, score):
            return Lateness(0.0, float(score), held=True)
        if timestamp is None or duedate is None:
            return Lateness(0.0, None)
        due = duedate + extension if extension is not None else duedate
        late = max(0.0, (timestamp - due).total_seconds())
        return Lateness(late, self.penalty(student_id, score, late))


def how_late(seconds: float) -> str:
    """``2 h 05 min`` / ``12 min`` / ``40 s``: how late, for people."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


# -- the command ------------------------------------------------------------------------------------------
def parse_due(text: str) -> _dt.datetime:
    """An ISO date (a zone, if given, is converted): naive UTC, as nbgrader stores due dates."""
    when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is not None:
        when = when.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return when


def _parse_extension(text: str) -> tuple[str, float]:
    student, sep, hours = text.rpartition("=")
    if not sep or not student:
        raise argparse.ArgumentTypeError(f"{text!r}: expected STUDENT=HOURS")
    try:
        value = float(hours)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: HOURS must be a number") from None
    if value < 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: HOURS must be 0 (remove) or more")
    return student, value


def parse_received(text: str) -> tuple[str, _dt.datetime]:
    """``STUDENT=ISO``: when the instructor's side received that learner's notebook (a zone, if given, is
    converted; without one it is UTC)."""
    student, sep, when = text.rpartition("=")
    if not sep or not student:
        raise argparse.ArgumentTypeError(f"{text!r}: expected STUDENT=ISO")
    try:
        return student, parse_due(when)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {when!r} is not an ISO date") from None


def set_deadlines(db_url: str, chapter: str, due: _dt.datetime | None = None,
                  extensions: list[tuple[str, float]] = ()) -> list[str]:
    """Write the due date and extensions into nbgrader's columns; returns what was done, one line each."""
    from nbgrader.api import MissingEntry

    from .gradebook import GradebookWriter

    done = []
    # The writer opens nbgrader's Gradebook as grading does (a new one made in-process, WAL, clear errors).
    with GradebookWriter(db_url, policy=Policy()) as writer:
        gb = writer.gb
        if due is not None:
            gb.update_or_create_assignment(chapter, duedate=due)
            done.append(f"{chapter}: due {due:%Y-%m-%d %H:%M:%S} UTC")
        else:
            gb.find_assignment(chapter)  # MissingEntry: say so below
        for student, hours in extensions:
            try:
                gb.find_student(student)
            except MissingEntry:
                gb.add_student(student)
            try:
                gb.find_submission(chapter, student)
            except MissingEntry:  # an extension before the learner submits: nbgrader's row, no notebook yet
                gb.add_submission(chapter, student)
            gb.grant_extension(chapter, student, hours=hours)
            done.append(f"{chapter}: {student} " + (f"extension {hours:g} h" if hours else "no extension"))
    return done


def reapply(course: Course, db_url: str, chapter: str, policy: Policy) -> int:
    """Penalties of notebooks graded before the due date or an extension changed follow the change; the next
    ``grade`` rewrites grades.csv and the report (their up-to-date mark is removed)."""
    from .discovery import OUTPUTS_STATE
    from .gradebook import GradebookWriter

    with GradebookWriter(db_url, policy=policy) as writer:
        changed = writer.reapply_penalties(chapter)
    (course.grading / OUTPUTS_STATE).unlink(missing_ok=True)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder deadlines",
                                     description="Set a chapter's due date and learners' extensions in the "
                                                 "gradebook (nbgrader's own columns), and record when a "
                                                 "learner's notebook arrived.")
    parser.add_argument("chapter", metavar="CHAPTER")
    parser.add_argument("--due", type=parse_due, metavar="ISO",
                        help="due date, e.g. 2026-12-01T23:59 (UTC unless a zone is given)")
    parser.add_argument("--extend", type=_parse_extension, action="append", default=[], metavar="STUDENT=HOURS",
                        help="extend STUDENT's due date by HOURS (0 removes it); repeatable")
    parser.add_argument("--received", type=parse_received, action="append", default=[], metavar="STUDENT=ISO",
                        help="record when STUDENT's collected notebook arrived (UTC unless a zone is given), e.g. "
                             "one handed over outside the exchange or held for want of a time; repeatable")
    parser.add_argument("--db", metavar="URL", help="gradebook URL (default: the course's)")
    parser.add_argument("--course", type=Path, metavar="DIR", help="course root (default: this repository)")
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    from nbgrader.api import MissingEntry

    for student, when in args.received:
        try:
            arrival = arrivals.record_received(course, args.chapter, student, when)
        except LookupError as err:
            print(f"--received {student}: {err}", file=sys.stderr)
            return 2
        print(f"{args.chapter}: {student} received {arrival.describe()}; the next grade applies it")

    try:
        lines = set_deadlines(args.db or course.db_url, args.chapter, args.due, args.extend)
    except MissingEntry:
        print(f"{args.chapter} is not in the gradebook: give --due, or release it first", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    policy = Policy.for_course(course)
    changed = reapply(course, args.db or course.db_url, args.chapter, policy)
    print(f"policy: {policy.describe()} (autograder/nbgrader_config.py); {changed} recorded penalty(ies) changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
