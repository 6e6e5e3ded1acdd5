"""nbgrader's formgrader on the gradebook our grader writes (issue 15).

A small chapter-1 class (the reference, a catalogued mistake, the blank release) is graded by
``python -m autograder grade`` (one worker; chapter 1: the cheapest real chapter, and what is tested here is
formgrader on our gradebook, not a chapter); JupyterLab is started on 127.0.0.1 with the course's nbgrader configuration and
formgrader is opened in headless Chromium. Formgrader lists the chapter and each learner's autograded score; a
score typed into formgrader's grading page for the learner with the mistake is saved by formgrader itself, and
``python -m autograder export --format canvas`` then exports the overridden score, the others unchanged.

The class also holds an attacker (issue 24, class 1): a notebook whose outputs and cells carry a script that,
if it ran in formgrader, would give the learner full manual credit through formgrader's API, write a file into
the course through Jupyter's contents API and set ``window.__pwned``. The last test opens that learner's grading
page as an instructor would and finds that nothing ran and no score changed.

The tests share one graded class, server and browser, and run in file order: the first sees the autograded
scores, the second overrides one of them, the third opens the attacker's notebook.
"""
from __future__ import annotations

import csv
import json
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autograder import submissions

from .batch_support import CLASS_CHAPTER, REPO, child_env, run_grade, write
from .browser import Browser
from .conftest import copy_reference_cache
from .test_active_content import attacker_cells

pytestmark = pytest.mark.services

CHAPTER = CLASS_CHAPTER

# A loaded formgrader table has replaced its "Loading, please wait..." placeholder row with the API's data.
TABLE_LOADED = "document.querySelector('tbody tr') && !document.body.innerText.includes('please wait')"


def _wait_for(check, timeout: float, what: str):
    """Poll `check` until it returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course copy whose class was graded by our grader: (course, {learner: role}, the mistake)."""
    course = REPO.copy_to(tmp_path_factory.mktemp("formgrader") / "course")
    copy_reference_cache(course.root)
    mistake = submissions.load_mistakes(course, CHAPTER)[0]
    work = {"ada": submissions.reference(course, CHAPTER),
            "bea": submissions.with_mistake(course, CHAPTER, mistake),
            "cem": submissions.blank(course, CHAPTER),
            "eve": submissions.with_mistake(course, CHAPTER, mistake)}
    work["eve"].cells.extend(attacker_cells())  # a mistake, so full manual credit would raise her score
    for learner, nb in work.items():
        write(course, learner, nb, CHAPTER)
    run_grade(course, "--workers", "1", chapter=CHAPTER)
    with open(course.grading / "grades.csv", newline="") as f:
        scores = {r["student"]: (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(f)}
    assert scores["ada"][0] == scores["ada"][1] > 0, scores  # full marks for the reference
    assert 0 < scores["bea"][0] < scores["bea"][1], scores  # the mistake costs some points, not all
    assert scores["cem"][0] == 0, scores  # nothing for the blank
    assert scores["eve"] == scores["bea"], scores  # the attack's cells earn nothing and cost nothing
    return course, scores, mistake


def _json_file(path: Path):
    """The file's JSON, or None while it is missing or half written."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class Server:
    """JupyterLab on 127.0.0.1 (a port the kernel picks) serving the course copy, with formgrader enabled."""

    def __init__(self, course, runtime: Path):
        self.token = secrets.token_hex(24)
        env = course.nbgrader_env()  # nbgrader reads autograder/nbgrader_config.py: the copy's course and db
        env["JUPYTER_RUNTIME_DIR"] = str(runtime)  # the server's state file lands here, not in ~/.local
        self.log = runtime / "server.log"
        self._log_file = open(self.log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
             "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={course.root}",
             # a private exchange: formgrader's pages check it, and the system-wide one need not exist
             f"--Exchange.root={runtime / 'exchange'}"],
            env=env, cwd=course.root, stdout=self._log_file, stderr=subprocess.STDOUT)
        try:
            # Port 0 lets the kernel pick a free port (no race); the server writes the one it got to its
            # runtime file once it listens.
            path = runtime / f"jpserver-{self.proc.pid}.json"
            info = _wait_for(lambda: self._exited() or _json_file(path), 60, "JupyterLab's runtime file")
            assert not self._exited(), "JupyterLab exited:\n" + self.log.read_text()[-3000:]
            assert info["hostname"] == "127.0.0.1", info
            self.base = f"http://127.0.0.1:{info['port']}"
            _wait_for(lambda: self._exited() or self.api("status") == {"status": True}, 60, "formgrader's API")
            assert not self._exited(), "JupyterLab exited:\n" + self.log.read_text()[-3000:]
        except BaseException:
            self.stop()
            raise

    def _exited(self) -> bool:
        return self.proc.poll() is not None

    def api(self, path: str):
        """GET formgrader's JSON API (None while nothing listens yet; an HTTP error is raised)."""
        req = urllib.request.Request(f"{self.base}/formgrader/api/{path}",
                                     headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, ConnectionError):
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log_file.close()


@pytest.fixture(scope="module")
def server(graded, tmp_path_factory):
    srv = Server(graded[0], tmp_path_factory.mktemp("jupyter-runtime"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    try:
        yield b
    finally:
        b.close()


def _text(page) -> str:
    return page.evaluate("document.body.innerText")


def _table(page, key: str) -> dict[str, dict[str, str]]:
    """The rendered table, as each row's visible text by column heading, by the row's text under `key`."""
    heads = page.evaluate("[...document.querySelectorAll('thead th')].map(th => th.innerText.trim())")
    rows = page.evaluate("[...document.querySelectorAll('tbody tr')]"
                         ".map(tr => [...tr.cells].map(td => td.innerText.trim()))")
    table = [dict(zip(heads, row)) for row in rows]
    return {row[key]: row for row in table}


def test_formgrader_lists_the_chapter_and_our_scores(graded, server, browser):
    course, scores, _ = graded
    # The token in the first URL logs the browser in (a cookie); later pages need no token.
    page = browser.open(f"{server.base}/formgrader/manage_assignments?token={server.token}", TABLE_LOADED)
    chapters = _table(page, "Name")
    assert set(course.chapters()) <= set(chapters), _text(page)
    assert chapters[CHAPTER]["# Submissions"] == str(len(scores)), _text(page)
    assert not page.errors, page.errors

    page = browser.open(f"{server.base}/formgrader/manage_submissions/{CHAPTER}", TABLE_LOADED)
    shown = _table(page, "Student ID")
    assert set(shown) == set(scores), _text(page)
    for learner, (score, max_score) in scores.items():
        assert shown[learner]["Score"] == f"{score:g} / {max_score:g}", shown[learner]
        assert shown[learner]["Status"] == "graded", shown[learner]
    assert not page.errors, page.errors


def _submission_id(browser, server, learner: str) -> str:
    """From formgrader's Manual Grading list of the chapter: the link to `learner`'s grading page."""
    page = browser.open(f"{server.base}/formgrader/gradebook/{CHAPTER}/{CHAPTER}?token={server.token}",
                        TABLE_LOADED)
    href = page.evaluate(f"[...document.querySelectorAll('a.name-shown')]"
                         f".filter(a => a.innerText.trim() === {json.dumps(learner)}).map(a => a.href)[0]")
    assert href, f"no grading link for {learner}:\n{_text(page)}"
    return href.rstrip("/").rsplit("/", 1)[1]


def test_a_manual_score_made_in_formgrader_is_exported(graded, server, browser, tmp_path):
    course, scores, mistake = graded
    cell = mistake.fails[0]  # a graded test cell the mistake makes fail
    sub_id = _submission_id(browser, server, "bea")

    # bea's grading page: formgrader's script has loaded the cell grades once `formgrader.grades.loaded`.
    page = browser.open(f"{server.base}/formgrader/submissions/{sub_id}/",
                        "window.formgrader && formgrader.grades && formgrader.grades.loaded")
    page.evaluate("document.querySelector('.live-notebook .glyphicon-eye-open').click()")  # names are hidden
    assert "bea" in _text(page).split("\n", 2)[1], _text(page)[:300]  # the breadcrumb names the learner
    grade = page.evaluate(f"formgrader.grades.toJSON().find(g => g.name === {json.dumps(cell)})")
    assert grade and grade["auto_score"] == 0 < grade["max_score"], grade  # the cell lost its points
    assert grade["manual_score"] is None
    # The instructor gives full credit: focus the cell's score box, type, leave it (formgrader saves on change).
    new = grade["max_score"]
    box = f"document.querySelector('input.score#' + CSS.escape({json.dumps(cell)}))"
    assert page.evaluate(f"{box}.placeholder") == f"{grade['auto_score']:g}", "the box shows the autograde"
    page.evaluate(f"{box}.focus(), {box}.select()")
    page._send("Input.insertText", text=f"{new:g}")
    page.evaluate(f"{box}.blur()")  # the browser fires `change`, formgrader PUTs the grade

    _wait_for(lambda: (server.api(f"grade/{grade['id']}") or {}).get("manual_score") == new,
              20, f"formgrader to save bea's manual score {new:g}")
    expected = dict(scores)
    expected["bea"] = (scores["bea"][0] + new - grade["auto_score"], scores["bea"][1])
    # Formgrader's list of submissions now shows bea's overridden total, and the others' as they were.
    page = browser.open(f"{server.base}/formgrader/manage_submissions/{CHAPTER}", TABLE_LOADED)
    shown = _table(page, "Student ID")
    assert {k: v["Score"] for k, v in shown.items()} == {k: f"{s:g} / {m:g}" for k, (s, m) in expected.items()}
    assert not page.errors, page.errors

    out = tmp_path / "canvas.csv"
    done = subprocess.run([sys.executable, "-m", "autograder", "export", "--format", "canvas", "--course",
                           str(course.root), "--out", str(out), "--chapters", CHAPTER],
                          cwd=course.root, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    column = rows[0].index(CHAPTER)
    exported = {r[rows[0].index("SIS Login ID")]: float(r[column]) for r in rows[2:]}
    assert exported == {learner: score for learner, (score, _) in expected.items()}, exported


def test_an_attackers_notebook_runs_nothing_in_formgrader(graded, server, browser):
    """Eve's grading page, opened as an instructor opens it: formgrader shows her notebook, every script of hers
    is inert, and her grades are what the grader gave."""
    course, scores, _ = graded
    # Logged in to the whole Jupyter server, as an instructor who started JupyterLab is (formgrader's own login
    # cookie covers /formgrader only): a script in the page could then use every Jupyter API.
    browser.open(f"{server.base}/api/status?token={server.token}", "document.body")
    sub_id = _submission_id(browser, server, "eve")
    before = {g["name"]: (g["auto_score"], g["manual_score"]) for g in server.api(f"grades?submission_id={sub_id}")}
    page = browser.open(f"{server.base}/formgrader/submissions/{sub_id}/",
                        "window.formgrader && formgrader.grades && formgrader.grades.loaded")
    time.sleep(3)  # the payload waits for formgrader's grades and then saves: give it time to have done so
    ran = page.evaluate("JSON.stringify(window.__pwned || null)")
    written = sorted(p.name for p in course.root.glob("pwned-*"))  # files written through the contents API
    after = {g["name"]: (g["auto_score"], g["manual_score"]) for g in server.api(f"grades?submission_id={sub_id}")}
    assert (ran, written, after) == ("null", [], before), \
        f"the learner's script ran: {ran}; wrote {written}; grades (auto, manual) {before} became {after}"
    assert all(manual is None for _, manual in after.values()), after
    # The instructor still reads what the learner tried, as text: the removed outputs and the markdown cell.
    text = _text(page)
    assert "[removed by the grader: application/javascript output, shown as text]" in text, text[-3000:]
    assert "[removed by the grader: text/html output, shown as text]" in text
    assert "My notes <script>" in text
    page = browser.open(f"{server.base}/formgrader/manage_submissions/{CHAPTER}", TABLE_LOADED)
    score, max_score = scores["eve"]
    assert _table(page, "Student ID")["eve"]["Score"] == f"{score:g} / {max_score:g}"
