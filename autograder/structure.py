"""Reading a submitted notebook safely and restoring the structure the course owns.

:func:`load_submission` turns a file into a notebook or an :class:`Unusable` with a clear reason (wrong
file name, empty file, malformed JSON, not a notebook, too large): :mod:`autograder.intake` does the reading.

:func:`repair` rebuilds the notebook to execute from the chapter's source notebook (``solutions/``, hidden
tests included) and the submission:

- every cell the source marks with an nbgrader ``grade_id`` keeps the source's place in the order;
- graded test cells and read-only (locked) cells always take the source's text and metadata; one the
  learner changed (compared with what the release showed them) is flagged "edited ... restored", one the
  learner deleted is flagged "deleted ... restored";
- solution cells keep the learner's text with the source's metadata (points and flags cannot be edited);
  a deleted solution cell is flagged and not re-inserted (its code may live in another cell);
- a duplicated ``grade_id`` is flagged: an extra copy of a test or read-only cell is removed, an extra copy
  of a solution cell runs as an ordinary code cell where it stands;
- cells without nbgrader metadata (the learner's own cells, narrative and demos) run where they stand,
  after the known cell that precedes them; nbgrader metadata with an unknown ``grade_id`` is removed and
  flagged (a learner cannot add a graded cell).

It works on the notebook the intake made (already cut to what grading reads) and copies no learner cell
deeply: each cell of the result is a new cell object holding the same (immutable) text and a metadata dict
of its own, so what repair changes (ids, nbgrader metadata, outputs) never reaches the submission, and a
submission costs its size once, not once more per step (issue 41, class 5).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attention_course.cells import grade_id, is_graded_test, is_solution, nbgrader_meta

from .intake import MAX_NOTEBOOK_BYTES, Unusable, read_submission  # noqa: F401 - part of this interface

HIDDEN_RE = re.compile(r"^[^\n]*BEGIN HIDDEN TESTS[^\n]*\n.*?^[^\n]*END HIDDEN TESTS[^\n]*(\n|$)", re.S | re.M)


def load_submission(path: Path, chapter: str) -> nbformat.NotebookNode:
    """The submitted notebook (see :func:`autograder.intake.read_submission`, which also gives its flags)."""
    return read_submission(path, chapter)[0]


def _cell(cell, metadata=None) -> nbformat.NotebookNode:
    """A new cell with ``cell``'s fields (the text and other values shared: strings are immutable) and a
    metadata dict of its own (``metadata``, else a one-level copy of ``cell``'s)."""
    new = nbformat.NotebookNode(cell)
    new.metadata = nbformat.NotebookNode(cell.get("metadata", {}) if metadata is None else metadata)
    return new


def _without_nbgrader(cell) -> nbformat.NotebookNode:
    return _cell(cell, {k: v for k, v in cell.get("metadata", {}).items() if k != "nbgrader"})


def unvalidated_notebook(cells: list, metadata: dict) -> nbformat.NotebookNode:
    """A v4 notebook node built without nbformat's validation (which rewrites duplicate ids and warns)."""
    return nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": copy.deepcopy(metadata),
                               "cells": cells})


def strip_hidden(source: str) -> str:
    """A source test cell as the release shows it: the hidden-test region removed (as nbgrader does)."""
    return HIDDEN_RE.sub("", source)


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).strip("\n")


def _kind(cell) -> str:
    if is_graded_test(cell):
        return "test"
    if is_solution(cell):
        return "solution"
    return "read-only"


@dataclass
class Repaired:
    nb: nbformat.NotebookNode
    flags: list[str] = field(default_factory=list)
    tests: dict[str, int] = field(default_factory=dict)  # grade_id -> index of the cell in nb


def repair(submission: nbformat.NotebookNode, source: nbformat.NotebookNode,
           release: nbformat.NotebookNode | None = None) -> Repaired:
    known = {}
    order = []
    for c in source.cells:
        gid = grade_id(c)
        if gid and nbgrader_meta(c):
            known[gid] = c
            order.append(gid)
    release_cells = {}
    if release is not None:
        for c in release.cells:
            gid = grade_id(c)
            if gid:
                release_cells.setdefault(gid, c)
    flags: list[str] = []
    seen: dict[str, nbformat.NotebookNode] = {}
    segments: dict[str | None, list] = {None: []}
    anchor = None
    for c in submission.cells:
        meta = nbgrader_meta(c)
        gid = meta.get("grade_id") if meta else None
        if gid is not None and not isinstance(gid, str):
            gid = str(gid)
        if gid in known:
            if gid in seen:
                if _kind(known[gid]) == "solution":
                    flags.append(f"duplicated grade_id {gid}: the extra copy runs as an ordinary cell")
                    segments.setdefault(anchor, []).append(_without_nbgrader(c))
                else:
                    flags.append(f"duplicated grade_id {gid}: extra copy removed")
                continue
            seen[gid] = c
            anchor = gid
            segments.setdefault(anchor, [])
            continue
        free = _without_nbgrader(c) if meta else _cell(c)
        if meta:
            if gid is not None:
                # the grade_id is the learner's text: never quoted in a flag (issue 41, class 7)
                flags.append("a cell with a grade_id the chapter does not have: its nbgrader metadata was removed")
        segments.setdefault(anchor, []).append(free)

    cells = list(segments[None])
    tests: dict[str, int] = {}
    for gid in order:
        src = known[gid]
        kind = _kind(src)
        meta_src = release_cells.get(gid, src)
        if kind == "solution":
            if gid in seen:
                cell = _cell(seen[gid])
                if cell.cell_type != src.cell_type:
                    flags.append(f"solution cell {gid} was changed from {src.cell_type} to {cell.cell_type}; "
                                 f"it runs as {src.cell_type}")
                    cell = _as_type(cell, src.cell_type)
                cell.metadata["nbgrader"] = copy.deepcopy(nbgrader_meta(meta_src) or nbgrader_meta(src))
                cells.append(cell)
            else:
                flags.append(f"deleted solution cell {gid} (not restored: write your answer in it)")
        else:
            restored = _cell(src, copy.deepcopy(src.metadata))  # the course's cell: small, and trusted
            if nbgrader_meta(meta_src):
                restored.metadata["nbgrader"] = copy.deepcopy(nbgrader_meta(meta_src))
            if restored.cell_type == "code":
                restored.outputs = []
                restored.execution_count = None
            label = "test" if kind == "test" else "read-only"
            if gid not in seen:
                flags.append(f"deleted {label} cell {gid} restored")
            else:
                sub = seen[gid]
                shown = {_norm(strip_hidden(src.source)), _norm(src.source)}
                if gid in release_cells:
                    shown.add(_norm(release_cells[gid].source))
                if (sub.cell_type != src.cell_type or _norm(sub.source) not in shown
                        or _grading_fields(sub) != _grading_fields(meta_src)):
                    flags.append(f"edited {label} cell {gid} restored")
            if kind == "test":
                tests[gid] = len(cells)
            cells.append(restored)
        cells.extend(segments.get(gid, []))
    # unique cell ids (a learner's copy may share one with a restored cell)
    used = set()
    for n, c in enumerate(cells):
        cid = c.get("id")
        if not isinstance(cid, str) or not cid or cid in used or len(cid) > 64:
            cid = f"cell-{n}"
            while cid in used:
                cid += "x"
            c["id"] = cid
        used.add(cid)
        if c.cell_type == "code":
            c.outputs = []
            c.execution_count = None
    return Repaired(unvalidated_notebook(cells, source.metadata), flags, tests)


def _grading_fields(cell) -> tuple:
    meta = nbgrader_meta(cell)
    points = meta.get("points")
    try:
        points = float(points) if points is not None else None
    except (TypeError, ValueError):
        points = str(points)
    return (bool(meta.get("grade")), bool(meta.get("solution")), bool(meta.get("locked")), points)


def _as_type(cell, cell_type: str):
    if cell_type == "code":
        new = nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata)
    elif cell_type == "markdown":
        new = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    else:
        new = nbformat.v4.new_raw_cell(cell.source, metadata=cell.metadata)
    if cell.get("id"):
        new.id = cell.id
    return new
