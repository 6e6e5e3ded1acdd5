"""Every chapter through real ``nbgrader autograde``: the reference scores full marks, the blank release
scores zero, and every catalogued mistake loses the points of the cells that should catch it, with a
failure message naming its symptom."""
from __future__ import annotations

import pytest

from autograder import submissions
from autograder.course import Course

from .nbgrader_run import cell_scores, failure_text, prepare_course, run_nbgrader

COURSE = Course()
CHAPTERS = COURSE.chapters()
CASES = [(ch, m.id) for ch in CHAPTERS for m in submissions.load_mistakes(COURSE, ch)]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Autograde, once per chapter, the reference, the blank and every mistake of that chapter."""
    cache = {}

    def grade(chapter: str):
        if chapter not in cache:
            course = prepare_course(tmp_path_factory.mktemp(chapter), chapter)
            submissions.write_submission(course, "reference", chapter, submissions.reference(course, chapter))
            submissions.write_submission(course, "blank", chapter, submissions.blank(course, chapter))
            for m in submissions.load_mistakes(course, chapter):
                submissions.write_submission(course, f"mistake-{m.id}", chapter,
                                             submissions.with_mistake(course, chapter, m))
            run_nbgrader(course, ["autograde", chapter, "--force"])
            cache[chapter] = course
        return cache[chapter]

    return grade


@pytest.mark.unit
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_catalogue_is_large_enough(chapter):
    assert len(submissions.load_mistakes(COURSE, chapter)) >= 6, "each chapter catalogues at least 6 mistakes"


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_scores_full_marks(graded, chapter):
    scores = cell_scores(graded(chapter), chapter, "reference")
    lost = {cell: s for cell, s in scores.items() if s[0] != s[1]}
    assert scores and not lost, f"the reference loses points in {lost}"


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_blank_release_scores_zero(graded, chapter):
    scores = cell_scores(graded(chapter), chapter, "blank")
    earned = {cell: s for cell, s in scores.items() if s[0] != 0}
    assert scores and not earned, f"the blank release earns points in {earned}"


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter,mistake_id", CASES)
def test_mistake_loses_points(graded, chapter, mistake_id):
    course = graded(chapter)
    mistake = next(m for m in submissions.load_mistakes(course, chapter) if m.id == mistake_id)
    scores = cell_scores(course, chapter, f"mistake-{mistake_id}")
    total = sum(s for s, _ in scores.values())
    assert total < sum(m for _, m in scores.values()), f"{mistake.what}: still full marks"
    for cell in mistake.fails:
        assert scores[cell][0] == 0, f"{mistake.what}: cell {cell} should score 0, scored {scores[cell][0]}"
    messages = [failure_text(course, chapter, f"mistake-{mistake_id}", cell) for cell in mistake.fails]
    assert any(mistake.symptom.lower() in msg.lower() for msg in messages), (
        f"{mistake.what}: no failure message mentions {mistake.symptom!r}:\n" + "\n---\n".join(messages))
