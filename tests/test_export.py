"""``python -m autograder export``: the Canvas CSV has Canvas's identity columns, a Points Possible row, one
row per learner and one column per chapter, with the gradebook's scores (a manual override in formgrader
included); the long and wide forms carry the same numbers. Read back with the csv module, as Canvas would."""
from __future__ import annotations

import csv
import subprocess
import sys

import nbformat
import pytest

from autograder import export
from autograder.course import COURSE_ID, Course
from autograder.gradebook import GradebookWriter
from autograder.results import CellResult, GradingResult

pytestmark = pytest.mark.unit

CH3, CH5 = "03_scoring_functions", "05_multi_head_attention"


def _result(course, student, chapter, passed: int, status="graded", reason=""):
    """A result in which the first `passed` graded cells passed."""
    from attention_course.cells import grade_id, is_graded_test, nbgrader_meta

    nb = nbformat.read(course.source_notebook(chapter), as_version=4)
    graded = [(grade_id(c), float(nbgrader_meta(c)["points"])) for c in nb.cells if is_graded_test(c)]
    return GradingResult(student, chapter, status, reason,
                         cells=tuple(CellResult(g, p, i < passed) for i, (g, p) in enumerate(graded)))


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    course = Course()
    db = "sqlite:///" + str(tmp_path_factory.mktemp("export") / "gradebook.db")
    expected = {}
    with GradebookWriter(db) as w:
        for ch in (CH3, CH5):
            w.register_chapter(ch, nbformat.read(course.source_notebook(ch), as_version=4))
        for student, chapter, passed, status in (("ada", CH3, 99, "graded"), ("ada", CH5, 2, "graded"),
                                                 ("bea", CH3, 0, "graded"), ('o"neil, jr', CH5, 0, "zero")):
            r = _result(course, student, chapter, passed, status, "malformed JSON" if status == "zero" else "")
            w.write_result(r, key="k")
            expected[(student, chapter)] = r.score
    from nbgrader.api import Gradebook

    with Gradebook(db, course_id=COURSE_ID) as gb:
        gb.update_or_create_student("ada", first_name="Ada", last_name="Lovelace", lms_user_id="4711")
        # An instructor gives bea 2 points by hand in formgrader on her first graded cell of chapter 3.
        sub = gb.find_submission(CH3, "bea")
        grade = sorted(sub.notebooks[0].grades, key=lambda g: g.name)[0]
        grade.manual_score = 2.0
        gb.db.commit()
    expected[("bea", CH3)] = 2.0
    maxima = {ch: _result(course, "x", ch, 0).max_score for ch in (CH3, CH5)}
    return course, db, expected, maxima


def _read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_canvas_csv(gradebook, tmp_path):
    course, db, expected, maxima = gradebook
    (path,) = export.export(course, "canvas", tmp_path / "canvas.csv", db, chapters=[CH3, CH5])
    rows = _read(path)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", CH3, CH5]
    assert rows[1][0] == "Points Possible" and rows[1][1:5] == ["", "", "", ""]
    assert [float(x) for x in rows[1][5:]] == [maxima[CH3], maxima[CH5]]
    learners = {r[3]: r for r in rows[2:]}
    assert len(rows[2:]) == len(learners) == 3, "one row per learner"
    assert learners["ada"][:5] == ["Lovelace, Ada", "4711", "", "ada", ""]
    assert float(learners["ada"][5]) == expected[("ada", CH3)] == maxima[CH3]
    assert float(learners["ada"][6]) == expected[("ada", CH5)] < maxima[CH5]
    assert float(learners["bea"][5]) == 2.0, "the manual override is what is exported"
    assert learners["bea"][6] == "", "not submitted: empty, so Canvas leaves the grade alone"
    assert learners['o"neil, jr'][0] == 'o"neil, jr' and float(learners['o"neil, jr'][6]) == 0.0


def test_canvas_roster_and_missing_zero(gradebook, tmp_path):
    course, db, *_ = gradebook
    roster = tmp_path / "canvas_export.csv"
    roster.write_text('\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Homework 1 (123)\n'
                      '    Points Possible,,,,,10\n'
                      '"Berg, Bea",901,S-0042,bea,Group B,7\n', encoding="utf-8")
    (path,) = export.export(course, "canvas", tmp_path / "c.csv", db, missing="zero", roster=roster,
                            chapters=[CH3, CH5])
    learners = {r[3]: r for r in _read(path)[2:]}
    assert learners["bea"][:5] == ["Berg, Bea", "901", "S-0042", "bea", "Group B"]
    assert learners["bea"][6] == "0"


def test_long_and_wide_carry_the_same_numbers(gradebook, tmp_path):
    course, db, expected, maxima = gradebook
    long_path, wide_path = (export.export(course, fmt, tmp_path / f"{fmt}.csv", db, chapters=[CH3, CH5])[0]
                            for fmt in ("long", "wide"))
    with open(long_path, newline="") as f:
        long = {(r["student"], r["chapter"]): r for r in csv.DictReader(f)}
    assert len(long) == 3 * 2, "one row per learner and chapter"
    for key, score in expected.items():
        assert float(long[key]["score"]) == score and float(long[key]["max_score"]) == maxima[key[1]]
    assert long[("bea", CH3)]["manual"] == "yes" and long[("ada", CH3)]["manual"] == "no"
    assert long[("bea", CH5)]["status"] == "missing" and long[('o"neil, jr', CH5)]["status"] == "zero"
    with open(wide_path, newline="") as f:
        wide = {r["student"]: r for r in csv.DictReader(f)}
    assert float(wide["ada"]["total"]) == expected[("ada", CH3)] + expected[("ada", CH5)]
    assert float(wide["ada"]["max_total"]) == maxima[CH3] + maxima[CH5]


def test_command_line(gradebook, tmp_path):
    course, db, *_ = gradebook
    out = tmp_path / "grades.csv"
    done = subprocess.run([sys.executable, "-m", "autograder", "export", "--format", "canvas", "--db", db, "--out",
                           str(out), "--chapters", CH3, CH5], cwd=course.root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert _read(out)[0][:5] == export.CANVAS_IDENTITY


def test_no_exported_cell_is_a_formula(tmp_path):
    """Student ids are folder names a learner chose (issue 24): an id such as ``=cmd|' /C calc'!A0`` ran as a
    formula when an instructor opened the export in Excel or Sheets. Every format writes it as text."""
    course = Course()
    db = "sqlite:///" + str(tmp_path / "gradebook.db")
    evil = ["=cmd|' /C calc'!A0", "+SUM(A1:A9)", "-2+3+cmd|' /C calc'!A0", "@SUM(A1)", "\t=1", "\r=1"]
    with GradebookWriter(db) as w:
        w.register_chapter(CH3, nbformat.read(course.source_notebook(CH3), as_version=4))
        for student in evil + ["ada"]:
            w.write_result(_result(course, student, CH3, 1), key="k")
    for path in [export.export(course, fmt, tmp_path / f"{fmt}.csv", db, chapters=[CH3])[0] for fmt in export.FORMATS]:
        cells = [c for row in _read(path) for c in row]
        assert not [c for c in cells if c.startswith(export.FORMULA_START)], path
        for student in evil:
            assert "'" + student in cells, (path, student)
        assert "ada" in cells
