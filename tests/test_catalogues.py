"""Every chapter through one warm isolated engine: the reference scores full marks with no flag, the blank
release scores zero, and every catalogued mistake loses the points of the cells it should fail, with feedback
naming its symptom. (Stock nbgrader grades a covering sample of the same catalogues: tests/test_chapters.py.)"""
from __future__ import annotations

import pytest

from autograder import submissions
from autograder.course import Course

from .conftest import course_with_engine

pytestmark = pytest.mark.sandbox

COURSE = Course()
CHAPTERS = COURSE.chapters()
CASES = [(ch, m.id) for ch in CHAPTERS for m in submissions.load_mistakes(COURSE, ch)]


@pytest.fixture(scope="module")
def course_engine(tmp_path_factory):
    with course_with_engine(tmp_path_factory) as course_and_engine:
        yield course_and_engine


def _grade(course, engine, student, chapter, nb):
    path = submissions.write_submission(course, student, chapter, nb)
    return engine.grade(chapter, path, student)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_full_marks_and_blank_zero(course_engine, chapter):
    course, engine = course_engine
    ref = _grade(course, engine, "reference", chapter, submissions.reference(course, chapter))
    lost = {g: c["messages"] for g, c in ref["cells"].items() if not c["passed"]}
    assert ref["status"] == "graded" and not lost and ref["flags"] == [], (ref["reason"], lost, ref["flags"])
    assert ref["score"] == ref["max_score"] > 0
    blank = _grade(course, engine, "blank", chapter, submissions.blank(course, chapter))
    assert blank["status"] == "graded" and blank["flags"] == [], (blank["reason"], blank["flags"])
    assert blank["score"] == 0 and all(not c["passed"] for c in blank["cells"].values())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("chapter,mistake_id", CASES)
def test_catalogued_mistake_loses_points(course_engine, chapter, mistake_id):
    course, engine = course_engine
    mistake = next(m for m in submissions.load_mistakes(course, chapter) if m.id == mistake_id)
    r = _grade(course, engine, f"mistake-{mistake_id}", chapter, submissions.with_mistake(course, chapter, mistake))
    assert r["status"] == "graded", r["reason"]
    assert r["score"] < r["max_score"], f"{mistake.what}: still full marks"
    for cell in mistake.fails:
        assert r["cells"][cell]["score"] == 0, f"{mistake.what}: {cell} should score 0"
    messages = " | ".join(m for cell in mistake.fails for m in r["cells"][cell]["messages"])
    assert mistake.symptom.lower() in messages.lower(), (mistake.symptom, messages)
