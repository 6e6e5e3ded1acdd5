"""Synthetic one-exercise chapters for engine tests: a course tree holding one source notebook."""
from __future__ import annotations

from pathlib import Path

import nbformat

from autograder.course import Course

ROLES = {"setup": dict(grade=False, solution=False, locked=True),
         "solution": dict(grade=False, solution=True, locked=False),
         "test": dict(grade=True, solution=False, locked=True)}


def write_chapter(root: Path, chapter: str, cells: list[tuple]) -> Course:
    """``cells``: ``(role, source, grade_id)`` or, for tests, ``(role, source, grade_id, points)``."""
    nb_cells = []
    for role, src, gid, *points in cells:
        c = nbformat.v4.new_code_cell(src)
        c.metadata["nbgrader"] = {"grade_id": gid, "schema_version": 3, "task": False, **ROLES[role]}
        if points:
            c.metadata["nbgrader"]["points"] = points[0]
        if role == "setup":
            c.metadata["tags"] = ["setup"]
        nb_cells.append(c)
    path = Path(root) / "solutions" / chapter / f"{chapter}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=nb_cells), path)
    return Course(root)
