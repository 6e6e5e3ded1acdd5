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


def compatible(reach: dict[str, set[str]], a, b) -> bool:
    """Can mistakes ``a`` and ``b`` share a notebook? Different solution cells, disjoint failing cells, and neither
    can change what any cell the other should fail computes."""
    def touches(x, y) -> bool:
        return x.cell in y.fails or any(x.cell in reach.get(cell, ()) for cell in y.fails)

    return a.cell != b.cell and not set(a.fails) & set(b.fails) and not touches(a, b) and not touches(b, a)


def one_notebook_sample(course, chapter: str, mistakes) -> list:
    """The mistakes of one notebook that together fail the most distinct cells (ties: fewer mistakes, then catalogue
    order): an exact branch and bound over the compatible sets (``compatible``), small enough to run at collection
    (a catalogue has tens of mistakes and a notebook holds at most one per solution cell)."""
    reach = reach_of(course, chapter)
    order = sorted(mistakes, key=lambda m: (-len(set(m.fails)), mistakes.index(m)))
    fits = {(i, j): compatible(reach, a, b) for i, a in enumerate(order) for j, b in enumerate(order)}
    best: list = [0, []]

    def search(i: int, chosen: list[int], covered: int) -> None:
        if covered > best[0]:
            best[:] = [covered, [order[k] for k in chosen]]
        open_ = [j for j in range(i, len(order)) if all(fits[j, k] for k in chosen)]
        # bound: the chosen cells plus every cell a mistake that still fits could add
        if not open_ or covered + len({c for j in open_ for c in order[j].fails}) <= best[0]:
            return
        j = open_[0]
        search(j + 1, chosen + [j], covered + len(set(order[j].fails)))
        search(j + 1, chosen, covered)

    search(0, [], 0)
    return sorted(best[1], key=mistakes.index)


def packed(course, chapter: str, mistakes) -> list[list]:
    """``mistakes`` in as few notebooks (lists) as keep them apart, first fit in catalogue order."""
    reach = reach_of(course, chapter)
    bins: list[list] = []
    for m in mistakes:
        home = next((b for b in bins if all(compatible(reach, o, m) for o in b)), None)
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
