"""The shortcut lint: for every graded function of every chapter, a constant answer, an answer keyed to the
visible tests' inputs and "return the visible expected value" each lose points (issue 17, class 3).

The shortcuts are generated from the reference by :mod:`autograder.shortcuts`, never written by hand, so a new
function or chapter is linted as soon as it exists. Shortcuts of different functions share a notebook when
the test cells that call one cannot reach the other's code (autograder/cell_reach.py); each is then judged on its
own cells only: the graded test cells of its function's exercise (those after its solution cell).
"""
from __future__ import annotations

import nbformat
import pytest

from attention_course.cells import grade_id, is_graded_test, is_solution
from autograder import idling, mutants, shortcuts, submissions
from autograder.course import Course
from autograder.trusted import is_hidden

from autograder.cell_reach import reach as reach_of
from .conftest import course_with_engine

COURSE = Course()
CHAPTERS = COURSE.chapters()


SOURCES = {ch: nbformat.read(COURSE.source_notebook(ch), as_version=4) for ch in CHAPTERS}
REACH = {ch: reach_of(COURSE, ch) for ch in CHAPTERS}


def exercise_tests(chapter: str) -> dict[str, list[str]]:
    """{solution cell: the graded test cells that follow it, up to the next solution cell}: the exercise's
    own tests, which a shortcut of any function the solution cell defines must fail (one definition, shared
    with the mutation score: autograder.mutants.exercise_tests)."""
    return mutants.exercise_tests(SOURCES[chapter])


TARGETS = {ch: shortcuts.targets(COURSE, ch) for ch in CHAPTERS}
EXERCISES = {ch: exercise_tests(ch) for ch in CHAPTERS}
OWN = {(ch, t): EXERCISES[ch][t.cell] for ch in CHAPTERS for t in TARGETS[ch]}
HIDDEN = {ch: {grade_id(c) for c in SOURCES[ch].cells if is_graded_test(c) and is_hidden(c.source)}
          for ch in CHAPTERS}
SOLUTION_CELLS = {ch: [grade_id(c) for c in SOURCES[ch].cells if is_solution(c)] for ch in CHAPTERS}


def packed(chapter: str) -> list[list[tuple[shortcuts.Target, str]]]:
    """Every (target, kind) of the chapter in as few notebooks as keep them apart: two share a notebook only
    when they live in different solution cells and neither's own cells can reach the other's cell."""
    reach = REACH[chapter]

    def touches(a, b) -> bool:
        return any(a.cell in reach[cell] for cell in OWN[(chapter, b)])  # a can change what b's tests compute

    bins: list[list] = []
    for kind in shortcuts.KINDS:
        for t in TARGETS[chapter]:
            home = next((b for b in bins if all(o.cell != t.cell and not touches(o, t) and not touches(t, o)
                                                for o, _ in b)), None)
            if home is None:
                bins.append([(t, kind)])
            else:
                home.append((t, kind))
    return bins


PACKED = {ch: packed(ch) for ch in CHAPTERS}


def idle(chapter: str, bin_) -> frozenset[str]:
    """The solution cells no judged cell of the notebook can reach: stubbed out (autograder/idling.py), so a
    chapter's training run costs nothing in the notebooks that do not judge it (the keyed shortcut keeping its
    visible points in every notebook is the check that the stubs never reach a judged cell)."""
    return idling.unreached(REACH[chapter], SOLUTION_CELLS[chapter], judged=[c for t, _ in bin_ for c in OWN[(chapter, t)]],
                            kept=[t.cell for t, _ in bin_])


CASES = [(ch, t.name, kind) for ch in CHAPTERS for t in TARGETS[ch] for kind in shortcuts.KINDS]


@pytest.mark.unit
def test_every_graded_function_is_a_target_with_cells_of_its_own():
    for chapter in CHAPTERS:
        assert TARGETS[chapter], chapter
        for t in TARGETS[chapter]:
            assert OWN[(chapter, t)], f"{chapter}: no graded test cell reaches {t.name}"
        assert sorted((t.name, k) for b in PACKED[chapter] for t, k in b) == \
            sorted((t.name, k) for t in TARGETS[chapter] for k in shortcuts.KINDS)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grades a chapter's packed notebooks once, through one warm engine, the first time a case of that
    chapter asks: {(chapter, target name, kind): result of the notebook that carries it}. Lazy so that
    ``-k 03_`` grades chapter 3 only."""
    out, done = {}, set()
    with course_with_engine(tmp_path_factory) as (course, engine):
        def of(chapter, target, kind):
            if chapter not in done:
                for i, bin_ in enumerate(PACKED[chapter]):
                    nb = shortcuts.submission_of_many(course, chapter, bin_, idle=idle(chapter, bin_))
                    student = f"shortcuts-{i}"
                    path = submissions.write_submission(course, student, chapter, nb)
                    result = engine.grade(chapter, path, student)
                    for t, k in bin_:
                        out[(chapter, t.name, k)] = result
                done.add(chapter)
            return out[(chapter, target, kind)]
        yield of


@pytest.mark.sandbox
@pytest.mark.timeout(900)
@pytest.mark.parametrize("chapter,target,kind", CASES)
def test_shortcut_loses_points(graded, chapter, target, kind):
    result = graded(chapter, target, kind)
    assert result["status"] == "graded", result["reason"]
    t = next(t for t in TARGETS[chapter] if t.name == target)
    own = OWN[(chapter, t)]
    cells = result["cells"]
    kept = sum(cells[c]["score"] for c in own)
    assert kept < sum(cells[c]["max_score"] for c in own), (
        f"the {kind} shortcut of {target} keeps every point of {own}")
    if kind == "keyed":  # right on every visible input: its visible cells must pass (the phase cells work)
        visible = [c for c in own if c not in HIDDEN[chapter]]
        lost = {c: cells[c]["messages"] for c in visible if not cells[c]["passed"]}
        assert not lost, f"the keyed shortcut of {target} fails visible cells it answers right: {lost}"

