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
from autograder.course import Course
from autograder.deadlines import PerHourPenalty, Policy, how_late, set_deadlines
from autograder.gradebook import COURSE_ID, GradebookWriter
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
    assert p.lateness("ada", 10.0, None, DUE).penalty is None, "no timestamp.txt: nbgrader counts it on time"
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
        {"ada": 0.0, "bea": 0.2 * full, "cleo": 0.0, "dan": 0.0}), "bea: 2 started hours; cleo: extension"
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
    long = {r[0]: dict(zip(files["long"][0], r)) for r in files["long"][1:]}
    assert float(long["bea"]["score"]) == pytest.approx(0.8 * full)
    assert float(long["bea"]["late_penalty"]) == pytest.approx(0.2 * full)
    wide = {r[0]: dict(zip(files["wide"][0], r)) for r in files["wide"][1:]}
    assert float(wide["bea"]["total"]) == pytest.approx(0.8 * full)
    assert float(wide["bea"]["late_penalty"]) == pytest.approx(0.2 * full)

    # An extension granted after grading: the recorded penalty follows it.
    set_deadlines(db, ch, None, [("bea", 2.0)])
    with GradebookWriter(db, policy=policy) as w:
        assert w.reapply_penalties(ch) == 1
        assert {r["student"]: r["penalty"] for r in w.results([ch])}["bea"] == 0.0


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


def _prepare(course: Course, members) -> None:
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + PER_HOUR)
    for student, (nb, when) in members.items():
        path = submissions.write_submission(course, student, CH1, nb)
        (path.parent / "timestamp.txt").write_text(f"{when:%Y-%m-%d %H:%M:%S.%f} UTC")


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
    for course in (ours, stock):
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
