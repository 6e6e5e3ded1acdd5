"""A class on the course's JupyterHub, end to end, in headless Chromium (issue 42, items 1 and 2).

The test starts JupyterHub from the configuration the course ships (deploy/jupyterhub/jupyterhub_config.py) on
127.0.0.1: configurable-http-proxy, PAM login for throwaway accounts (``useradd -m``, random passwords) in two
throwaway groups (the course's instructors and learners), LocalProcessSpawner, JupyterLab with nbgrader's
extensions, the course's nbgrader configuration on a copy of the course owned by the instructor, a real exchange
folder, and ``python -m autograder serve`` as the hub-managed grading service. Each person logs in through the
hub's login form in a browser context of their own, and:

- the instructor releases chapter 1 with formgrader's Release button (the cheapest real chapter to grade: nothing
  here depends on which chapter it is);
- two learners see it in JupyterLab's Assignments tab and fetch it; one completes it with the reference
  solution's cells, the other with a catalogued mistake; each saves it through JupyterLab and submits it with
  the tab's Submit button;
- with nobody else doing anything, the grading service grades each submission and releases its feedback: each
  learner's tab offers it, fetches it, and their page shows their own score and no one else's name;
- the instructor sees both scores in formgrader and exports Canvas grades from a terminal in their JupyterLab;
- the book's "Launch on JupyterHub" link (nbgitpuller's, as the book builds it from _config.yml and _toc.yml)
  pulls the learner kit from a git repository served on 127.0.0.1 into the learner's home and opens the
  chapter's notebook in their JupyterLab.

Every wait polls for a state with a generous deadline; nothing depends on how fast anything runs. The hub, its
servers and service, the git server and the accounts are stopped and removed at the end, on failure too.
"""
from __future__ import annotations

import csv
import json
import os
import pwd
import shutil
import sqlite3
import sys
import tempfile
import urllib.parse
from pathlib import Path

import nbformat
import pytest
import yaml

from attention_course.cells import grade_id, is_solution
from autograder import submissions
from autograder.course import COURSE_ID, Course

from .browser import Browser
from .conftest import copy_reference_cache
from .hub_support import REPO, Accounts, GitServer, Hub, bare_repository, free_port, run

pytestmark = pytest.mark.services

CHAPTER = "01_cognitive_attention"
KIT_REPOSITORY = "attention-kit"  # the learner repository's name: nbgitpuller clones it into ~/attention-kit
# JupyterLab has started and restored its layout (the test's extra Jupyter configuration exposes the app object).
LAB_READY = "window.jupyterapp !== undefined && jupyterapp.restored.then(() => true)"
FORMGRADER_TABLE = "document.querySelector('tbody tr') && !document.body.innerText.includes('please wait')"
# The Assignments tab's row for the chapter in one of its three lists (released, fetched, submitted).
ROW = ("[...document.querySelectorAll('#{list}_assignments_list .list_item')]"
       ".find(r => r.querySelector('.item_name') && r.querySelector('.item_name').innerText.includes('" + CHAPTER
       + "'))")
SLOW = 300  # seconds: a first JupyterLab start, a grading, on a loaded 2-core machine


@pytest.fixture
def hub_class():
    """The accounts, the course copy, the exchange, the hub; removed and stopped afterwards."""
    if os.geteuid() != 0:
        pytest.skip("the hub test creates throwaway accounts (useradd) and runs JupyterHub as root: run as root")
    root = Path(tempfile.mkdtemp(prefix="hub-class-", dir="/tmp"))  # not pytest's tmp: the accounts enter it
    os.chmod(root, 0o755)
    accounts = Accounts()
    hub = None
    try:
        accounts.add_groups()
        instructor = accounts.add("instructor")
        learners = [accounts.add("learner"), accounts.add("learner")]
        course = Course().copy_to(root / "course")
        copy_reference_cache(course.root)
        run(["chown", "-R", f"{instructor}:{instructor}", str(course.root)])  # the instructor's course folder
        exchange = root / "exchange"
        exchange.mkdir()
        os.chmod(exchange, 0o1777)  # nbgrader's exchange: everyone may enter, the sticky bit keeps entries apart
        state = root / "hub"
        state.mkdir(mode=0o700)
        extra = root / "jupyter-extra"  # lets the test reach JupyterLab's app object (window.jupyterapp)
        extra.mkdir()
        (extra / "jupyter_server_config.json").write_text(json.dumps({"LabApp": {"expose_app_in_browser": True}}))
        env = {"COURSE_ROOT": str(course.root), "NBGRADER_EXCHANGE": str(exchange),
               "COURSE_INSTRUCTORS_GROUP": accounts.instructors_group, "COURSE_LEARNERS_GROUP": accounts.learners_group,
               "HUB_PORT": str(free_port()), "HUB_INTERNAL_PORT": str(free_port()),
               "HUB_PROXY_API_PORT": str(free_port()), "HUB_STATE_DIR": str(state),
               "HUB_EXTRA_JUPYTER_CONFIG": str(extra),
               # grading on submission as the course ships it (5 per chapter per hour), one chapter, a short refresh
               "AUTOGRADER_SERVE_ARGS": f"--chapters {CHAPTER} --poll 1 --refresh 5"}
        hub = Hub(state, env)
        yield {"hub": hub, "accounts": accounts, "instructor": instructor, "learners": learners, "course": course,
               "exchange": exchange, "root": root}
    finally:
        if hub is not None:
            hub.stop()
        accounts.remove()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def browser():
    b = Browser()
    try:
        yield b
    finally:
        b.close()


def log_in(browser: Browser, hub: Hub, name: str, password: str):
    """``name`` logs in through the hub's login form in a browser context of their own; their JupyterLab opens."""
    page = browser.open_in(browser.new_context(), f"{hub.url}/hub/login", "document.getElementById('password_input')",
                           timeout=120)
    page.evaluate(f"""(() => {{
        document.getElementById('username_input').value = {json.dumps(name)};
        document.getElementById('password_input').value = {json.dumps(password)};
        document.getElementById('login_submit').click();
        return true; }})()""")
    try:
        page.wait_for(LAB_READY, SLOW, f"{name}'s JupyterLab after logging in")
    except TimeoutError as e:
        raise AssertionError(f"{e}\nat {page.evaluate('location.href')}; the hub's log:\n{hub.tail()}") from None
    assert urllib.parse.urlsplit(page.evaluate("location.href")).path.startswith(f"/user/{name}/lab")
    return page


def formgrader_table(page, key: str) -> dict[str, dict[str, str]]:
    """Formgrader's table as each row's text by column heading, by the row's text under ``key``."""
    heads = page.evaluate("[...document.querySelectorAll('thead th')].map(th => th.innerText.trim())")
    rows = page.evaluate("[...document.querySelectorAll('tbody tr')].map(tr => [...tr.cells].map(td => "
                         "td.innerText.trim()))")
    return {row[key]: row for row in (dict(zip(heads, r)) for r in rows) if key in row}


def release_with_formgrader(page, hub: Hub, instructor: str):
    page.navigate(f"{hub.url}/user/{instructor}/formgrader/manage_assignments")
    page.wait_for(FORMGRADER_TABLE, 120, "formgrader's assignments")
    row = ("[...document.querySelectorAll('tbody tr')].find(r => r.querySelector('td.name') && "
           f"r.querySelector('td.name').innerText.trim() === '{CHAPTER}')")
    page.evaluate(f"{row}.querySelector('td.release a').click(), true")
    page.wait_for(f"{row}.querySelector('td.status').innerText.trim() === 'released' && "
                  "document.body.innerText.includes('Successfully released')", SLOW, "formgrader's release")


def open_assignments_tab(page):
    page.evaluate("jupyterapp.commands.execute('nbgrader:open-assignment-list').then(() => true)")
    page.wait_for("document.getElementById('released_assignments_list') !== null", 60, "the Assignments tab")


def click_in_row(page, list_name: str, label: str, what: str):
    """Click the button labelled ``label`` in the chapter's row of a list of the Assignments tab, once it shows.
    While it does not, the tab's own Refresh button is pressed every few seconds (the tab shows what the exchange
    held when it last looked). Finding and clicking is one step in the page: a refresh between the two would
    replace the button."""
    page.wait_for(f"""(() => {{
        const row = {ROW.format(list=list_name)};
        const button = row && [...row.querySelectorAll('button')]
            .find(b => b.innerText.trim() === {json.dumps(label)} && !b.disabled);
        if (button) {{ button.click(); return true; }}
        if (!window.lastRefresh || Date.now() - window.lastRefresh > 5000) {{
            window.lastRefresh = Date.now();
            document.getElementById('refresh_assignments_list').click();
        }}
        return false; }})()""", SLOW, what)


def complete_and_save(page, answers: nbformat.NotebookNode):
    """Fill the fetched notebook's solution cells with ``answers``' and save it through JupyterLab's contents
    service (what JupyterLab's Save does)."""
    solutions = {grade_id(c): c.source for c in answers.cells if is_solution(c)}
    assert solutions
    path = f"{CHAPTER}/{CHAPTER}.ipynb"
    filled = page.evaluate(f"""(async () => {{
        const contents = jupyterapp.serviceManager.contents;
        const model = await contents.get({json.dumps(path)}, {{content: true}});
        const answers = {json.dumps(solutions)};
        let filled = 0;
        for (const cell of model.content.cells) {{
            const meta = (cell.metadata || {{}}).nbgrader || {{}};
            if (meta.solution && meta.grade_id in answers) {{ cell.source = answers[meta.grade_id]; filled += 1; }}
        }}
        await contents.save({json.dumps(path)}, {{type: 'notebook', format: 'json', content: model.content}});
        return filled; }})()""")
    assert filled == len(solutions), f"filled {filled} of {len(solutions)} solution cells"


def run_in_terminal(page, command: str):
    """Type ``command`` into a new terminal of the page's JupyterLab (what it prints collects in
    ``window.terminalOutput``)."""
    page.evaluate("""(async () => {
        const terminal = await jupyterapp.serviceManager.terminals.startNew();
        window.terminalOutput = '';
        terminal.messageReceived.connect((_, msg) => {
            if (msg.type === 'stdout') { window.terminalOutput += msg.content[0]; } });
        await new Promise(connected => {
            if (terminal.connectionStatus === 'connected') { connected(); }
            terminal.connectionStatusChanged.connect((_, status) => { if (status === 'connected') connected(); });
        });
        terminal.send({type: 'stdin', content: [%s + '\\r']});
        return true; })()""" % json.dumps(command))


def scores(course: Course) -> dict[str, tuple[float, float]]:
    """{learner: (score, max_score)} from the gradebook the grading service writes (None while it has none)."""
    try:
        with sqlite3.connect(f"file:{course.grading / 'gradebook.db'}?mode=ro", uri=True) as db:
            rows = db.execute("select student, score, max_score from autograder_result").fetchall()
    except sqlite3.OperationalError:
        return {}
    return {s: (float(score), float(top)) for s, score, top in rows}


def launch_link(hub_url: str, repository: str) -> str:
    """The chapter page's "Launch on JupyterHub" link, made as the book makes it (sphinx-book-theme's nbgitpuller
    link from _config.yml's launch settings and the chapter's page in _toc.yml; tests/test_book.py checks the
    built pages carry exactly this form)."""
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    interface = {"classic": "tree", "jupyterlab": "lab/tree"}[config["launch_buttons"]["notebook_interface"]]
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    (page,) = [entry["file"] for part in toc["parts"] for entry in part["chapters"] if entry["file"].endswith(CHAPTER)]
    name = repository.rstrip("/").rsplit("/", 1)[1]
    query = urllib.parse.urlencode({"repo": repository, "urlpath": f"{interface}/{name}/{page}.ipynb",
                                    "branch": config["repository"]["branch"]}, safe="/")
    return f"{hub_url}/hub/user-redirect/git-pull?{query}"


@pytest.mark.timeout(1800)
def test_a_class_on_the_hub_from_release_to_feedback_and_canvas(hub_class, browser):
    hub, accounts, course = hub_class["hub"], hub_class["accounts"], hub_class["course"]
    instructor, learners = hub_class["instructor"], hub_class["learners"]
    good, bad = learners

    teacher = log_in(browser, hub, instructor, accounts.passwords[instructor])
    release_with_formgrader(teacher, hub, instructor)
    assert (hub_class["exchange"] / COURSE_ID / "outbound" / CHAPTER / f"{CHAPTER}.ipynb").is_file()

    mistake = submissions.load_mistakes(course, CHAPTER)[0]
    answers = {good: submissions.reference(course, CHAPTER), bad: submissions.with_mistake(course, CHAPTER, mistake)}
    pages = {}
    for name in learners:
        page = pages[name] = log_in(browser, hub, name, accounts.passwords[name])
        open_assignments_tab(page)
        click_in_row(page, "released", "Fetch", f"{name}'s Assignments tab offering {CHAPTER} to fetch")
        fetched = Path(pwd.getpwnam(name).pw_dir) / CHAPTER / f"{CHAPTER}.ipynb"
        page.wait_for(f"{ROW.format(list='fetched')} !== undefined", SLOW, f"{name}'s fetched {CHAPTER}")
        assert fetched.stat().st_uid == pwd.getpwnam(name).pw_uid
        assert "BEGIN HIDDEN TESTS" not in fetched.read_text(), "the release leaks hidden tests"
        complete_and_save(page, answers[name])
        click_in_row(page, "fetched", "Submit", f"{name}'s Submit button")
        page.wait_for(f"{ROW.format(list='submitted')} !== undefined", SLOW, f"{name}'s submission in the tab")

    # Nobody does anything now: the grading service grades both and releases their feedback.
    graded = hub.wait_for(lambda: len(scores(course)) == 2 and scores(course), 2 * SLOW, "both gradings")
    assert graded[good][0] == graded[good][1] > 0, graded
    assert 0 <= graded[bad][0] < graded[bad][1], graded
    for name in learners:
        page = pages[name]
        click_in_row(page, "submitted", "Fetch Feedback", f"feedback offered in {name}'s Assignments tab")
        page.wait_for(f"(() => {{ const r = {ROW.format(list='submitted')}; return r && "
                      f"r.innerText.includes('view feedback'); }})()", SLOW, f"{name}'s fetched feedback")
        html = page.evaluate(f"""(async () => {{
            const contents = jupyterapp.serviceManager.contents;
            const top = await contents.get({json.dumps(CHAPTER + '/feedback')});
            const stamp = top.content.filter(e => e.type === 'directory').map(e => e.path).sort().pop();
            const page = await contents.get(stamp + '/{CHAPTER}.html', {{content: true, format: 'text'}});
            return page.content; }})()""")
        total = f"{CHAPTER}: {graded[name][0]:g} / {graded[name][1]:g} points"  # the page's heading
        assert total in html, f"{name}'s feedback does not show their score ({total})"
        other = bad if name == good else good
        assert other not in html, f"{name}'s feedback names {other}"

    # The instructor sees both in formgrader, and exports Canvas grades from a terminal in their JupyterLab.
    teacher.navigate(f"{hub.url}/user/{instructor}/formgrader/manage_submissions/{CHAPTER}")
    teacher.wait_for(FORMGRADER_TABLE, 120, "formgrader's submissions")
    submitted = formgrader_table(teacher, "Student ID")
    assert set(submitted) == set(learners), submitted
    for name in learners:  # graded, not "needs autograding": collect stamped the gradebook's time in timestamp.txt
        assert (submitted[name]["Status"], submitted[name]["Score"]) == \
            ("graded", f"{graded[name][0]:g} / {graded[name][1]:g}"), submitted[name]
    teacher.navigate(f"{hub.url}/user/{instructor}/formgrader/manage_students")
    teacher.wait_for(FORMGRADER_TABLE, 120, "formgrader's students")
    students = formgrader_table(teacher, "Student ID")
    assert set(students) == set(learners), students
    for name in learners:
        assert students[name]["Overall Score"] == f"{graded[name][0]:g} / {graded[name][1]:g}", students[name]
    assert not teacher.errors, teacher.errors
    teacher.navigate(f"{hub.url}/user/{instructor}/lab")
    teacher.wait_for(LAB_READY, SLOW, "the instructor's JupyterLab again")
    exported = course.root / "canvas-from-the-hub.csv"
    run_in_terminal(teacher, f'cd "$COURSE_ROOT" && python -m autograder export --format canvas --chapters {CHAPTER} '
                             f'--out {exported.name}')
    try:
        hub.wait_for(lambda: exported.is_file() and exported.read_text().count("\n") >= 4, SLOW, "the Canvas export")
    except AssertionError as e:
        raise AssertionError(f"{e}\nthe terminal said:\n{teacher.evaluate('window.terminalOutput')}") from None
    assert exported.stat().st_uid == pwd.getpwnam(instructor).pw_uid, "exported as the instructor"
    with open(exported, newline="") as f:
        rows = {r["SIS Login ID"]: r for r in csv.DictReader(f)}
    for name in learners:
        assert float(rows[name][CHAPTER]) == graded[name][0], rows[name]

    # The book's launch link, with the learner kit in a git repository served on 127.0.0.1.
    served = hub_class["root"] / "git"
    kit = hub_class["root"] / "kit"
    run([sys.executable, "-m", "autograder", "kit", "--out", str(kit), CHAPTER], cwd=REPO)
    bare_repository(kit, served / KIT_REPOSITORY)
    git = GitServer(served)
    try:
        link = launch_link(hub.url, f"{git.url}/{KIT_REPOSITORY}")
        learner = pages[bad]
        learner.navigate(link)
        opened = f"{KIT_REPOSITORY}/chapters/{CHAPTER}/{CHAPTER}.ipynb"
        learner.wait_for(f"window.jupyterapp !== undefined && jupyterapp.restored.then(() => "
                         f"jupyterapp.shell.currentWidget && jupyterapp.shell.currentWidget.context && "
                         f"jupyterapp.shell.currentWidget.context.path === {json.dumps(opened)})", SLOW,
                         f"the launch link opening {opened}")
    finally:
        git.close()
    pulled = Path(pwd.getpwnam(bad).pw_dir) / opened
    assert pulled.read_bytes() == (kit / "chapters" / CHAPTER / f"{CHAPTER}.ipynb").read_bytes()
    assert pulled.stat().st_uid == pwd.getpwnam(bad).pw_uid
