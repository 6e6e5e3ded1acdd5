"""A term on one machine through nbgrader's exchange, with two real throwaway accounts (issue 15):
release_assignment, fetch_assignment as each learner, one learner completes the notebook from the reference and
the other makes a catalogued mistake, submit as each, collect, ``python -m autograder grade``, release_feedback,
fetch_feedback as each. At the end each learner has their own feedback and nobody else's (and cannot read the
other's home), the feedback shows no hidden test, and the scores are right.

The learners' commands run under the learners' own uid and gid (``useradd -m``). They cannot ``su`` into this
course's Python (its interpreter lives under a folder only root may enter), so each learner command is a
Python process that loads nbgrader as root, then drops to the learner's uid, gid and groups for good before
nbgrader reads or writes a file.
"""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder import submissions
from autograder.course import Course

from .batch_support import CLASS_CHAPTER, child_env
from .conftest import copy_reference_cache

pytestmark = pytest.mark.sandbox

# Chapter 1, the cheapest real chapter to grade: the exchange's steps, the accounts' separation and the collect
# records are the same for every chapter (chapter 1 has hidden tests too, which the feedback must not show).
CHAPTER = CLASS_CHAPTER

COURSE_ID = "attention-from-scratch"

# Runs `nbgrader ARGS` as the learner named in argv[1]: imports first (as root), then setgroups/setgid/setuid.
AS_LEARNER = r"""
import os, pwd, sys
import nbgrader.apps, nbgrader.apps.fetchassignmentapp, nbgrader.apps.submitapp, nbgrader.apps.fetchfeedbackapp
import nbgrader.exchange.default, nbgrader.exchange.default.fetch_assignment, nbgrader.exchange.default.submit
import nbgrader.exchange.default.fetch_feedback, nbgrader.coursedir, nbgrader.auth, nbgrader.utils
import nbformat, nbformat.v4, jupyter_core.paths, traitlets.config.loader, shutil, glob, datetime, hashlib, json
import encodings.idna, email, pathlib, tempfile, uuid
pw = pwd.getpwnam(sys.argv[1])
os.initgroups(pw.pw_name, pw.pw_gid)
os.setgid(pw.pw_gid)
os.setuid(pw.pw_uid)
assert os.getuid() == pw.pw_uid and os.geteuid() == pw.pw_uid
os.environ.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name)
os.environ.pop("JUPYTER_CONFIG_PATH", None)
os.chdir(pw.pw_dir)
sys.argv = ["nbgrader", *sys.argv[2:]]
from nbgrader.apps.nbgraderapp import NbGraderApp
NbGraderApp.launch_instance()
"""


def _run(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert done.returncode == 0, f"{cmd[:6]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture
def learners():
    names = [f"agl{secrets.token_hex(3)}{who}" for who in ("a", "b")]
    try:
        for name in names:
            _run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/sh", name])  # private homes
        yield names
    finally:
        for name in names:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


@pytest.fixture
def exchange():
    root = Path(tempfile.mkdtemp(prefix="nbgrader-exchange-", dir="/tmp"))
    os.chmod(root, 0o1777)  # nbgrader's exchange: everyone may enter, the sticky bit keeps files apart
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(1500)
def test_a_term_through_the_exchange(tmp_path, learners, exchange):
    course = Course().copy_to(tmp_path / "course")
    copy_reference_cache(course.root)
    env = course.nbgrader_env()
    ex = [f"--Exchange.root={exchange}", "--log-level=WARN"]

    def instructor(*args):
        return _run([sys.executable, "-m", "nbgrader", *args, *ex], env=env, cwd=course.root)

    def learner(name, *args):
        return _run([sys.executable, "-c", AS_LEARNER, name, *args, f"--course={COURSE_ID}", *ex],
                    env=dict(child_env(), JUPYTER_CONFIG_PATH=""), cwd="/")

    instructor("db", "assignment", "add", CHAPTER)
    instructor("release_assignment", CHAPTER)

    good, bad = learners
    mistake = submissions.load_mistakes(course, CHAPTER)[0]
    answers = {good: submissions.reference(course, CHAPTER),
               bad: submissions.with_mistake(course, CHAPTER, mistake)}
    for name in learners:
        learner(name, "fetch_assignment", CHAPTER)
        pw = pwd.getpwnam(name)
        path = Path(pw.pw_dir) / CHAPTER / f"{CHAPTER}.ipynb"
        fetched = nbformat.read(path, as_version=4)
        assert fetched.cells and "BEGIN HIDDEN TESTS" not in nbformat.writes(fetched), "the release leaks"
        nbformat.write(answers[name], path)  # the learner completes their notebook
        os.chown(path, pw.pw_uid, pw.pw_gid)
        learner(name, "submit", CHAPTER)

    # the course's collect: nbgrader's, with each submission's owner and arrival recorded (autograder/arrivals.py)
    collected = _run([sys.executable, "-m", "autograder", "collect", CHAPTER, "--exchange", str(exchange)],
                     env=child_env(), cwd=course.root)
    assert "2 submission(s) collected" in collected, collected
    for name in learners:
        assert (course.grading / "submitted" / name / CHAPTER / f"{CHAPTER}.ipynb").is_file()
        assert (course.grading / "submitted" / name / CHAPTER / "timestamp.txt").is_file()

    # one worker: two notebooks, and a second worker would only add an engine start (workers: test_batch)
    _run([sys.executable, "-m", "autograder", "grade", CHAPTER, "--course", str(course.root), "--no-progress",
          "--workers", "1"], env=child_env(), cwd=course.root)
    import csv

    with open(course.grading / "grades.csv", newline="") as f:
        scores = {r["student"]: r for r in csv.DictReader(f)}
    assert float(scores[good]["score"]) == float(scores[good]["max_score"]) > 0
    assert 0 <= float(scores[bad]["score"]) < float(scores[bad]["max_score"])

    instructor("release_feedback", CHAPTER)
    hidden = [line.strip() for c in nbformat.read(course.source_notebook(CHAPTER), as_version=4).cells
              if "BEGIN HIDDEN TESTS" in c.source
              for line in c.source.split("BEGIN HIDDEN TESTS", 1)[1].splitlines()[1:]
              if len(line.strip()) > 25 and "END HIDDEN TESTS" not in line]
    assert hidden, "the chapter has hidden tests to look for"
    for name in learners:
        learner(name, "fetch_feedback", CHAPTER)
        home = Path(pwd.getpwnam(name).pw_dir)
        pages = sorted((home / CHAPTER / "feedback").rglob("*.html"))
        assert len(pages) == 1, f"{name} fetched {pages}"
        page = pages[0].read_text()
        other = learners[1 - learners.index(name)]
        assert other not in page, f"{name}'s feedback mentions {other}"
        score = f"{float(scores[name]['score']):g}"
        assert score in page, f"{name}'s feedback does not show their score {score}"
        leaked = [line for line in hidden if line in page]
        assert not leaked, f"hidden tests in {name}'s feedback: {leaked[:2]}"
        assert pages[0].stat().st_uid == pwd.getpwnam(name).pw_uid
    # Nobody can read another learner's feedback: not in their home, not by listing the exchange's feedback.
    other_page = next((Path(pwd.getpwnam(bad).pw_dir) / CHAPTER / "feedback").rglob("*.html"))
    assert "PermissionError" in _as(good, f"open({str(other_page)!r}).read()")
    assert "PermissionError" in _as(good, f"os.listdir({str(exchange / COURSE_ID / 'feedback')!r})")


def _as(name: str, statement: str) -> str:
    """Run one Python statement as the learner; its stderr (empty when it worked)."""
    code = ("import os, pwd; pw = pwd.getpwnam(%r); os.initgroups(pw.pw_name, pw.pw_gid); os.setgid(pw.pw_gid); "
            "os.setuid(pw.pw_uid); %s" % (name, statement))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return done.stderr


LATE_POLICY = '\nc.LateSubmissionPlugin.penalty_method = "zero"\n'


@pytest.mark.timeout(1200)
def test_collect_records_when_and_whose_not_what_the_learner_wrote(tmp_path, learners, exchange):
    """Issue 41, class 2, through a real exchange with two accounts. One learner submits before the due date,
    the other after it and then covers their tracks: an earlier date in their inbox entry's timestamp.txt,
    every file time set back before the due date (``touch -d``), and a second entry named for the first learner
    with a later claimed time (stock nbgrader's collect takes that one as the first learner's). ``python -m
    autograder collect`` records each submission under the account that owns its entry, at the time the
    kernel's change times allow: under the "zero" policy the late one scores zero, the owner mismatch is
    flagged, and the first learner keeps their own notebook and their full score."""
    import csv
    import datetime as dt
    import json
    import time

    course = Course().copy_to(tmp_path / "course")
    course.grading.mkdir(parents=True, exist_ok=True)
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + LATE_POLICY)
    env = course.nbgrader_env()
    ex = [f"--Exchange.root={exchange}", "--log-level=WARN"]

    def instructor(*args):
        return _run([sys.executable, "-m", "nbgrader", *args, *ex], env=env, cwd=course.root)

    def learner(name, *args):
        return _run([sys.executable, "-c", AS_LEARNER, name, *args, f"--course={COURSE_ID}", *ex],
                    env=dict(child_env(), JUPYTER_CONFIG_PATH=""), cwd="/")

    def submit(name, nb):
        learner(name, "fetch_assignment", CHAPTER)
        pw = pwd.getpwnam(name)
        path = Path(pw.pw_dir) / CHAPTER / f"{CHAPTER}.ipynb"
        nbformat.write(nb, path)
        os.chown(path, pw.pw_uid, pw.pw_gid)
        learner(name, "submit", CHAPTER)

    instructor("db", "assignment", "add", CHAPTER)
    instructor("release_assignment", CHAPTER)
    ontime, late = learners
    reference, blank = submissions.reference(course, CHAPTER), submissions.blank(course, CHAPTER)
    submit(ontime, reference)
    due = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    # Well past the kernel's coarse clock (a change time lags the wall clock by a few milliseconds at most):
    # ordering, not a race. Nothing below depends on how fast it runs.
    time.sleep(1.5)
    submit(late, reference)
    inbound = exchange / COURSE_ID / "inbound"
    (entry,) = inbound.glob(f"{late}+{CHAPTER}+*")
    early = f"{due - dt.timedelta(days=1):%Y-%m-%d %H:%M:%S.%f} UTC"
    before = (due - dt.timedelta(days=1)).replace(tzinfo=dt.timezone.utc).timestamp()
    forged = inbound / f"{ontime}+{CHAPTER}+2099-01-01 00:00:00.000000 UTC+forged"
    handout = exchange / "blank.ipynb"  # a notebook the late learner can read (too large for a command line)
    nbformat.write(blank, handout)
    os.chmod(handout, 0o644)
    # (the learner's process cannot import more modules once it runs as the learner: os only)
    cover_up = (f"e = {str(entry)!r}; open(e + '/timestamp.txt', 'w').write({early!r}); "
                f"f = {str(forged)!r}; os.mkdir(f); "
                f"open(f + '/{CHAPTER}.ipynb', 'wb').write(open({str(handout)!r}, 'rb').read()); "
                f"open(f + '/timestamp.txt', 'w').write('2099-01-01 00:00:00.000000 UTC'); "
                f"open(f + '/submission_secret.txt', 'w').write('ab' * 64); "
                f"[os.utime(os.path.join(d, n), ({before}, {before}), follow_symlinks=False) "
                f"for top in (e, f) for d, dirs, files in os.walk(top) for n in ['.', *dirs, *files]]")
    assert _as(late, cover_up) == ""
    assert entry.stat().st_mtime == before, "the learner set every file time back"

    out = _run([sys.executable, "-m", "autograder", "collect", CHAPTER, "--exchange", str(exchange)],
               env=child_env(), cwd=course.root)
    assert f"{late}: arrived" in out and f"claims another student than the account that owns it: collected as the " \
        f"owner's ({late})" in out, out
    submitted = course.grading / "submitted"
    assert (submitted / ontime / CHAPTER / f"{CHAPTER}.ipynb").read_text().strip() == nbformat.writes(reference), \
        "the first learner keeps their own notebook"
    assert (submitted / late / CHAPTER / f"{CHAPTER}.ipynb").read_text().strip() == nbformat.writes(blank), \
        "the forged entry is the late learner's (their latest claimed)"
    records = {r["student"]: r for r in map(json.loads, (course.grading / "arrivals.jsonl").read_text().splitlines())}
    assert set(records) == {ontime, late}
    assert dt.datetime.fromisoformat(records[ontime]["arrived"]) <= due < dt.datetime.fromisoformat(
        records[late]["arrived"]), (due, records)
    assert records[late]["owner_uid"] == pwd.getpwnam(late).pw_uid and records[late]["claimed_id"] == ontime

    grade_env = dict(child_env(), AUTOGRADER_ENGINE="tests.stub_engine")  # every graded cell passes
    for args in (["deadlines", CHAPTER, "--due", due.isoformat()],
                 ["grade", CHAPTER, "--no-progress", "--no-similarity", "--workers", "1"]):
        _run([sys.executable, "-m", "autograder", *args], env=grade_env, cwd=course.root)
    with open(course.grading / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    full = float(rows[ontime]["score"])
    # The first learner's entry changed 1.5 s before the due date and collect saw it after: within the kernel's
    # ctime lag (a change through a shared mapping can precede its ctime by up to 35 s), so it is held, not on
    # time, until the instructor records the arrival (here: the time collect recorded).
    assert full > 0 and rows[ontime]["final_score"] == "" and "no arrival time the grader can trust" in \
        rows[ontime]["flags"], rows[ontime]
    received = dt.datetime.fromisoformat(records[ontime]["arrived"]).isoformat()
    _run([sys.executable, "-m", "autograder", "deadlines", CHAPTER, "--received", f"{ontime}={received}"],
         env=grade_env, cwd=course.root)
    _run([sys.executable, "-m", "autograder", "grade", CHAPTER, "--no-progress", "--no-similarity", "--workers", "1"],
         env=grade_env, cwd=course.root)
    with open(course.grading / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert float(rows[ontime]["final_score"]) == full and rows[ontime]["flagged"] == "no", rows[ontime]
    assert (float(rows[late]["score"]), float(rows[late]["final_score"])) == (full, 0.0), rows[late]
    assert "claims another student than the account that owns it" in rows[late]["flags"]
    assert rows[late]["learner_claimed_at"] == "2099-01-01 00:00:00.000000 UTC", "the claim is shown, not used"
