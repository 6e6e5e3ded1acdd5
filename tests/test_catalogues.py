"""Every chapter through one warm isolated engine: every catalogued mistake loses the points of the cells it
should fail, with feedback naming its symptom (mistakes that cannot interfere share a notebook). Stock nbgrader
grades a covering sample of the same catalogues, and the engine's full marks for the reference (no flag) and zero
for the blank release are asserted there, on the engine's grading of the notebooks stock nbgrader also grades:
tests/test_chapters.py."""
from __future__ import annotations

import pytest

from autograder import submissions
from autograder.course import Course
from autograder.isolation import NOT_JUDGED

from .conftest import course_with_engine
from .mistake_packing import idle, packed

COURSE = Course()
CHAPTERS = COURSE.chapters()
CASES = [(ch, m.id) for ch in CHAPTERS for m in submissions.load_mistakes(COURSE, ch)]


@pytest.fixture(scope="module")
def course_engine(tmp_path_factory):
    with course_with_engine(tmp_path_factory) as course_and_engine:
        yield course_and_engine


def _grade(course, engine, student, chapter, nb, judge):
    path = submissions.write_submission(course, student, chapter, nb)
    return engine.grade(chapter, path, student, judge=judge)


# The whole catalogue, packed: mistakes that cannot interfere share a notebook (tests/mistake_packing.py), 207
# mistakes in 110 notebooks. Only the cells the notebook's mistakes should fail are judged, so the solution cells
# none of them can reach are idled (autograder/idling.py), as the shortcut lint and the mutants command do: in
# chapter 8, 18 of 24 notebooks no longer train a Transformer that nobody judges. Idling cannot make a mistake pass
# here: a judged cell must score 0 *and* name the mistake's symptom, and a cell stopped by an idled function
# would name none (the grader seeds each test cell itself, so idling does not move the random numbers either).
# For the same reason the engine runs only the judged test cells (and the test cells they read from: Engine.grade's
# ``judge``): in chapter 9 the other cells' memory-budget jobs were more than half the catalogue's time.
PACKED = {ch: packed(COURSE, ch, submissions.load_mistakes(COURSE, ch)) for ch in CHAPTERS}


@pytest.mark.unit
def test_every_mistake_is_packed_once_apart_from_those_it_could_disturb():
    for chapter in CHAPTERS:
        assert sorted(m.id for b in PACKED[chapter] for m in b) == \
            sorted(m.id for m in submissions.load_mistakes(COURSE, chapter)), chapter
        for b in PACKED[chapter]:
            assert len({m.cell for m in b}) == len(b), chapter
            assert sum(len(m.fails) for m in b) == len({c for m in b for c in m.fails}), chapter


@pytest.fixture(scope="module")
def graded_mistakes(course_engine):
    """{(chapter, mistake id): the result of the notebook that carries it}, a chapter's notebooks graded the first
    time one of its cases asks (so ``-k 03_`` grades chapter 3 only)."""
    course, engine = course_engine
    out = {}

    def of(chapter, mistake_id):
        if (chapter, mistake_id) not in out:
            for i, bin_ in enumerate(PACKED[chapter]):
                result = _grade(course, engine, f"mistakes-{i}", chapter,
                                submissions.with_mistakes(course, chapter, bin_, idle=idle(COURSE, chapter, bin_)),
                                judge=frozenset(c for m in bin_ for c in m.fails))
                out.update({(chapter, m.id): result for m in bin_})
        return out[(chapter, mistake_id)]
    return of


@pytest.mark.sandbox
@pytest.mark.timeout(600)
@pytest.mark.parametrize("chapter,mistake_id", CASES)
def test_catalogued_mistake_loses_points(graded_mistakes, chapter, mistake_id):
    mistake = next(m for m in submissions.load_mistakes(COURSE, chapter) if m.id == mistake_id)
    r = graded_mistakes(chapter, mistake_id)
    assert r["status"] == "graded", r["reason"]
    cells = {cell: r["cells"][cell] for cell in mistake.fails}
    assert sum(c["score"] for c in cells.values()) < sum(c["max_score"] for c in cells.values()), \
        f"{mistake.what}: still full marks"
    for cell, c in cells.items():
        assert c["score"] == 0, f"{mistake.what}: {cell} should score 0"
    messages = " | ".join(m for c in cells.values() for m in c["messages"])
    assert mistake.symptom.lower() in messages.lower(), (mistake.symptom, messages)


@pytest.mark.sandbox
def test_a_judged_grading_runs_the_judged_cells_and_those_they_read_only(course_engine):
    """Engine.grade's ``judge`` (the catalogue, the shortcut lint and the mutation score grade with it): the judged
    cell runs and scores as in a full grading, so does a test cell whose bindings it reads (chapter 10's
    test_clip_visible reads a name test_cross_entropy_hidden binds: autograder/cell_reach.py), and every other
    cell is not run and scores 0 as not judged."""
    course, engine = course_engine
    chapter = "10_language_model"
    path = submissions.write_submission(course, "judged", chapter, submissions.reference(course, chapter))
    result = engine.grade(chapter, path, "judged", judge=frozenset({"test_clip_visible"}))
    assert result["status"] == "graded", result["reason"]
    ran = {"test_clip_visible", "test_cross_entropy_hidden"}
    for gid, cell in result["cells"].items():
        if gid in ran:
            assert cell["passed"] and cell["score"] == cell["max_score"] > 0, (gid, cell["messages"])
        else:
            assert cell["score"] == 0 and list(cell["messages"]) == [NOT_JUDGED], (gid, cell["messages"])
    assert len(result["cells"]) > len(ran)
