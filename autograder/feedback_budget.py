"""How much graded feedback a learner gets, and when: the budget of ``serve`` (autograder/serve.py).

Hidden-test feedback on every submission is an oracle: a learner who may submit without limit can probe the
hidden tests one guess at a time. So each learner has a budget of graded feedback per chapter, e.g. 5 per hour (as
Otter Grader's rate-limiting plugin has one): a submission within it is graded at once and its feedback released;
one over it is kept (collected, its arrival recorded) and graded when the budget allows again, or at the chapter's
due date if that comes first, and the learner gets a page saying when. After the due date nothing is held: the
grade that counts is due.

The budget counts *releases of graded feedback* in a sliding window, read from an append-only journal,
``grading/serve/feedback.jsonl`` (one JSON line per release, written and synced after the page is in the
exchange), so a restarted service knows what it already gave. A kill between a release and its line costs the
learner nothing (that release is not counted); the next start releases the page again and counts it then.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path

from attention_course.language import N_

from .atomic_files import append_line, read_records
from .class_language import tr
from .course import Course

JOURNAL = Path("serve") / "feedback.jsonl"
MAX_JOURNAL_BYTES = 256 << 20  # a class of 1,000 learners x 10 chapters x 100 releases fits many times over


@dataclass(frozen=True)
class Budget:
    """``count`` graded feedback pages per learner and chapter within any ``per_s`` seconds; None: no limit."""
    count: int | None = 5
    per_s: float = 3600.0

    def describe(self) -> str:
        if self.count is None:
            return tr("no limit")
        units = ((3600, N_("{count} per chapter per hour"), N_("{count} per chapter per {n} hours")),
                 (60, N_("{count} per chapter per minute"), N_("{count} per chapter per {n} minutes")),
                 (1, N_("{count} per chapter per second"), N_("{count} per chapter per {n} seconds")))
        for seconds, one, many in units:
            if self.per_s % seconds == 0:
                n = self.per_s / seconds
                return tr(one, count=self.count) if n == 1 else tr(many, count=self.count, n=f"{n:g}")
        return tr("{count} per chapter per {n} seconds", count=self.count, n=f"{self.per_s:g}")


@dataclass(frozen=True)
class Release:
    student: str
    chapter: str
    key: str  # the graded submission's resume key (autograder/discovery.py): one release per graded result
    at: _dt.datetime  # naive UTC

    def to_json(self) -> dict:
        return {"student": self.student, "chapter": self.chapter, "key": self.key,
                "at": self.at.isoformat(timespec="microseconds")}

    @classmethod
    def from_json(cls, data: dict) -> "Release":
        return cls(str(data["student"]), str(data["chapter"]), str(data["key"]), _dt.datetime.fromisoformat(data["at"]))


@dataclass(frozen=True)
class Decision:
    grade_now: bool
    used: int  # graded pages released within the window
    until: _dt.datetime | None = None  # when it will be graded (held only)
    reason: str = ""


def journal_path(course: Course) -> Path:
    return course.grading / JOURNAL


class Journal:
    """The releases so far (:meth:`read` once at start; :meth:`add` appends and remembers)."""

    def __init__(self, path: Path, releases: list[Release]):
        self.path = Path(path)
        self.releases = releases
        self._keys = {(r.student, r.chapter, r.key) for r in releases}

    @classmethod
    def read(cls, path: Path) -> "Journal":
        # a torn last line after a kill is skipped: that release is made again
        releases, _torn = read_records(path, MAX_JOURNAL_BYTES, Release.from_json, "the feedback journal")
        return cls(path, releases)

    def released(self, student: str, chapter: str, key: str) -> bool:
        return (student, chapter, key) in self._keys

    def add(self, release: Release) -> None:
        """One synced line (atomic_files.append_line; a torn last line is skipped on reading)."""
        append_line(self.path, json.dumps(release.to_json(), sort_keys=True).encode())
        self.releases.append(release)
        self._keys.add((release.student, release.chapter, release.key))

    def within(self, student: str, chapter: str, since: _dt.datetime) -> list[_dt.datetime]:
        """The times of this learner's releases for this chapter after ``since``, oldest first."""
        return sorted(r.at for r in self.releases if r.student == student and r.chapter == chapter and r.at > since)


def decide(budget: Budget, journal: Journal, student: str, chapter: str, now: _dt.datetime,
           due: _dt.datetime | None) -> Decision:
    """Grade this submission now, or hold it until the budget allows (or the due date, whichever comes first)."""
    if budget.count is None:
        return Decision(True, 0)
    window = _dt.timedelta(seconds=budget.per_s)
    recent = journal.within(student, chapter, now - window)
    if len(recent) < budget.count:
        return Decision(True, len(recent))
    if due is not None and now >= due:
        return Decision(True, len(recent), reason="the due date has passed")
    # The window frees one place when the oldest release that keeps it full leaves it.
    until = recent[len(recent) - budget.count] + window
    reason = N_("The feedback budget is used up for now.")  # in English: the held page shows it translated
    if due is not None and due < until:
        until, reason = due, N_("It is graded at the chapter's due date.")
    return Decision(False, len(recent), until, reason)
