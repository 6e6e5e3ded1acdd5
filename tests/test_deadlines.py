"""Due dates, extensions and late penalties as nbgrader defines them (autograder/deadlines.py): the policies
(nbgrader's 'none' and 'zero', our PerHourPenalty with its cap), extensions and missing timestamps; the
gradebook writer storing nbgrader's late_submission_penalty and every export carrying it; and a late class
graded by ``grade`` and by stock ``nbgrader autograde`` with the same policy, giving the same penalties."""
from __future__ import annotations

import csv
import datetime as dt
import subprocess
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook
from traitlets.config import Config

from autograder import export, submissions
from autograder.course import COURSE_ID, Course
from autograder.deadlines import PerHourPenalty, set_deadlines
from autograder.gradebook import GradebookWriter
from autograder.late_policy import Policy, how_late
from autograder.results import GradingResult

DUE = dt.datetime(2026, 12, 1, 12, 0, 0)
HOUR = 3600.0
PER_HOUR = ('\nc.AssignLatePenalties.plugin_class = "autograder.deadlines.PerHourPenalty"\n'
            "c.PerHourPenalty.fraction_per_hour = 0.1\nc.PerHourPenalty.cap = 0.5\n")


def _policy(**settings) -> Policy:
    c = Config()
    if settings.pop("per_hour", False):
        c.AssignLatePenalties.plugin_class = "autograder.deadlines.PerHourPenalty"
        for k, v in settings.items():
            setattr(c.PerHourPenalty, k, v)
    elif "method" in settings:
        c.LateSubmissionPlugin.penalty_method = settings["method"]
    return Policy(c)


@pytest.mark.unit
def test_nbgrader_default_is_no_penalty_and_the_course_config_keeps_it():
    assert Policy.for_course().penalty("ada", 10.0, 5 * HOUR) is None, "nbgrader's default: 'none'"
    assert _policy().penalty("ada", 10.0, 5 * HOUR) is None


@pytest.mark.unit
def test_zero_policy_takes_the_whole_score_only_when_late():
    p = _policy(method="zero")
    assert p.penalty("ada", 7.5, 1.0) == 7.5
    assert p.penalty("ada", 7.5, 0.0) is None, "on time: no penalty"
    assert p.describe() == "a late notebook scores zero"


@pytest.mark.unit
def test_per_hour_counts_started_hours_and_stops_at_the_cap():
    p = _policy(per_hour=True, fraction_per_hour=0.1, cap=0.5)
    assert isinstance(p.plugin, PerHourPenalty)
    assert p.penalty("ada", 10.0, 1.0) == pytest.approx(1.0), "one second late is a started hour"
    assert p.penalty("ada", 10.0, HOUR) == pytest.approx(1.0)
    assert p.penalty("ada", 10.0, HOUR + 1) == pytest.approx(2.0)
    assert p.penalty("ada", 10.0, 4.5 * HOUR) == pytest.approx(5.0)
    assert p.penalty("ada", 10.0, 300 * HOUR) == pytest.approx(5.0), "the cap"
    assert p.penalty("ada", 0.0, 300 * HOUR) == 0.0
    assert "10% of the score per started hour late, at most 50%" == p.describe()


@pytest.mark.unit
def test_nbgrader_clamp_applies_to_any_plugin():
    # fraction 2 per hour with cap 5: the plugin asks for more than the score; nbgrader's clamp gives the score
    assert _policy(per_hour=True, fraction_per_hour=2.0, cap=5.0).penalty("ada", 3.0, HOUR) == 3.0


@pytest.mark.unit
def test_extension_on_time_and_missing_timestamp():
    p = _policy(per_hour=True)
    ext = dt.timedelta(hours=3)
    inside = p.lateness("ada", 10.0, DUE + dt.timedelta(hours=2), DUE, ext)
    assert (inside.seconds_late, inside.penalty) == (0.0, None), "within the extension"
    beyond = p.lateness("ada", 10.0, DUE + dt.timedelta(hours=4), DUE, ext)
    assert beyond.seconds_late == HOUR and beyond.points == pytest.approx(1.0)
    early = p.lateness("ada", 10.0, DUE - dt.timedelta(minutes=1), DUE)
    assert (early.seconds_late, early.points) == (0.0, 0.0)
    unknown = p.lateness("ada", 10.0, None, DUE)
    assert unknown.held and unknown.points == 10.0, "no recorded arrival while a due date is set: held, never on time"
    assert not p.lateness("ada", 0.0, None, DUE).held, "a zero is final whenever it arrived"
    assert p.lateness("ada", 10.0, None, None).penalty is None, "no due date, no time: nothing to be late for"
    assert p.lateness("ada", 10.0, DUE + dt.timedelta(days=9), None).penalty is None, "no due date"
    assert how_late(2 * HOUR + 300) == "2 h 05 min" and how_late(40) == "40 s"


@pytest.mark.unit
def test_course_config_file_chooses_the_policy(tmp_path):
    course = Course().copy_to(tmp_path / "course", with_release=False)
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + PER_HOUR)
    p = Policy.for_course(course)
    assert isinstance(p.plugin, PerHourPenalty) and p.penalty("ada", 10.0, 2 * HOUR) == pytest.approx(2.0)


def _result(course, student, chapter, passed):
    from attention_course.cells import graded_cells

    nb = nbformat.read(course.source_notebook(chapter), as_version=4)
    cells = {g: {"score": p if i < passed else 0.0, "max_score": p, "passed": i < passed, "messages": []}
             for i, (g, p) in enumerate(graded_cells(nb))}
    return GradingResult.of({"student": student, "chapter": chapter, "status": "graded", "reason": "", "flags": [],
            "score": sum(v["score"] for v in cells.values()),
            "max_score": sum(v["max_score"] for v in cells.values()), "cells": cells})


@pytest.mark.unit
def test_writer_stores_penalties_and_exports_carry_them(tmp_path):
    course, ch = Course(), "03_scoring_functions"
    db = "sqlite:///" + str(tmp_path / "gradebook.db")
    set_deadlines(db, ch, DUE, [("cleo", 3.0)])
    policy = _policy(per_hour=True, fraction_per_hour=0.1, cap=0.5)
    when = {"ada": DUE - dt.timedelta(hours=1), "bea": DUE + dt.timedelta(minutes=90),
            "cleo": DUE + dt.timedelta(hours=2), "dan": None}
    with GradebookWriter(db, policy=policy) as w:
        w.register_chapter(ch, nbformat.read(course.source_notebook(ch), as_version=4))
        for student, ts in when.items():
            w.write_result(_result(course, student, ch, 99), key="k", timestamp=ts)
        rows = {r["student"]: r for r in w.results([ch])}
    full = rows["ada"]["score"]
    assert full > 0
    assert {s: r["penalty"] for s, r in rows.items()} == pytest.approx(
        {"ada": 0.0, "bea": 0.2 * full, "cleo": 0.0, "dan": full}), "bea: 2 started hours; cleo: extension; dan: held"
    assert [s for s, r in rows.items() if r.late.held] == ["dan"], "no recorded arrival: held for the instructor"
    assert rows["bea"]["late_seconds"] == 90 * 60
    with Gradebook(db, course_id=COURSE_ID) as gb:  # nbgrader's own view of it, as formgrader shows it
        assert gb.find_submission(ch, "bea").late_submission_penalty == pytest.approx(0.2 * full)
        assert gb.find_submission(ch, "bea").score == pytest.approx(full)

    files = {}
    for fmt in ("canvas", "long", "wide"):
        (path,) = export.export(course, fmt, tmp_path / f"{fmt}.csv", db, chapters=[ch])
        with open(path, newline="") as f:
            files[fmt] = list(csv.reader(f))
    canvas = {r[3]: r for r in files["canvas"][2:]}
    assert float(canvas["bea"][5]) == pytest.approx(0.8 * full) and float(canvas["ada"][5]) == full
    assert canvas["dan"][5] == "", "held: no final score goes to the LMS"
    long = {r[0]: dict(zip(files["long"][0], r)) for r in files["long"][1:]}
    assert float(long["bea"]["score"]) == pytest.approx(0.8 * full)
    assert float(long["bea"]["late_penalty"]) == pytest.approx(0.2 * full)
    assert (long["dan"]["score"], long["dan"]["status"]) == ("", "held")
    wide = {r[0]: dict(zip(files["wide"][0], r)) for r in files["wide"][1:]}
    assert float(wide["bea"]["total"]) == pytest.approx(0.8 * full)
    assert (wide["dan"][ch], wide["dan"]["total"]) == ("", "0")
    assert float(wide["bea"]["late_penalty"]) == pytest.approx(0.2 * full)

    # An extension granted after grading: the recorded penalty follows it.
    set_deadlines(db, ch, None, [("bea", 2.0)])
    with GradebookWriter(db, policy=policy) as w:
        assert w.reapply_penalties(ch) == 1
        assert {r["student"]: r["penalty"] for r in w.results([ch])}["bea"] == 0.0
    with Gradebook(db, course_id=COURSE_ID) as gb:  # held shows in formgrader as flagged
        assert [s.student_id for s in gb.assignment_submissions(ch) if any(n.flagged for n in s.notebooks)] == ["dan"]
    # No due date any more: nothing is held, and the hold's flag goes with it.
    with GradebookWriter(db, policy=policy) as w:
        w.gb.find_assignment(ch).duedate = None
        w.gb.db.commit()
        assert w.reapply_penalties(ch) == 1
        assert not [r for r in w.results([ch]) if r.late.held or r.penalty]
    with Gradebook(db, course_id=COURSE_ID) as gb:
        assert not [s.student_id for s in gb.assignment_submissions(ch) if any(n.flagged for n in s.notebooks)]


@pytest.mark.unit
def test_a_suspected_notebook_shows_flagged_in_formgrader(tmp_path):
    """A result's suspicions (issue 41, class 4: a copy of the course's hidden tests) are the instructor's evidence:
    formgrader shows the notebook flagged, as it shows the grader's flags, and it stays flagged when the penalties
    are recomputed; the learner-facing flags stay empty."""
    course, ch = Course(), "03_scoring_functions"
    db = "sqlite:///" + str(tmp_path / "gradebook.db")
    suspected = _result(course, "ada", ch, 99).replace(
        suspicions=("the notebook holds 3 consecutive lines of the course's hidden tests",))
    with GradebookWriter(db, policy=_policy()) as w:
        w.register_chapter(ch, nbformat.read(course.source_notebook(ch), as_version=4))
        w.write_result(suspected, key="k", timestamp=None)
        w.write_result(_result(course, "bea", ch, 99), key="k", timestamp=None)
        assert {r.student: r.flags for r in w.results([ch])} == {"ada": (), "bea": ()}

    def flagged():
        with Gradebook(db, course_id=COURSE_ID) as gb:
            return [s.student_id for s in gb.assignment_submissions(ch) if any(n.flagged for n in s.notebooks)]

    assert flagged() == ["ada"]
    with GradebookWriter(db, policy=_policy()) as w:
        w.reapply_penalties(ch)
    assert flagged() == ["ada"], "recomputing the penalties keeps a suspicion's flag"


@pytest.mark.unit
def test_the_feedback_page_shows_the_recorded_time_beside_the_claim_and_a_hold():
    from autograder.results import Late
    from autograder.trusted import feedback_html

    course, ch = Course(), "03_scoring_functions"
    result = _result(course, "ada", ch, 99)
    held = feedback_html(result.replace(late=Late(0.0, result.score, held=True, claimed="2026-11-20 10:00:00 UTC")))
    assert "<strong>Held:</strong>" in held and "your timestamp.txt says 2026-11-20 10:00:00 UTC" in held
    assert "Received: not recorded" in held
    late = feedback_html(result.replace(late=Late(7200.0, 1.0, text="2 h 00 min", policy="p",
                                                  arrived="2026-12-01 14:00:00 UTC (collect)", claimed="<b>x</b>")))
    assert "Received: 2026-12-01 14:00:00 UTC (collect) (your timestamp.txt says &lt;b&gt;x&lt;/b&gt;)" in late
    assert "Held:" not in late and "Late:</strong> submitted 2 h 00 min after" in late


# -- the same late class, graded by `grade` and by stock nbgrader ---------------------------------------------
CH1 = "01_cognitive_attention"


def _late_class(course: Course) -> dict[str, tuple[nbformat.NotebookNode, dt.datetime]]:
    mistake = submissions.load_mistakes(course, CH1)[0]
    return {
        "ontime": (submissions.reference(course, CH1), DUE - dt.timedelta(minutes=5)),
        "late30m": (submissions.reference(course, CH1), DUE + dt.timedelta(minutes=30)),
        "mistake150m": (submissions.with_mistake(course, CH1, mistake), DUE + dt.timedelta(minutes=150)),
        "extended": (submissions.reference(course, CH1), DUE + dt.timedelta(hours=2)),  # 3 h extension
        "days": (submissions.reference(course, CH1), DUE + dt.timedelta(days=2)),  # the cap
    }


def _prepare(course: Course, members, config_text: str = PER_HOUR, claims: dict | None = None) -> None:
    """The class's notebooks, each with its timestamp.txt (``claims`` overrides one: bytes, or None for none) and
    its arrival recorded as collect records it (the same time: stock nbgrader reads the file, ``grade`` the
    record; a member whose time is None has no record)."""
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + config_text)
    claims = claims or {}
    for student, (nb, when) in members.items():
        path = submissions.write_submission(course, student, CH1, nb)
        claim = claims.get(student, f"{when:%Y-%m-%d %H:%M:%S.%f} UTC".encode() if when else None)
        if claim is not None:
            (path.parent / "timestamp.txt").write_bytes(claim)
        (path.parent / "submission_secret.txt").write_text(student.encode().hex().ljust(128, "0"))  # as submit
        if when is not None:
            _record_arrival(course, student, path, when)


def _record_arrival(course: Course, student: str, notebook, when: dt.datetime) -> None:
    """One line of grading/arrivals.jsonl as ``python -m autograder collect`` writes it, written here as data
    (the record's format is the contract; code before it ignores the file and trusts timestamp.txt)."""
    import hashlib
    import json

    line = {"v": 1, "chapter": CH1, "student": student, "arrived": when.isoformat(timespec="microseconds"),
            "source": "collect", "notebooks": {notebook.name: hashlib.sha256(notebook.read_bytes()).hexdigest()},
            "observed": when.isoformat(timespec="microseconds"), "entry": f"{student}+{CH1}+x+y", "owner_uid": 0,
            "claimed_id": student, "claimed_time": "", "flags": []}
    with open(course.grading / "arrivals.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def _run(course: Course, *args: str, timeout: float = 420) -> str:
    from .batch_support import child_env

    # cwd is the copy: `python -m autograder` is the copy's package (its Course() is the copy) as nbgrader's
    # plugin_class import is.
    done = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def _penalties(course: Course) -> dict[str, tuple[float, float]]:
    with Gradebook(course.db_url, course_id=COURSE_ID) as gb:
        return {s.student_id: (round(float(s.score), 6), round(float(s.late_submission_penalty), 6))
                for s in gb.assignment_submissions(CH1)}


@pytest.mark.sandbox
def test_grade_and_stock_nbgrader_agree_on_every_penalty(tmp_path):
    from .nbgrader_run import copy_course, generate_assignment

    ours, stock = copy_course(tmp_path / "ours"), copy_course(tmp_path / "stock")
    members = _late_class(ours)
    deadline = ["deadlines", CH1, "--due", DUE.isoformat(), "--extend", "extended=3"]
    for course in (ours, stock):  # the same times: stock reads timestamp.txt, grade the recorded arrivals
        _prepare(course, members)
    _run(stock, "nbgrader", *generate_assignment(stock, CH1))
    _run(stock, *deadline)
    _run(stock, "nbgrader", "autograde", CH1, "--force")
    _run(ours, *deadline)
    _run(ours, "grade", CH1, "--no-progress", "--no-similarity", "--workers", "1")

    got, want = _penalties(ours), _penalties(stock)
    assert got == want, f"grade: {got}\nstock nbgrader: {want}"
    full = got["ontime"][0]
    assert full > got["mistake150m"][0] > 0, "the mistake costs points, so its penalty is a share of less"
    assert got["ontime"][1] == got["extended"][1] == 0.0
    assert got["late30m"][1] == pytest.approx(0.1 * full)
    assert got["mistake150m"][1] == pytest.approx(0.3 * got["mistake150m"][0])
    assert got["days"][1] == pytest.approx(0.5 * full)

    # What the instructor and the learners see.
    with open(ours.grading / "grades.csv", newline="") as f:
        csv_rows = {r["student"]: r for r in csv.DictReader(f)}
    assert float(csv_rows["days"]["late_penalty"]) == pytest.approx(0.5 * full)
    assert float(csv_rows["days"]["final_score"]) == pytest.approx(0.5 * full)
    assert float(csv_rows["late30m"]["late_hours"]) == 0.5
    page = (ours.grading / "feedback" / "late30m" / CH1 / f"{CH1}.html").read_text()
    assert "Late:</strong> submitted 30 min after the due date" in page
    assert "per started hour late" in page
    assert "Late:" not in (ours.grading / "feedback" / "extended" / CH1 / f"{CH1}.html").read_text()
    report = (ours.grading / "reports" / "class_report.html").read_text()
    section = report.split("<h2>Late submissions</h2>")[1].split("<h2>")[0]
    assert all(s in section for s in ("late30m", "mistake150m", "days"))
    assert "extended" not in section and "ontime" not in section
    long_csv = _run(ours, "export", "--format", "long", "--out", str(tmp_path / "long.csv"))
    assert "long.csv" in long_csv
    with open(tmp_path / "long.csv", newline="") as f:
        exported = {r["student"]: r for r in csv.DictReader(f)}
    assert {s: float(r["late_penalty"]) for s, r in exported.items()} == pytest.approx(
        {s: p for s, (_, p) in got.items()})
    assert {s: float(r["score"]) for s, r in exported.items()} == pytest.approx(
        {s: sc - p for s, (sc, p) in got.items()})


# -- late work under "a late notebook scores zero", whatever the learner writes (issue 41, class 2) ---------------
ZERO = '\nc.LateSubmissionPlugin.penalty_method = "zero"\n'
LATE = DUE + dt.timedelta(hours=131)  # the examiner's control was 131 h late


def _stub_grade(course: Course) -> dict[str, dict]:
    from .batch_support import child_env

    env = dict(child_env(), AUTOGRADER_ENGINE="tests.stub_engine")  # every graded cell passes: 27/27-like
    for args in (["deadlines", CH1, "--due", DUE.isoformat()],
                 ["grade", CH1, "--no-progress", "--no-similarity", "--workers", "1"]):
        done = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    with open(course.grading / "grades.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@pytest.mark.sandbox  # two `python -m autograder` processes (stub engine): an integration test, not the inner loop
def test_late_work_loses_its_points_whatever_timestamp_txt_says(tmp_path):
    """The examiner's late notebook, arrived 131 h after the due date (the arrival collect recorded), under the
    "zero" policy: 0 whether its timestamp.txt is honest, missing, an earlier date, not a date, or a time with
    a zone name that reads as the day before. A notebook with no recorded arrival is held for the instructor
    (flagged, no final score), and so is one changed after it was collected."""
    from .nbgrader_run import copy_course

    course = copy_course(tmp_path / "course")
    ref = submissions.reference(course, CH1)
    early = f"{DUE - dt.timedelta(days=2):%Y-%m-%d %H:%M:%S.%f} UTC".encode()
    members = {"ontime": (ref, DUE - dt.timedelta(hours=1)), "late": (ref, LATE), "no-stamp": (ref, LATE),
               "earlier": (ref, LATE), "not-a-date": (ref, LATE), "zone-name": (ref, LATE),
               "unrecorded": (ref, None), "changed": (ref, DUE - dt.timedelta(hours=1))}
    _prepare(course, members, ZERO, claims={
        "no-stamp": None, "earlier": early, "not-a-date": b"the day before the due date",
        # 10 h after the due date at UTC+14 is 4 h before it in UTC: read with the zone name, it looks on time
        "zone-name": f"{DUE + dt.timedelta(hours=10):%Y-%m-%d %H:%M:%S} Pacific/Kiritimati".encode(),
        "unrecorded": early})
    changed = course.grading / "submitted" / "changed" / CH1 / f"{CH1}.ipynb"
    changed.write_text(changed.read_text() + " ")  # edited in grading/submitted/ after collect recorded it

    rows = _stub_grade(course)
    full = float(rows["ontime"]["score"])
    assert full > 0 and float(rows["ontime"]["final_score"]) == full and rows["ontime"]["flagged"] == "no"
    late = ("late", "no-stamp", "earlier", "not-a-date", "zone-name")
    got = {s: (float(rows[s]["score"]), rows[s]["final_score"], rows[s]["late_hours"]) for s in late}
    assert got == {s: (full, "0", "131.00") for s in late}, "every late notebook scores zero, whatever it claims"
    assert rows["ontime"]["submitted_at"].startswith(f"{DUE - dt.timedelta(hours=1):%Y-%m-%d %H:%M:%S} UTC")
    # the learner's claim is shown beside the recorded time, never used
    assert rows["earlier"]["learner_claimed_at"] == early.decode()
    assert "timestamp.txt is not a date" in rows["not-a-date"]["flags"]
    assert "timestamp.txt is not a date" in rows["zone-name"]["flags"]
    for student in ("unrecorded", "changed"):  # no recorded arrival for this notebook: held, never on time
        r = rows[student]
        assert float(r["score"]) == full and r["final_score"] == "" and r["late_penalty"] == "", (student, r)
        assert r["flagged"] == "yes" and "held for the instructor" in r["flags"], (student, r)
    assert rows["unrecorded"]["learner_claimed_at"] == early.decode()
    with Gradebook(course.db_url, course_id=COURSE_ID) as gb:  # stock nbgrader's view: nothing to count yet
        sub = gb.find_submission(CH1, "unrecorded")
        assert sub.timestamp is None and sub.late_submission_penalty == pytest.approx(full)
        assert gb.find_submission(CH1, "late").timestamp == LATE
    report = (course.grading / "reports" / "class_report.html").read_text()
    held = report.split("<h2>Held for the instructor</h2>")[1].split("<h2>")[0]
    assert "unrecorded" in held and "changed" in held and "ontime" not in held
    long_csv = _run(course, "export", "--format", "long", "--out", str(tmp_path / "long.csv"))
    assert "long.csv" in long_csv
    with open(tmp_path / "long.csv", newline="") as f:
        exported = {r["student"]: r for r in csv.DictReader(f)}
    assert (exported["unrecorded"]["score"], exported["unrecorded"]["status"]) == ("", "held")
    assert float(exported["no-stamp"]["score"]) == 0.0 and float(exported["ontime"]["score"]) == full

    # The instructor records when the unrecorded one arrived: the next grade applies the policy to that time.
    from .batch_support import child_env

    done = subprocess.run([sys.executable, "-m", "autograder", "deadlines", CH1, "--received",
                           f"unrecorded={(DUE - dt.timedelta(minutes=5)).isoformat()}"], cwd=course.root,
                          env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _stub_grade(course)
    assert float(rows["unrecorded"]["final_score"]) == full and "held" not in rows["unrecorded"]["flags"]
    assert rows["changed"]["final_score"] == "", "still held: its recorded arrival was for another notebook"


# -- the arrival record (autograder/arrivals.py) ----------------------------------------------------------------
@pytest.mark.unit
def test_a_learner_cannot_move_the_change_time_back(tmp_path):
    """What collect trusts: ``touch -d`` sets mtime and atime, never ctime, on the entry and everything in it."""
    import os
    import time

    from autograder import arrivals

    entry = tmp_path / "ada+ch+2026-11-20 10:00:00.000000 UTC+x"
    (entry / "sub").mkdir(parents=True)
    (entry / "sub" / "ch.ipynb").write_text("{}")
    latest, seen, complete = arrivals.latest_ctime(entry)
    assert (seen, complete) == (2, True)
    long_ago = time.time() - 10 * 86400
    for path in (entry, entry / "sub", entry / "sub" / "ch.ipynb"):
        os.utime(path, (long_ago, long_ago))
    after, _, _ = arrivals.latest_ctime(entry)
    assert after >= latest > long_ago + 86400, "utime itself changes the inode: ctime moves later, never back"
    assert os.stat(entry / "sub" / "ch.ipynb").st_mtime == long_ago


@pytest.mark.unit
def test_collect_copies_regular_files_only(tmp_path):
    import os

    from autograder import arrivals

    src = tmp_path / "entry"
    (src / "inner").mkdir(parents=True)
    (src / "nb.ipynb").write_text("{}")
    (src / "inner" / "data.txt").write_text("x")
    os.symlink("/etc/shadow", src / "answers.ipynb")
    os.mkfifo(src / "pipe")
    flags = arrivals.copy_entry(src, tmp_path / "copy")
    assert sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*")) == [
        "inner", "inner/data.txt", "nb.ipynb"]
    assert sorted(flags) == ["an entry of the inbox entry was not collected: a FIFO (not followed)",
                             "an entry of the inbox entry was not collected: a symbolic link (not followed)"]


@pytest.mark.unit
def test_an_arrival_is_bound_to_the_notebook_it_saw(tmp_path):
    import hashlib

    from autograder import arrivals

    nb, other = b'{"cells": []}', b'{"cells": [1]}'
    digest = {"ch.ipynb": hashlib.sha256(nb).hexdigest()}
    path = tmp_path / "arrivals.jsonl"

    def record(when, source="collect", student="ada", notebooks=digest):
        arrivals.append(path, arrivals.Arrival(chapter="ch", student=student, arrived=when, source=source,
                                               notebooks=notebooks))

    record(DUE - dt.timedelta(hours=1))
    record(DUE + dt.timedelta(hours=5))  # collected again after the entry was touched: same bytes
    with open(path, "ab") as f:
        f.write(b'{"v": 1, "chapter": "ch", "stud')  # a torn last line (a crash while writing)
    ledger = arrivals.Ledger.read(path)
    assert ledger.skipped == 1
    nb, other = arrivals.notebook_digest(nb), arrivals.notebook_digest(other)  # what grade looks an arrival up by
    assert ledger.arrival_of("ada", "ch", "ch.ipynb", nb).arrived == DUE - dt.timedelta(hours=1), \
        "the same bytes were there at the first observation"
    assert ledger.arrival_of("ada", "ch", "ch.ipynb", other) is None, "a changed notebook has no arrival"
    assert ledger.arrival_of("bea", "ch", "ch.ipynb", nb) is None, "a record is one learner's"
    assert ledger.arrival_of("ada", "ch", "renamed.ipynb", nb) is None
    record(DUE + dt.timedelta(hours=2), source="instructor")
    assert arrivals.Ledger.read(path).arrival_of("ada", "ch", "ch.ipynb", nb).source == "instructor", \
        "the instructor's record is the one that counts"


@pytest.mark.unit
def test_one_account_chooses_among_its_own_entries_only(tmp_path):
    from autograder import arrivals

    def entry(name, owner, claim):
        return arrivals.InboxEntry(path=tmp_path / name, name=name, claimed_id=name.split("+")[0],
                                   claimed_time=claim, claimed_when=dt.datetime.fromisoformat(claim),
                                   owner_uid=1000, owner=owner)

    chosen = arrivals.choose([entry("ada+ch+1", "ada", "2026-11-20 10:00:00"),
                              entry("ada+ch+2", "bob", "2099-01-01 00:00:00"),  # bob's, in ada's name
                              entry("bob+ch+3", "bob", "2026-11-21 10:00:00"),
                              entry("cy+ch+4", None, "2026-11-21 10:00:00")])  # no such account
    assert {owner: e.name for owner, e in chosen.items()} == {"ada": "ada+ch+1", "bob": "ada+ch+2"}


@pytest.mark.unit
def test_a_filesystem_mounted_in_the_inbox_entry_is_not_trusted(tmp_path, monkeypatch):
    """A FUSE mount inside a learner's entry answers stat with any time it likes: neither read nor copied. (The
    mount is simulated by its device number: mounting needs privileges a test machine may not give.)"""
    import os
    import time

    from autograder import arrivals

    entry = tmp_path / "entry"
    (entry / "mounted").mkdir(parents=True)
    (entry / "mounted" / "ch.ipynb").write_text("{}")
    (entry / "ch.ipynb").write_text("{}")
    real_lstat = os.lstat

    class Mounted:  # another device, and a change time from long ago
        def __init__(self, st):
            self.st_dev, self.st_ctime, self._st = st.st_dev + 1, time.time() - 86400 * 30, st

        def __getattr__(self, name):
            return getattr(self._st, name)

    def lstat(path, *args, **kwargs):
        st = real_lstat(path, *args, **kwargs)
        return Mounted(st) if os.fsdecode(path).endswith("/entry/mounted") else st

    monkeypatch.setattr(arrivals.os, "lstat", lstat)
    flags = arrivals.copy_entry(entry, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["ch.ipynb"]
    assert flags == ["an entry of the inbox entry was not collected: another filesystem mounted there"]
    _, seen, complete = arrivals.latest_ctime(entry)
    assert (seen, complete) == (2, True), "the mount itself is seen, nothing under it"


@pytest.mark.sandbox  # `python -m autograder collect` and nbgrader's collect: processes, not the inner loop
def test_one_learners_entry_never_stops_collect_for_the_others(tmp_path):
    """Issue 41 red team: an inbox entry holding a folder 600 levels deep stopped nbgrader's collect (a
    RecursionError in its shutil.copytree) for the whole class. Now the deep entry is refused before it is copied,
    with a fixed reason and a flag for the instructor, and the honest learner beside it is collected and
    recorded; the exit status (1) says someone was left out. Entries as nbgrader's submit lays them out, owned by
    root (the honest learner) and by nobody (the deep one)."""
    import json
    import os
    import pwd

    from autograder import arrivals

    from .batch_support import CHAPTER

    course = Course().copy_to(tmp_path / "course")
    course.grading.mkdir(parents=True, exist_ok=True)
    exchange = tmp_path / "exchange"
    inbound = exchange / COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    reference = submissions.reference(course, CHAPTER)

    def entry(owner, suffix):
        path = inbound / f"{owner}+{CHAPTER}+2026-11-27 10:00:00.000000 UTC+{suffix}"
        path.mkdir()
        nbformat.write(reference, path / f"{CHAPTER}.ipynb")
        (path / "timestamp.txt").write_text("2026-11-27 10:00:00.000000 UTC")
        return path

    entry("root", "honest")
    deep = entry("nobody", "deep")
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(600):  # relative to a descriptor: a path this long is past PATH_MAX
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    nobody = pwd.getpwnam("nobody")
    os.chown(deep, nobody.pw_uid, nobody.pw_gid)

    done = subprocess.run([sys.executable, "-m", "autograder", "collect", CHAPTER, "--exchange", str(exchange)],
                          capture_output=True, text=True, env=course.nbgrader_env(), cwd=course.root, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Traceback" not in out, out
    assert (f"nobody: not collected: the inbox entry holds folders more than {arrivals.MAX_ENTRY_DEPTH} levels "
            f"deep; {arrivals.REFUSED}") in out, out
    assert "root: arrived" in out, out
    records = [json.loads(line) for line in (course.grading / "arrivals.jsonl").read_text().splitlines()]
    assert [r["student"] for r in records] == ["root"]
    assert (course.grading / "submitted" / "root" / CHAPTER / f"{CHAPTER}.ipynb").is_file()
    assert not (course.grading / "submitted" / "nobody").exists()


@pytest.mark.unit
def test_a_change_time_just_before_the_due_date_seen_after_it_is_held(tmp_path):
    """Issue 41 red team: after a first write through a shared file mapping, further writes leave ``ctime`` as it
    was until writeback cleans the page (dirty_expire + dirty_writeback: 35 s on this machine), so work changed up
    to that long after the recorded time could look on time. A collect record (synthetic: no wait) whose time lies
    within that bound before the due date, seen by collect after it, is held for the instructor with a fixed
    sentence, in the gradebook and through a later recomputation; one recorded well before, or seen before the due
    date, is on time; the instructor's own record lifts the hold."""
    from autograder import arrivals
    from autograder.late_policy import HELD_UNSURE

    lag = arrivals.ctime_lag_bound_s()
    centis = [int(open(p).read().split()[0]) for p in arrivals.WRITEBACK_SETTINGS]
    assert lag == sum(centis) / 100 > 0, "the bound is the kernel's own writeback settings"
    line = {"v": 1, "chapter": "ch", "student": "ada", "arrived": (DUE - dt.timedelta(seconds=10)).isoformat(),
            "source": "collect", "notebooks": {"ch.ipynb": "0" * 64}, "ctime_lag_s": 35.0,
            "observed": (DUE + dt.timedelta(minutes=5)).isoformat()}

    def arrival(**changes):
        return arrivals.Arrival.from_json({**line, **changes})

    unsure = arrival()
    assert unsure.unsure_until == DUE + dt.timedelta(seconds=25)
    policy = _policy(method="zero")
    late = policy.lateness("ada", 10.0, unsure.arrived, DUE, None, unsure.unsure_until)
    assert (late.held, late.reason, late.points) == (True, HELD_UNSURE, 10.0)
    for fine in (arrival(arrived=(DUE - dt.timedelta(seconds=40)).isoformat()),  # before the bound
                 arrival(observed=(DUE - dt.timedelta(seconds=1)).isoformat()),  # collect saw it before the due date
                 arrival(source="instructor")):  # the instructor's own time
        late = policy.lateness("ada", 10.0, fine.arrived, DUE, None, fine.unsure_until)
        assert (late.held, late.penalty) == (False, None), fine
    assert policy.lateness("ada", 10.0, unsure.arrived, DUE, dt.timedelta(hours=1), unsure.unsure_until).penalty \
        is None, "an extension past the bound: on time"

    course, ch = Course(), "03_scoring_functions"
    db = "sqlite:///" + str(tmp_path / "gradebook.db")
    set_deadlines(db, ch, DUE, [])
    with GradebookWriter(db, policy=policy) as w:
        w.register_chapter(ch, nbformat.read(course.source_notebook(ch), as_version=4))
        assert w.lateness_of("ada", ch, unsure.arrived, 10.0, unsure.unsure_until).held
        w.write_result(_result(course, "ada", ch, 99), key="k", timestamp=unsure.arrived,
                       unsure_until=unsure.unsure_until)
        w.write_result(_result(course, "bea", ch, 99), key="k", timestamp=DUE - dt.timedelta(seconds=40),
                       unsure_until=DUE - dt.timedelta(seconds=5))
        assert [r["student"] for r in w.results([ch]) if r.late.held] == ["ada"]
        w.reapply_penalties(ch)  # e.g. after a due date moved: still held until the instructor records a time
        assert [r["student"] for r in w.results([ch]) if r.late.held] == ["ada"]
    with Gradebook(db, course_id=COURSE_ID) as gb:
        comments = [c.auto_comment or "" for n in gb.find_submission(ch, "ada").notebooks for c in n.comments]
        assert any(HELD_UNSURE in c for c in comments)
