"""A cheat's notebook: the chapter's reference with some solution cells replaced or extended.

The one helper behind tests/test_ch8_cheats.py and tests/test_ch9_cheats.py. Starting from the reference keeps
every other cell's points, so a cheat that loses points in its target cells was caught by those cells' checks,
not by a side effect elsewhere.
"""
from __future__ import annotations

import copy

from attention_course.cells import grade_id, is_solution
from autograder import submissions
from autograder.course import Course


def cheat_notebook(course: Course, chapter: str, cells: dict[str, str]):
    """The reference of ``chapter`` with ``cells`` applied: grade_id -> new source, or "+grade_id" -> code
    appended to that solution cell (a later definition shadows the reference's)."""
    nb = copy.deepcopy(submissions.reference(course, chapter))
    for key, code in cells.items():
        gid = key.lstrip("+")
        (cell,) = [c for c in nb.cells if is_solution(c) and grade_id(c) == gid]
        cell.source = cell.source + "\n" + code if key.startswith("+") else code
    return nb


def grade_cheat(course: Course, engine, chapter: str, name: str, cells: dict[str, str]):
    """Write the cheat's notebook as learner ``cheat-<name>`` and grade it with the isolated ``engine``."""
    student = f"cheat-{name}"
    path = submissions.write_submission(course, student, chapter, cheat_notebook(course, chapter, cells))
    return engine.grade(chapter, path, student)
