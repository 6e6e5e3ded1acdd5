"""A correct module initialised differently from the reference still earns full marks (issue 17, class 4).

The spec fixes no initialisation of a weight matrix, so every graded check of a module must copy its
parameters in, test only what does not depend on them, or compare the module with itself (the engine then
takes that expected value from the learner's run: autograder/reinitialise.py). For every chapter whose
solution cells define ``nn.Module`` classes, each class is re-initialised after its own ``__init__`` by one
recipe at a time (``xavier``: torch's attention recipe; ``normal``: std 0.02, as GPT-style models start) and
the notebook is graded through the isolated engine. The classes are found from the source, so a new module
in any chapter is covered the day it is written.

Coverage decision (issue 44, the suite's 12 minutes): the engine runs only the graded test cells that can reach a
module class (autograder/cell_reach.py, the analysis the mutation score and the catalogues trust; Engine.grade's
``judge``), and the test cells they read; every solution and setup cell still runs. A test cell that reaches no
module class runs the reference's own code, whose full marks the reference gradings prove (tests/test_chapters.py,
tests/test_catalogues.py); in chapter 9 those include the memory-budget jobs, most of its time. Given up: a test cell
whose use of a module escapes the syntactic reach (a class fetched by a string name); grading with ``judge=None``
covers it.
"""
from __future__ import annotations

import nbformat
import pytest

from attention_course.cells import grade_id, is_graded_test, is_solution
from autograder import submissions
from autograder.cell_reach import reach
from autograder.course import Course
from autograder.reinitialise import RECIPES, module_classes, reinitialised

from .conftest import course_with_engine

pytestmark = pytest.mark.sandbox

COURSE = Course()


def _has_modules(chapter: str) -> bool:
    nb = nbformat.read(COURSE.source_notebook(chapter), as_version=4)
    return any(module_classes(c.source) for c in nb.cells if is_solution(c))


CASES = [(ch, recipe) for ch in COURSE.chapters() if _has_modules(ch) for recipe in RECIPES]


def module_test_cells(course: Course, chapter: str) -> frozenset[str]:
    """The graded test cells whose code can reach a solution cell that defines an ``nn.Module`` class."""
    nb = nbformat.read(course.source_notebook(chapter), as_version=4)
    modules = {grade_id(c) for c in nb.cells if is_solution(c) and module_classes(c.source)}
    table = reach(course, chapter)
    return frozenset(grade_id(c) for c in nb.cells if is_graded_test(c) and table.get(grade_id(c), set()) & modules)


def reinitialised_reference(course: Course, chapter: str, recipe: str):
    nb = submissions.reference(course, chapter)
    for cell in nb.cells:
        if is_solution(cell):
            cell.source = reinitialised(cell.source, recipe)
    return nb


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with course_with_engine(tmp_path_factory) as course_and_engine:
        yield course_and_engine


def test_modules_are_found_in_every_chapter_that_has_them():
    assert {ch for ch, _ in CASES} >= {"02_kernel_regression", "03_scoring_functions", "04_self_attention",
                                        "05_multi_head_attention", "06_positional_encoding", "08_transformer",
                                        "09_efficient_attention", "10_language_model", "11_serving_and_long_context"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("chapter,recipe", CASES)
def test_reinitialised_modules_keep_full_marks(engine, chapter, recipe):
    course, eng = engine
    student = f"reinit-{recipe}"
    path = submissions.write_submission(course, student, chapter, reinitialised_reference(course, chapter, recipe))
    judged = module_test_cells(course, chapter)
    assert judged, f"{chapter}: no graded test cell reaches a module class"
    result = eng.grade(chapter, path, student, judge=judged)
    assert result["status"] == "graded", result["reason"]
    lost = {g: c["messages"] for g, c in result["cells"].items() if g in judged and not c["passed"]}
    assert not lost, lost
    assert all(result["cells"][g]["max_score"] > 0 for g in judged), judged
