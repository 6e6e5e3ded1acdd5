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

from .batch_support import CHAPTER, child_env
from .conftest import copy_reference_cache

pytestmark = pytest.mark.sandbox

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

    instructor("collect", CHAPTER)
    for name in learners:
        assert (course.grading / "submitted" / name / CHAPTER / f"{CHAPTER}.ipynb").is_file()
        assert (course.grading / "submitted" / name / CHAPTER / "timestamp.txt").is_file()

    _run([sys.executable, "-m", "autograder", "grade", CHAPTER, "--course", str(course.root), "--no-progress"],
         env=child_env(), cwd=course.root)
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
