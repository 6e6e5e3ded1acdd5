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

**Fail closed.** While a chapter has a due date, a submission with no recorded arrival and points to lose, or one
whose recorded time lies within the kernel's ``ctime`` lag before the due date while ``collect`` saw it only
after it (``Arrival.unsure_until``, autograder/arrivals.py), is *held for the instructor* (``late_policy.held``): it is graded as usual (the points stay visible in formgrader,
grades.csv and the report), flagged, and its final score is withheld: nbgrader's
``late_submission_penalty`` is the whole score (so ``nbgrader export`` and formgrader's totals count nothing),
grades.csv's ``final_score`` and the LMS exports' cells are empty and their status says ``held``. It is never
"on time". The instructor releases it by recording when it arrived,
``python -m autograder deadlines CHAPTER --received STUDENT=ISO`` (bound to the notebook collected now); the
next ``grade`` applies the policy to that time.

The policy is nbgrader's: ``c.AssignLatePenalties.plugin_class`` in ``autograder/nbgrader_config.py`` names a
``LateSubmissionPlugin`` (nbgrader's own, whose ``penalty_method`` is ``'none'`` (the default) or ``'zero'``,
or :class:`PerHourPenalty` below). ``late_policy.Policy`` (autograder/late_policy.py: the policy that grading and
its sinks read; this module is the command that writes the facts) loads that file with traitlets, builds nbgrader's
``AssignLatePenalties`` preprocessor from it and asks it for the plugin, then applies nbgrader's own clamp
(``AssignLatePenalties._check_late_penalty``): so ``grade`` and ``nbgrader autograde`` compute every penalty
with the same code and the same configuration, rather than two copies that could drift apart.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
from pathlib import Path

from nbgrader.api import MissingEntry
from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float

from . import arrivals
from .course import Course
from .gradebook import GradebookWriter
from .late_policy import Policy
from .output_files import OUTPUTS_STATE

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
