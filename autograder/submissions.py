"""Submissions made from the course's own files: the reference, a blank release and catalogued mistakes.

A submission is the learner release with its solution cells filled in, exactly what a learner hands in.
The reference submission fills them from ``solutions/``; a mistake submission then applies one entry of
the chapter's ``mistakes.toml`` (find/replace inside one solution cell). Tests and benchmarks use these;
nothing here holds solution code of its own.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attention_course.cells import grade_id, is_solution

from . import idling
from .course import Course


@dataclass(frozen=True)
class Mistake:
    id: str
    what: str
    cell: str
    find: str
    replace: str
    fails: tuple[str, ...]
    symptom: str


def load_mistakes(course: Course, chapter: str) -> list[Mistake]:
    path = course.mistakes_file(chapter)
    if not path.is_file():
        return []
    entries = tomllib.loads(path.read_text())["mistake"]
    return [Mistake(e["id"], e["what"], e["cell"], e["find"], e["replace"], tuple(e["fails"]), e["symptom"])
            for e in entries]


def blank(course: Course, chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(course.release_notebook(chapter), as_version=4)


def reference(course: Course, chapter: str) -> nbformat.NotebookNode:
    """The release with every solution cell replaced by the reference's."""
    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    answers = {grade_id(c): c.source for c in source.cells if is_solution(c)}
    nb = blank(course, chapter)
    for cell in nb.cells:
        if is_solution(cell):
            cell.source = answers[grade_id(cell)]
    return nb


def with_mistake(course: Course, chapter: str, mistake: Mistake) -> nbformat.NotebookNode:
    return with_mistakes(course, chapter, [mistake])


def with_mistakes(course: Course, chapter: str, mistakes: list[Mistake],
                  idle: frozenset[str] = frozenset()) -> nbformat.NotebookNode:
    """The reference with every mistake applied, each to its own solution cell (two in one cell would not be the
    catalogue's mistakes any more); every other cell is the reference's, idled where named in ``idle``
    (autograder/idling.py: only for cells the caller has proved no judged cell reaches)."""
    cells = [m.cell for m in mistakes]
    if len(set(cells)) != len(cells):
        raise ValueError(f"two mistakes edit one solution cell: {sorted(c for c in set(cells) if cells.count(c) > 1)}")
    nb = reference(course, chapter)  # a fresh notebook from disk: edited in place
    by_cell = {grade_id(c): c for c in nb.cells if is_solution(c)}
    for mistake in mistakes:
        cell = by_cell.get(mistake.cell)
        if cell is None:
            raise ValueError(f"mistake {mistake.id}: no solution cell {mistake.cell!r} in {chapter}")
        count = cell.source.count(mistake.find)
        if count != 1:
            raise ValueError(f"mistake {mistake.id}: its `find` text occurs {count} times in cell "
                             f"{mistake.cell} (must be exactly once)")
        cell.source = cell.source.replace(mistake.find, mistake.replace)
    return idling.idle(nb, idle, carrying=cells, what="mistake")


def write_submission(course: Course, student: str, chapter: str, nb: nbformat.NotebookNode) -> Path:
    """Place a notebook where nbgrader looks for it: grading/submitted/<student>/<chapter>/<chapter>.ipynb."""
    path = course.grading / "submitted" / student / chapter / f"{chapter}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
