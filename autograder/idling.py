"""Idling: stubbing out the solution cells that no judged cell of a notebook can reach.

Whatever packs several broken functions into one notebook judges only some of its graded cells: the mutants
command (autograder/mutants.py), the shortcut lint (tests/test_shortcuts.py) and the mistake catalogue in the
suite (tests/test_catalogues.py). A solution cell that none of the judged cells can reach (autograder/cell_reach.py)
cannot change what they compute, so it is idled: the cell still runs, but every function and class it defines
is then replaced by one that raises at once. The cells that call them (a training run, say) fail in microseconds
instead of computing results nobody reads. The grader seeds every graded test cell itself, so skipping work in
an unjudged cell does not move the random numbers a judged cell draws.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable

import nbformat

from attention_course.cells import grade_id, is_solution

MESSAGE = "not under test in this notebook"  # what an idled function raises


def unreached(reach: dict[str, set[str]], solution_cells: Iterable[str], judged: Iterable[str],
              kept: Iterable[str] = ()) -> frozenset[str]:
    """The solution cells that no ``judged`` cell can reach (``reach``: :func:`autograder.cell_reach.reach`),
    less those ``kept`` (the cells carrying what the notebook is about: a mistake, a mutant, a shortcut)."""
    needed = set(kept) | {c for cell in judged for c in reach.get(cell, ())}
    return frozenset(c for c in solution_cells if c not in needed)


def idled(source: str) -> str:
    """What to append to a solution cell so that every function and class it defines raises at once when called."""
    names = [n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return ("# not judged in this notebook (autograder/idling.py): whatever calls it fails at once\n"
            f"def __idle__(*args, **kwargs):\n    raise RuntimeError({MESSAGE!r})\n\n\n"
            + "".join(f"{name} = __idle__\n" for name in names))


def idle(nb: nbformat.NotebookNode, cells: Iterable[str], carrying: Iterable[str] = (),
         what: str = "change") -> nbformat.NotebookNode:
    """``nb`` (edited in place) with each solution cell named in ``cells`` idled; ``carrying``: the cells that hold
    what the notebook is about (a ``what``: mistake, mutant, shortcut), which must never be idle."""
    cells = set(cells)
    clash = cells & set(carrying)
    if clash:
        raise ValueError(f"solution cells {sorted(clash)} carry a {what} and cannot be idle")
    missing = cells - {grade_id(c) for c in nb.cells if is_solution(c)}
    if missing:
        raise ValueError(f"no solution cell {sorted(missing)} to idle")
    for cell in nb.cells:
        if is_solution(cell) and grade_id(cell) in cells:
            cell.source = cell.source.rstrip("\n") + "\n\n\n" + idled(cell.source)
    return nb
