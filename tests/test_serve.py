"""Grading on submission (issue 42, item 3): ``python -m autograder serve`` watches the exchange, grades each
submission as it arrives and releases its learner's feedback, within a feedback budget, and survives ``kill -9``.

- The budget's decisions (unit): within it a submission is graded now; past it, held until the window frees a
  place or until the due date if that comes first; after the due date nothing is held.
- Two real learners (throwaway accounts, nbgrader's own fetch/submit/fetch_feedback under their uids) get their
  own graded feedback with no instructor step; a submission past the budget gets a page saying when it will be
  graded, and is graded when the instructor's due date passes; grades.csv and the LMS exports appear.
- A burst of submissions with the service killed (SIGKILL) five times while it works, then started again: every
  submission graded, one arrival record per inbox entry, one feedback release per graded submission, and a
  gradebook identical to an uninterrupted run over the same inbox.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import pwd
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from autograder import feedback_budget, serve, submissions
from autograder.course import Course
from autograder.export import FORMATS
from autograder.feedback_budget import Budget, Journal, Release, decide
from autograder.feedback_release import page_name

from . import inbox
from .batch_support import CLASS_CHAPTER, child_env, comparable, snapshot
from .conftest import copy_reference_cache
from .test_exchange import AS_LEARNER, COURSE_ID

# Chapter 1, the cheapest real chapter to grade: the service's collect, budget, release and crash safety are the
# same for every chapter.
CHAPTER = CLASS_CHAPTER
T0 = _dt.datetime(2026, 11, 2, 9, 0, 0)


def _journal(tmp_path: Path, *minutes_after_t0: float) -> Journal:
    journal = Journal.read(tmp_path / "feedback.jsonl")
    for i, m in enumerate(minutes_after_t0):
        journal.add(Release("ada", CHAPTER, f"key{i}", T0 + _dt.timedelta(minutes=m)))
    return journal


@pytest.mark.unit
def test_within_the_budget_a_submission_is_graded_now_and_past_it_held_until_a_place_frees(tmp_path):
    budget = Budget(count=2, per_s=3600)
    journal = _journal(tmp_path, 0, 10)
    assert decide(budget, _journal(tmp_path / "x", 0), "ada", CHAPTER, T0 + _dt.timedelta(minutes=20), None).grade_now
    held = decide(budget, journal, "ada", CHAPTER, T0 + _dt.timedelta(minutes=20), None)
    assert not held.grade_now and held.used == 2
    assert held.until == T0 + _dt.timedelta(minutes=60), "the oldest release in the window leaves it at 10:00"
    # an hour after the first release one place is free again
    assert decide(budget, journal, "ada", CHAPTER, T0 + _dt.timedelta(minutes=61), None).grade_now
    # another learner, or another chapter, has a budget of their own
    assert decide(budget, journal, "bob", CHAPTER, T0 + _dt.timedelta(minutes=20), None).grade_now
    assert decide(budget, journal, "ada", "04_self_attention", T0 + _dt.timedelta(minutes=20), None).grade_now


@pytest.mark.unit
def test_a_held_submission_is_graded_at_the_due_date_when_sooner_and_nothing_is_held_after_it(tmp_path):
    budget = Budget(count=1, per_s=3600)
    journal = _journal(tmp_path, 0)
    due = T0 + _dt.timedelta(minutes=30)
    held = decide(budget, journal, "ada", CHAPTER, T0 + _dt.timedelta(minutes=5), due)
    assert not held.grade_now and held.until == due and "due date" in held.reason
    assert decide(budget, journal, "ada", CHAPTER, due, due).grade_now
    assert decide(Budget(count=None), journal, "ada", CHAPTER, T0, None).grade_now, "no budget: never held"


@pytest.mark.unit
def test_a_stop_asked_while_the_class_outputs_are_written_waits_for_them():
    """SIGTERM stops serve at once, except while it writes the class outputs: a stop raised inside the report's
    matplotlib import came out as "ImportError: initialization failed" and serve exited 1. There it is kept and
    raised when the outputs are written."""
    stop = serve.StopOnSigterm()
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGTERM, None)
    written = []
    with pytest.raises(KeyboardInterrupt):
        with stop.finishing():
            stop(signal.SIGTERM, None)  # kept, not raised here
            written.append("outputs")
    assert written == ["outputs"]
    with stop.finishing():  # the flag does not linger into the next block
        pass


@pytest.mark.unit
def test_the_journal_survives_a_torn_line_and_a_restart(tmp_path):
    journal = _journal(tmp_path, 0, 1)
    path = feedback_budget.journal_path(Course(tmp_path))
    path.parent.mkdir(parents=True)
    path.write_bytes((tmp_path / "feedback.jsonl").read_bytes() + b'{"student": "ada", "chap')  # killed mid-line
    again = Journal.read(path)
    assert [r.key for r in again.releases] == ["key0", "key1"] and again.released("ada", CHAPTER, "key1")
    again.add(Release("ada", CHAPTER, "key2", T0))
    assert [r.key for r in Journal.read(path).releases] == ["key0", "key1", "key2"]
    assert journal.released("ada", CHAPTER, "key0") and not journal.released("ada", CHAPTER, "key9")
    assert Budget(5, 3600).describe() == "5 per chapter per hour"
    assert Budget(3, 1800).describe() == "3 per chapter per 30 minutes"


# -- the service, end to end ------------------------------------------------------------------------------------

def _run(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert done.returncode == 0, f"{cmd[:6]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


class Served:
    """``python -m autograder serve`` in the background on a course copy; its output in a log file."""

    def __init__(self, course: Course, exchange: Path, *args: str, env: dict | None = None):
        self.course, self.log_path = course, course.root / f"serve-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder", "serve", "--course", str(course.root), "--exchange", str(exchange),
             "--chapters", CHAPTER, "--poll", "0.2", *args],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=course.root, env=env or child_env(),
            start_new_session=True)

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, what: str, condition, timeout: float = 420):
        """Poll ``condition`` until true (a generous deadline: never a race against the service's speed)."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"serve exited {self.proc.returncode} waiting for {what}:\n" \
                                             + self.output()[-4000:]
            assert time.monotonic() < deadline, f"no {what} after {timeout} s:\n" + self.output()[-4000:]
            time.sleep(0.05)  # the conditions are file and sqlite reads: poll often, never wait long past one

    def kill(self) -> None:
        """SIGKILL the service alone; its workers and their sandboxes must follow it (PR_SET_PDEATHSIG)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()
        deadline = time.monotonic() + 60
        while _group(self.proc.pid) and time.monotonic() < deadline:  # a scan of every process: not too often
            time.sleep(0.1)
        left = _group(self.proc.pid)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes outlived the killed service: {left}"

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        self.log.close()
        return code


def _group(pgid: int) -> list[int]:
    """The live processes of a process group (zombies are gone already)."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def _learner(name: str, exchange: Path, *args: str) -> str:
    return _run([sys.executable, "-c", AS_LEARNER, name, *args, f"--course={COURSE_ID}", f"--Exchange.root={exchange}",
                 "--log-level=WARN"], env=dict(child_env(), JUPYTER_CONFIG_PATH=""), cwd="/")


def _cached_secret(name: str) -> str:
    """The secret of the learner's latest submission, as their own nbgrader cache holds it (fetch_feedback's)."""
    cache = Path(pwd.getpwnam(name).pw_dir) / ".local/share/jupyter/nbgrader_cache" / COURSE_ID
    latest = sorted(cache.glob(f"{name}+{CHAPTER}+*"), key=lambda p: p.name.split("+")[2])[-1]
    return (latest / "submission_secret.txt").read_text()


def _page_in_exchange(exchange: Path, secret: str) -> Path:
    return exchange / COURSE_ID / "feedback" / page_name({"submission_secret.txt": secret.encode()}, CHAPTER)


def _fetched(name: str) -> str:
    """The learner's fetched feedback page of their latest submission."""
    pages = sorted((Path(pwd.getpwnam(name).pw_dir) / CHAPTER / "feedback").glob("*/*.html"))
    return pages[-1].read_text()


@pytest.mark.sandbox
@pytest.mark.timeout(1500)
def test_learners_get_their_own_feedback_on_submission_and_the_budget_holds_the_rest(tmp_path):
    course = Course().copy_to(tmp_path / "course")
    copy_reference_cache(course.root)
    env = course.nbgrader_env()
    with inbox.accounts(2, "v") as (good, bad), inbox.exchange() as exchange:
        ex = [f"--Exchange.root={exchange}", "--log-level=WARN"]
        _run([sys.executable, "-m", "nbgrader", "db", "assignment", "add", CHAPTER, *ex], env=env, cwd=course.root)
        _run([sys.executable, "-m", "nbgrader", "release_assignment", CHAPTER, *ex], env=env, cwd=course.root)
        served = Served(course, exchange, "--budget", "1", "--per", "3600", "--refresh", "1", "--no-similarity")
        try:
            served.wait_for("start", lambda: "serving" in served.output())
            mistake = submissions.load_mistakes(course, CHAPTER)[0]
            answers = {good: submissions.reference(course, CHAPTER),
                       bad: submissions.with_mistake(course, CHAPTER, mistake)}
            for name in (good, bad):
                _learner(name, exchange, "fetch_assignment", CHAPTER)
                pw = pwd.getpwnam(name)
                path = Path(pw.pw_dir) / CHAPTER / f"{CHAPTER}.ipynb"
                nbformat.write(answers[name], path)
                os.chown(path, pw.pw_uid, pw.pw_gid)
                _learner(name, exchange, "submit", CHAPTER)
            # No instructor step from here: the service collects, grades and releases.
            for name in (good, bad):
                page = _page_in_exchange(exchange, _cached_secret(name))
                served.wait_for(f"{name}'s feedback", page.is_file)
                _learner(name, exchange, "fetch_feedback", CHAPTER)
            good_page, bad_page = _fetched(good), _fetched(bad)
            with sqlite3.connect(course.root / "grading" / "gradebook.db") as db:
                rows = db.execute("SELECT student, score, max_score FROM autograder_result").fetchall()
            scores = {student: score for student, score, _ in rows}
            top = rows[0][2]
            assert scores[good] == top > scores[bad] >= 0, rows
            assert f"{scores[good]:g}" in good_page and bad not in good_page
            assert f"{scores[bad]:g}" in bad_page and good not in bad_page
            assert "BEGIN HIDDEN TESTS" not in good_page + bad_page

            # The budget is 1 per hour: the bad learner's corrected notebook is kept, with a page saying when.
            pw = pwd.getpwnam(bad)
            nbformat.write(answers[good], Path(pw.pw_dir) / CHAPTER / f"{CHAPTER}.ipynb")
            _learner(bad, exchange, "submit", CHAPTER)
            held = _page_in_exchange(exchange, _cached_secret(bad))
            served.wait_for("the held notice", held.is_file)
            _learner(bad, exchange, "fetch_feedback", CHAPTER)
            notice = _fetched(bad)
            assert "your submission is kept" in notice and "will be graded at about" in notice, notice
            assert "1 per chapter per hour" in notice
            # The instructor sets the due date, which has just passed: the held submission is graded now.
            due = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=1)).isoformat(timespec="seconds")
            _run([sys.executable, "-m", "autograder", "deadlines", CHAPTER, "--due", due, "--course", str(course.root)],
                 env=child_env(), cwd=course.root)
            served.wait_for("the held submission graded",
                            lambda: "kept" not in held.read_text() and f"{top:g}" in held.read_text())
            served.wait_for("grades.csv and the exports",
                            lambda: (course.grading / "export" / "canvas_grades.csv").is_file()
                            and (course.grading / "grades.csv").is_file())
            assert served.stop() == 0
        finally:
            if served.proc.poll() is None:
                served.kill()
    log = served.output()
    lines = log.splitlines()
    assert sum(ln.startswith("graded ") for ln in lines) == 3 and sum(ln.startswith("held ") for ln in lines) == 1, log


BURST = 10
KILLS = 5


def _count_lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_bytes().split(b"\n") if line.strip())
    except FileNotFoundError:
        return 0


@pytest.mark.sandbox
@pytest.mark.timeout(1200)
def test_killed_five_times_during_a_burst_it_loses_nothing_and_matches_an_uninterrupted_run(tmp_path):
    """The stub engine (tests/stub_engine.py) takes 0.3 s a notebook and scores each notebook its own way: the
    service's crash safety is the pipeline's and the records', not the sandbox's."""
    env = dict(child_env(), AUTOGRADER_ENGINE="tests.stub_engine", STUB_ENGINE_SECONDS="0.3", STUB_ENGINE_VARIED="1")
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    killed_course = Course().copy_to(tmp_path / "killed")
    calm_course = Course().copy_to(tmp_path / "calm")
    with inbox.accounts(BURST, "k") as names, inbox.exchange() as exchange:
        for i, name in enumerate(names):
            nb = submissions.reference(killed_course, CHAPTER)
            nb.cells.append(nbformat.v4.new_markdown_cell(f"learner {i}"))  # every notebook its own bytes
            inbox.submit(exchange, name, CHAPTER, nb)
        ledger = killed_course.grading / "arrivals.jsonl"
        journal = feedback_budget.journal_path(killed_course)
        db = killed_course.grading / "gradebook.db"

        def progress() -> int:
            rows = 0
            if db.is_file():
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
                    try:
                        rows = con.execute("SELECT COUNT(*) FROM autograder_result").fetchone()[0]
                    except sqlite3.OperationalError:
                        rows = 0
            return _count_lines(ledger) + rows + _count_lines(journal)

        for kill in range(KILLS):
            served = Served(killed_course, exchange, "--no-budget", "--refresh", "0.5", "--no-similarity", env=env)
            before = progress()
            # Kill once it has done 1-3 more things (an arrival recorded, a result, a release): at a random point
            # of its work, chosen by what it did, not by how fast it did it.
            served.wait_for("progress", lambda: progress() >= before + rng.randint(1, 3) or progress() == 3 * BURST)
            served.kill()
        served = Served(killed_course, exchange, "--no-budget", "--refresh", "0.5", "--no-similarity", env=env)
        served.wait_for("every release", lambda: _count_lines(journal) >= BURST)
        # grades.csv is a refresh's first output and the LMS exports its last: stopping between them interrupted the
        # report's matplotlib import (serve exited 1, seen once on a loaded machine), so wait for all of them
        exports = [killed_course.grading / "export" / name for name in FORMATS.values()]
        served.wait_for("the class outputs", lambda: (killed_course.grading / "grades.csv").is_file()
                        and all(path.is_file() for path in exports))
        assert served.stop() == 0

        # the same inbox, one run, never interrupted
        done = subprocess.run([sys.executable, "-m", "autograder", "serve", "--once", "--no-budget", "--no-similarity",
                               "--course", str(calm_course.root), "--exchange", str(exchange), "--chapters", CHAPTER],
                              capture_output=True, text=True, timeout=600, cwd=calm_course.root, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        records = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
        assert sorted(r["student"] for r in records) == sorted(names), \
            f"one arrival record per submission (seed {seed}): {sorted(r['student'] for r in records)}"
        releases = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
        assert sorted(r["student"] for r in releases) == sorted(names), f"one release per result (seed {seed})"
        pages = sorted((exchange / COURSE_ID / "feedback").glob("*.html"))
        assert len(pages) == BURST
        killed, calm = comparable(snapshot(killed_course.db_url)), comparable(snapshot(calm_course.db_url))
        assert len(killed["results"]) == BURST
        assert len({r["score"] for r in killed["results"].values()}) > 1, "the stub scores notebooks apart"
        assert killed == calm, f"the killed service's gradebook differs from an uninterrupted run's (seed {seed})"
