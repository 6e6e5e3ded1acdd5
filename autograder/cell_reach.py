"""What a notebook cell's code can reach, read from the source notebook's syntax (no execution).

A cell *uses* the free names it loads (a name it binds anywhere, a parameter, ``check = Checks(...)`` is its
own); it *reaches*, for each name it uses, the latest earlier cell binding that name, and whatever that cell
reaches. Whatever packs several broken functions into one notebook uses this to prove the broken functions cannot
change what each other's failing cells compute: the mutants command (autograder/mutants.py), the shortcut lint
(tests/test_shortcuts.py) and the mistake catalogue's notebooks (tests/mistake_packing.py); the same proof lets them
idle the cells no judged cell reaches (autograder/idling.py).
"""
from __future__ import annotations

import ast
import hashlib

import nbformat

from attention_course.cells import grade_id, is_graded_test, is_solution
from .course import Course


# {sha256 of a source notebook's bytes: its table}: the catalogue, shortcut and stock-sample tests each read every
# chapter's table when they are collected, on every pytest worker (about 2 s of a worker's start, three times over).
_TABLES: dict[str, dict[str, frozenset[str]]] = {}


def reach(course: Course, chapter: str) -> dict[str, set[str]]:
    """{solution or graded test cell: grade_ids of the solution cells its code can reach}. A fresh dict of fresh
    sets each call (a caller may change what it gets); the reading is done once per notebook content."""
    raw = course.source_notebook(chapter).read_bytes()
    key = hashlib.sha256(raw).hexdigest()
    if key not in _TABLES:
        table = _read(nbformat.reads(raw.decode("utf-8"), as_version=4))
        _TABLES[key] = {gid: frozenset(r) for gid, r in table.items()}
    return {gid: set(r) for gid, r in _TABLES[key].items()}


def _read(nb: nbformat.NotebookNode) -> dict[str, set[str]]:
    """``reach``'s table for the notebook ``nb``."""
    cells = []  # (grade_id or None, names bound, names used)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics: nothing to follow
            tree = ast.Module(body=[], type_ignores=[])
        bound = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        bound |= {t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For))
                  for t in ast.walk(n.target if not isinstance(n, ast.Assign) else ast.Tuple(n.targets))
                  if isinstance(t, ast.Name)}
        bound |= {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                  for a in n.names}
        local = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        local |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
                  for a in (*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg) if a}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local - bound
        cells.append((grade_id(cell) if is_solution(cell) or is_graded_test(cell) else None, bound, used))
    table = {}
    for i, (gid, _, used) in enumerate(cells):
        if gid is None:
            continue
        seen, todo = set(), [(i, used)]
        while todo:
            j, names = todo.pop()
            for name in names:  # the latest earlier cell binding a name is the binding in force
                k = next((k for k in range(j - 1, -1, -1) if name in cells[k][1]), None)
                if k is not None and k not in seen:
                    seen.add(k)
                    todo.append((k, cells[k][2]))
        table[gid] = {cells[k][0] for k in seen if cells[k][0]}
    return table
