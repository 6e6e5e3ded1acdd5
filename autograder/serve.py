"""Grading on submission: ``python -m autograder serve``, a long-running service (run alone, or by JupyterHub as a
managed service: deploy/jupyterhub/jupyterhub_config.py).

``python -m autograder serve [--exchange DIR] [--chapters CH ...] [--budget N] [--per SECONDS] [--no-budget]
[--poll S] [--refresh S] [--workers N | --scheduler tcp://HOST:PORT] [--db URL] [--isolation LEVEL]``

It watches the exchange's inbox (``<exchange>/<course>/inbound/``) and, for each new submission:

1. **collects** it as ``python -m autograder collect`` does (autograder/arrivals.py: nbgrader's collect under the
   owning account, the trusted arrival time appended to ``grading/arrivals.jsonl``), that entry alone;
2. asks the **feedback budget** (autograder/feedback_budget.py) whether to grade it now; a submission over the
   budget is kept, its learner gets a page saying when it will be graded, and it is graded then (or at the due
   date, if sooner);
3. **grades** it through the same pipeline as ``grade`` (autograder/pipeline.py): intake and resume keys, a backend
   whose workers stay warm between submissions (local processes, one warm engine each, or a Dask cluster), the
   result's sinks (executed notebook, feedback page, gradebook row);
4. **releases** that learner's feedback into the exchange (autograder/feedback_release.py), where the Assignments
   tab's "Fetch Feedback" finds it;
5. after results arrive, **refreshes** the class outputs (grades CSVs, similarity, class report, the LMS exports
   under ``grading/export/``), debounced: ``--refresh`` seconds after the last result, and at least every ten
   such periods while results keep coming.

**Crash safety.** Nothing lives only in this process's memory. What is collected is in the arrival record (an
entry a record names is never collected again: one record per submission); what is graded is in the gradebook
(the resume key, written after the result's files); what is released is in the feedback journal (written after the
page is in the exchange). Each step is idempotent and redone from those files at start, so the service killed at
any moment (even ``kill -9``) and started again loses no submission, records none twice, and catches up; its
workers die with it (``PR_SET_PDEATHSIG``). One service per course at a time (a lock on ``grading/serve/lock``).

**Isolation.** Every notebook runs in the engine's sandbox at the strongest level this account reaches (as
``grade``); ``--require LEVEL`` refuses to start below it (docs/isolation.md). The service and ``grade`` should run
with the same isolation options: a result is reused only under the options that produced it.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import fcntl
import os
import signal
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from attention_course.language import speaking

from . import arrivals
from .backends import DaskBackend, LocalBackend
from .class_language import class_language
from .course import COURSE_ID, Course
from .discovery import Task, engine_module_name
from .feedback_budget import Budget, Journal, Release, decide, journal_path
from .feedback_release import graded_page, held_page, release
from .pipeline import Intake, Recorder, chapter_maxima, write_class_outputs
from .run_summary import Summary

LOCK = Path("serve") / "lock"
# An inbox entry is collected once nbgrader's submit has finished writing it: its last file, submission_secret.txt,
# is there. An entry without one (another client) is collected once nothing in it has changed for this long.
SETTLE_S = 10.0
REFRESH_EVERY = 10  # while results keep arriving, the class outputs are refreshed at least every 10 x --refresh


@dataclass
class Settings:
    exchange: Path
    chapters: list[str]
    budget: Budget = Budget()
    poll_s: float = 1.0
    refresh_s: float = 30.0
    workers: int = 1
    scheduler: str | None = None
    db_url: str | None = None
    limits: dict = field(default_factory=dict)
    similarity: bool = True


def utc_now() -> _dt.datetime:
    return arrivals.utc_now()


class Service:
    """One course's grading service. :meth:`step` does one round (collect what is new, grade what is due,
    release); :meth:`run` repeats it until stopped."""

    def __init__(self, course: Course, settings: Settings, log=print):
        self.course = course
        self.settings = settings
        self.log = log
        self.submitted = course.grading / "submitted"
        self.db_url = settings.db_url or course.db_url
        self.intake = Intake(course, settings.chapters, self.submitted, settings.limits, warn=log)
        self.journal = Journal.read(journal_path(course))
        self.summary = Summary()
        self.started = time.perf_counter()
        self.seen: set[tuple[bytes, int, int]] = set()  # inbox entries handled: (name, owner uid, ctime ns)
        self.pending_chapters: set[str] = set(settings.chapters)  # to reconcile next round (all, at start)
        self.wake_at: _dt.datetime | None = None  # the earliest time a held submission is due
        self.noticed: set[tuple[str, str, str]] = set()  # held notices released (student, chapter, key)
        self.failed: set[tuple[str, str, str]] = set()  # the grader failed on these: not retried until restart
        self.prepared: set[str] = set()
        self.dues: dict | None = None  # the chapters' due dates as last read (a change reconciles the chapter)
        self.outputs_due: float | None = None  # monotonic time of the next class-outputs refresh
        self.outputs_latest: float | None = None  # ... and the latest it may wait to
        self.failures: list = []
        self.backend = None
        self.writer = None
        self.maxima: dict[str, float] = {}

    # -- life cycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> "Service":
        # Loaded here: nbgrader and SQLAlchemy (the gradebook), as in grade once there is something to grade.
        from .gradebook import GradebookWriter
        from .late_policy import Policy

        s = self.settings
        if s.scheduler:
            self.backend = DaskBackend(s.scheduler, self.course, self.course.chapters(), engine_module_name(),
                                       s.limits)
        else:
            self.backend = LocalBackend(s.workers, self.course.root, engine_module_name(), s.limits, keep_warm=True)
        self.backend.start(s.workers)  # warm before the first submission: no cold start per submission
        self.writer = GradebookWriter(self.db_url, policy=Policy.for_course(self.course)).__enter__()
        self.maxima = chapter_maxima(self.writer, self.intake.sources, s.chapters)
        return self

    def __exit__(self, *exc) -> None:
        if self.backend is not None:
            self.backend.stop()
        if self.writer is not None:
            self.writer.close()

    def run(self, stop=lambda: False) -> None:
        while not stop():
            worked = self.step()
            if not worked:
                time.sleep(self.settings.poll_s)

    # -- one round --------------------------------------------------------------------------------------------
    def step(self) -> bool:
        """Collect, grade, release, refresh: True when something was done (the next round starts at once)."""
        now = utc_now()
        if self.wake_at is not None and now >= self.wake_at:
            self.wake_at = None
            self.pending_chapters.update(self.settings.chapters)
        dues = self.writer.due_dates()  # an instructor may set or move a due date while the service runs
        if self.dues is not None and dues != self.dues:
            self.pending_chapters.update(ch for ch in self.settings.chapters
                                         if dues.get(ch) != self.dues.get(ch))
        self.dues = dues
        self.collect_new()
        worked = False
        if self.pending_chapters:
            chapters, self.pending_chapters = sorted(self.pending_chapters), set()
            worked = self.reconcile(chapters) > 0
        if not worked and self.outputs_due is not None:
            t = time.monotonic()
            if t >= self.outputs_due or t >= (self.outputs_latest or t):
                self.refresh_outputs()
                worked = True
        return worked

    def collect_new(self) -> None:
        """Collect every inbox entry no arrival record names yet, each learner's latest (autograder/arrivals.py)."""
        inbound = self.settings.exchange / COURSE_ID / "inbound"
        fresh: dict[str, list[tuple[bytes, int, int]]] = {}
        try:
            entries = list(os.scandir(os.fsencode(inbound)))
        except OSError:
            return  # no inbox yet (nothing released or submitted): nothing to collect
        wanted = {ch.encode() for ch in self.settings.chapters}
        wall = time.time()
        for entry in entries:
            parts = entry.name.rsplit(b"+", 3)
            if len(parts) < 3 or parts[1] not in wanted:
                continue
            try:
                st = os.lstat(entry.path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            mark = (entry.name, st.st_uid, st.st_ctime_ns)
            if mark in self.seen:
                continue
            if not os.path.lexists(os.path.join(entry.path, b"submission_secret.txt")) \
                    and wall - st.st_ctime < SETTLE_S:
                continue  # being written (see SETTLE_S): next round
            fresh.setdefault(parts[1].decode(), []).append(mark)
        if not fresh:
            return
        recorded = arrivals.recorded_entries(arrivals.Ledger.read(arrivals.ledger_path(self.course)))
        for chapter, marks in sorted(fresh.items()):
            wanted_ids = {arrivals.entry_id(e) for e in arrivals.scan_inbox(inbound, chapter)} - recorded
            if wanted_ids:
                done = arrivals.collect(self.course, chapter, self.settings.exchange, update=True, log=self.log,
                                        only=wanted_ids)
                if done.written:
                    self.pending_chapters.add(chapter)
            self.seen.update(marks)  # collected, recorded before, or refused (a change of the entry retries it)

    def reconcile(self, chapters: list[str]) -> int:
        """Grade and release what the files say is due for ``chapters``; returns how many results were recorded."""
        tasks = self.intake.tasks(chapters)
        done = self.writer.done_keys()
        dues = self.writer.due_dates()
        now = utc_now()
        recorded = 0
        to_grade: list[Task] = []
        for task in tasks:
            ident = (task.student, task.chapter, task.key)
            if done.get((task.student, task.chapter)) == task.key:
                if not self.journal.released(*ident):
                    self.release_graded(task)  # graded, killed before its release: release it now
                continue
            if ident in self.failed:
                continue
            decision = decide(self.settings.budget, self.journal, task.student, task.chapter, now,
                              dues.get(task.chapter))
            if decision.grade_now:
                to_grade.append(task)
            else:
                self.hold(task, decision)
        missing = [t for t in to_grade if t.refusal]
        runnable = [t for t in to_grade if not t.refusal]
        if runnable:
            unprepared = sorted({t.chapter for t in runnable} - self.prepared)
            if unprepared:
                self.backend.prepare(unprepared)  # the engine's reference profile, once per chapter
                self.prepared.update(unprepared)
            recorder = Recorder(self.course, self.writer, self.summary, self.started)
            for task, result in self.backend.run(runnable):
                recorded += self.finish(task, recorder.record(task, result), result)
        recorder = Recorder(self.course, self.writer, self.summary, self.started)
        for task in missing:
            recorded += self.finish(task, recorder.record_missing(task, self.maxima[task.chapter]), None)
        return recorded

    def finish(self, task: Task, recorded, result) -> int:
        if recorded is None:
            self.failed.add((task.student, task.chapter, task.key))
            self.failures.append({"student": task.student, "chapter": task.chapter,
                                  "reason": result.reason if result is not None else "not recorded"})
            self.log(f"FAILED {task.student}/{task.chapter}: the grader could not grade it (the instructor's "
                     "grade command retries it)")
            return 0
        self.release_graded(task)
        self.log(f"graded {task.student}/{task.chapter}: {recorded.score:g}/{recorded.max_score:g}")
        t = time.monotonic()
        self.outputs_due = t + self.settings.refresh_s
        if self.outputs_latest is None:
            self.outputs_latest = t + REFRESH_EVERY * self.settings.refresh_s
        return 1

    def release_graded(self, task: Task) -> None:
        page = graded_page(self.course.grading, task.student, task.chapter)
        if page is None:
            return  # a result without a page (an engine that renders none): nothing to release
        release(self.settings.exchange, task.exchange, task.chapter, page)
        self.journal.add(Release(task.student, task.chapter, task.key, utc_now()))

    def hold(self, task: Task, decision) -> None:
        ident = (task.student, task.chapter, task.key)
        if ident not in self.noticed:
            with speaking(class_language(self.course)):  # the learner reads it: the class's language
                page = held_page(task.chapter, task.arrival.describe() if task.arrival else "", decision.used,
                                 self.settings.budget.describe(), decision.until, decision.reason)
            release(self.settings.exchange, task.exchange, task.chapter, page)
            self.noticed.add(ident)
            self.log(f"held {task.student}/{task.chapter} until {decision.until:%Y-%m-%d %H:%M:%S} UTC "
                     f"(feedback budget: {self.settings.budget.describe()})")
        if self.wake_at is None or decision.until < self.wake_at:
            self.wake_at = decision.until

    def refresh_outputs(self) -> None:
        """The class outputs from the gradebook as it is now, then the LMS exports."""
        with stop_on_sigterm.finishing():  # a SIGTERM here waits for the outputs (see StopOnSigterm)
            from .export import export  # the exports read the gradebook through nbgrader: loaded when first needed

            self.outputs_due = self.outputs_latest = None
            summary = Summary(failures=list(self.failures))
            rows = self.writer.results()
            write_class_outputs(self.course, self.course.chapters(), self.submitted, rows, summary,
                                similarity=self.settings.similarity, log=self.log)
            export(self.course, "all", db_url=self.db_url)
            self.failures = []


def hold_lock(course: Course):
    """The service's lock (an open file holding ``flock``), or None when another service holds it."""
    path = course.grading / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


class StopOnSigterm:
    """SIGTERM stops the service at once (everything it does is kill-safe), except inside ``finishing()``: a stop
    raised in the middle of an import (the class report loads matplotlib) came out as "ImportError: initialization
    failed" and the service exited 1 instead of stopping. There the stop waits for the block's end (seconds)."""

    def __init__(self):
        self.deferring = False
        self.asked = False

    def __call__(self, signum, frame):
        if self.deferring:
            self.asked = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def finishing(self):
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.asked:
            self.asked = False
            raise KeyboardInterrupt


stop_on_sigterm = StopOnSigterm()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder serve",
                                     description="Grade each submission as it arrives in the exchange and release "
                                                 "its feedback (see autograder/serve.py).")
    parser.add_argument("--exchange", type=Path, metavar="DIR",
                        help="nbgrader's exchange root (default: the course configuration's Exchange.root)")
    parser.add_argument("--chapters", nargs="*", metavar="CHAPTER", help="only these chapters (default: all)")
    parser.add_argument("--budget", type=int, default=5, metavar="N",
                        help="graded feedback pages per learner and chapter within --per seconds (default 5)")
    parser.add_argument("--per", type=float, default=3600.0, metavar="SECONDS", help="the budget's window (3600)")
    parser.add_argument("--no-budget", action="store_true", help="grade and release every submission at once")
    parser.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between looks at the inbox")
    parser.add_argument("--refresh", type=float, default=30.0, metavar="S",
                        help="refresh the class report and exports this long after the last result (default 30)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="local worker processes, one warm engine each (default 1)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="grade on this Dask distributed cluster")
    parser.add_argument("--db", metavar="URL", help="gradebook URL (default: sqlite grading/gradebook.db)")
    parser.add_argument("--course", type=Path, metavar="DIR", help="course root (default: this repository)")
    parser.add_argument("--no-similarity", action="store_true", help="leave the similarity check out of refreshes")
    parser.add_argument("--once", action="store_true",
                        help="one round (collect, grade, release, refresh), then exit: for cron and tests")
    # The engine's module: its isolation options and preflight, as for grade.
    from .isolation import IsolationUnavailable, add_isolation_arguments, preflight

    add_isolation_arguments(parser)
    args = parser.parse_args(argv)
    if args.budget < 1 and not args.no_budget:
        parser.error("--budget must be at least 1 (--no-budget: no limit)")
    if args.per <= 0:
        parser.error("--per must be a positive number of seconds")
    course = Course(args.course) if args.course else Course()
    unknown = [c for c in args.chapters or [] if c not in course.chapters()]
    if unknown:
        parser.error(f"unknown chapter(s) {unknown}; the course has {course.chapters()}")
    limits = {k: v for k, v in (("isolation", args.isolation), ("require", args.require)) if v and v != "auto"}
    if not args.scheduler and engine_module_name() == "autograder.isolation":
        try:
            print(preflight(args.isolation, args.require), flush=True)
        except IsolationUnavailable as err:
            print(f"serve stopped: {err}", file=sys.stderr)
            return 2
    settings = Settings(exchange=args.exchange or arrivals.exchange_root(course),
                        chapters=list(args.chapters or course.chapters()),
                        budget=Budget(None if args.no_budget else args.budget, args.per),
                        poll_s=args.poll, refresh_s=args.refresh, workers=max(1, args.workers),
                        scheduler=args.scheduler, db_url=args.db, limits=limits, similarity=not args.no_similarity)
    lock = hold_lock(course)
    if lock is None:
        print(f"serve stopped: another service holds {course.grading / LOCK}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(line, flush=True)

    signal.signal(signal.SIGTERM, stop_on_sigterm)
    log(f"serving {course.root} from {settings.exchange} ({len(settings.chapters)} chapter(s); feedback budget: "
        f"{settings.budget.describe()})")
    try:
        with Service(course, settings, log=log) as service:
            if args.once:
                while service.step():
                    pass
                if service.outputs_due is not None:
                    service.refresh_outputs()
            else:
                service.run()
    except KeyboardInterrupt:
        log("stopped: everything graded so far is recorded; starting again catches up")
        return 0
    finally:
        lock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
