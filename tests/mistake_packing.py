"""Which catalogued mistakes can share one notebook (test helper for tests/test_catalogues.py and
tests/test_chapters.py; the notebook itself is ``autograder.submissions.with_mistakes``).

Each notebook graded costs a kernel's work over every graded cell, so mistakes that cannot interfere share one.
Two mistakes share a notebook only when they edit different solution cells, fail disjoint cells, and neither's
solution cell is reachable from the cells the other should fail (autograder/cell_reach.py): each failing cell
then fails for its own mistake alone, and its symptom is asserted there.
"""
from __future__ import annotations

import functools

import nbformat

from attention_course.cells import grade_id, is_solution
from autograder import idling
from autograder.cell_reach import reach as reach_of


def covering_sample(mistakes) -> list:
    """Fewest mistakes (greedy) whose ``fails`` together name every cell that any mistake of the chapter fails."""
    left = {cell for m in mistakes for cell in m.fails}
    chosen = []
    while left:
        best = max(mistakes, key=lambda m: (len(left & set(m.fails)), -mistakes.index(m)))
        chosen.append(best)
        left -= set(best.fails)
    return chosen


def packed(course, chapter: str, mistakes) -> list[list]:
    """``mistakes`` in as few notebooks (lists) as keep them apart, first fit in catalogue order."""
    reach = reach_of(course, chapter)

    def touches(a, b) -> bool:  # can mistake a change what any cell b should fail computes?
        return a.cell in b.fails or any(a.cell in reach.get(cell, ()) for cell in b.fails)

    bins: list[list] = []
    for m in mistakes:
        home = next((b for b in bins if all(o.cell != m.cell and not set(o.fails) & set(m.fails)
                                            and not touches(o, m) and not touches(m, o) for o in b)), None)
        if home is None:
            bins.append([m])
        else:
            home.append(m)
    return bins


@functools.cache
def _layout(course, chapter: str) -> tuple[dict[str, set[str]], tuple[str, ...]]:
    """(what each cell reaches, the solution cells in order) of the chapter's source, read once."""
    nb = nbformat.read(course.source_notebook(chapter), as_version=4)
    return reach_of(course, chapter), tuple(grade_id(c) for c in nb.cells if is_solution(c))


def idle(course, chapter: str, mistakes) -> frozenset[str]:
    """The solution cells that none of the cells ``mistakes`` should fail can reach, and that carry none of them:
    idled (autograder/idling.py) in a notebook that judges only those cells."""
    reach, solution_cells = _layout(course, chapter)
    return idling.unreached(reach, solution_cells, judged=[c for m in mistakes for c in m.fails],
                            kept=[m.cell for m in mistakes])
