"""Idling (autograder/idling.py): which solution cells a notebook that judges only some cells may stub out, and
what a stubbed cell does. The mutants command, the shortcut lint and the catalogue's packed notebooks rely on it."""
from __future__ import annotations

import nbformat
import pytest

from attention_course.cells import grade_id, is_solution
from autograder import idling, submissions
from autograder.cell_reach import reach as reach_of
from autograder.course import Course

from .mistake_packing import idle, packed

pytestmark = pytest.mark.unit

COURSE = Course()


def test_only_cells_no_judged_cell_reaches_and_none_kept_are_idle():
    reach = {"t1": {"a", "b"}, "t2": {"c"}, "t3": {"d"}}
    assert idling.unreached(reach, "abcde", judged=["t1"]) == {"c", "d", "e"}
    assert idling.unreached(reach, "abcde", judged=["t1", "t2"], kept=["e"]) == {"d"}
    assert idling.unreached(reach, "abcde", judged=[]) == set("abcde")


def test_an_idled_cell_still_runs_but_its_functions_and_classes_raise_when_called():
    source = "TABLE = {1: 2}\n\ndef f(x):\n    return x\n\nclass Model:\n    pass\n"
    namespace: dict = {}
    exec(source + "\n" + idling.idled(source), namespace)
    assert namespace["TABLE"] == {1: 2}  # the cell's other work is done
    for name in ("f", "Model"):
        with pytest.raises(RuntimeError, match=idling.MESSAGE):
            namespace[name](1)


def test_idle_edits_the_named_solution_cells_only_and_refuses_unknown_ones():
    chapter = "03_scoring_functions"
    nb = submissions.reference(COURSE, chapter)
    cells = [grade_id(c) for c in nb.cells if is_solution(c)]
    before = {grade_id(c): c.source for c in nb.cells if is_solution(c)}
    idling.idle(nb, cells[:1])
    after = {grade_id(c): c.source for c in nb.cells if is_solution(c)}
    assert after[cells[0]].startswith(before[cells[0]].rstrip("\n")) and idling.MESSAGE in after[cells[0]]
    assert all(after[c] == before[c] for c in cells[1:])
    with pytest.raises(ValueError, match="no solution cell"):
        idling.idle(nb, ["no-such-cell"])


def test_a_mistakes_own_cell_is_never_idle():
    chapter = "03_scoring_functions"
    mistake = submissions.load_mistakes(COURSE, chapter)[0]
    with pytest.raises(ValueError, match="carry a mistake"):
        submissions.with_mistakes(COURSE, chapter, [mistake], idle=frozenset({mistake.cell}))


@pytest.mark.parametrize("chapter", COURSE.chapters())
def test_a_catalogue_notebook_idles_exactly_what_its_failing_cells_cannot_reach(chapter):
    reach = reach_of(COURSE, chapter)
    source = nbformat.read(COURSE.source_notebook(chapter), as_version=4)
    solution_cells = {grade_id(c) for c in source.cells if is_solution(c)}
    for bin_ in packed(COURSE, chapter, submissions.load_mistakes(COURSE, chapter)):
        stubbed = idle(COURSE, chapter, bin_)
        reached = {c for m in bin_ for f in m.fails for c in reach[f]}
        assert stubbed <= solution_cells
        assert not stubbed & (reached | {m.cell for m in bin_}), (chapter, [m.id for m in bin_])
        assert stubbed == solution_cells - reached - {m.cell for m in bin_}
