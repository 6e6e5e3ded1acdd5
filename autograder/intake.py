"""What the grader takes in from a learner, made safe before anything touches JSON, a database or a page.

Two things come from a learner: the submitted file, and what the learner's kernel sends back (outputs,
records, the reason it died). Either can hold text Python can hold but UTF-8 cannot (a lone UTF-16
surrogate such as ``"\\ud800"``, which ``json.loads`` accepts and every ``.encode("utf-8")`` later rejects),
or JSON nested so deep that recursive code (``copy.deepcopy``, nbformat, an indenting ``json.dumps``) runs
out of stack. Both used to end a notebook's grading in an exception, or the whole batch when the text
reached the gradebook or a file.

:func:`read_submission` reads a submitted file within :data:`BUDGET` (issue 41, class 5): it is measured
before it is parsed, parsed in a memory- and time-limited child process, and cut there to what grading reads
(cells' type, id and text, and the metadata on ``safe_output``'s allow-list; outputs, attachments and every
other key are dropped before anything copies them) by :mod:`autograder.bounded_json`. What cannot be a
notebook, or is past a budget, is rejected with a reason for that learner (:class:`Unusable`); the rest passes
through :func:`clean_json`.

:func:`clean_json` is the one gate for text: it rebuilds a JSON value with every string made encodable (lone
surrogates become U+FFFD), every key a string, non-finite floats as ``None`` and anything nested deeper
than :data:`MAX_DEPTH` replaced by a short note; it says what it changed, and the grader turns that into
a flag on the result, so the notebook is graded and the instructor sees why its outputs differ.
:func:`clean_report` does the same for the kernel's report. Neither ever raises for a learner's input.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import nbformat
from nbformat.v4.nbbase import random_cell_id

from . import bounded_json, safe_output

MAX_DEPTH = 100  # deep enough for every check record (their values nest at most 20 levels, 2 JSON levels each)
MAX_NOTEBOOK_BYTES = 50 << 20

# What a submitted file may hold. The course's largest honest notebooks, measured on its releases with their
# outputs and its solution notebooks (chapters/ and solutions/, 2026-11): at most 4,459 JSON values (chapter
# 10's source; 4,386 in its release with outputs), nested 8 levels (a cell's outputs' data; 6 without
# outputs), 92 cells, a cell's text at most 6,124 characters, 164,919 in all, the longest string a 202 KB PNG,
# under 30 KB of the metadata grading keeps. Each budget leaves a wide margin for a learner's own outputs and
# cells (a long training log, a big figure), and bounds what the trusted side can be made to build:
BUDGET = bounded_json.Budget(
    max_bytes=MAX_NOTEBOOK_BYTES,
    max_values=500_000,  # 110x; a printed line is one value: a 400,000-line log still passes; the parse's own
    #                      cost is then at most about 50 MB (about 100 bytes a value) beside the strings
    max_depth=64,  # 8x (widget state nests about 12)
    max_string_bytes=16 << 20,  # 80x; 3x the largest image safe_output keeps (4 MiB, 5.6 MB as base64)
    # A cell and a kept metadata value cost the trusted side a fixed amount whatever their size in the file (a
    # NotebookNode, structure.repair's copy, the reply): about 2.6 KB a cell and 110 bytes a value, measured (issue
    # 41's red team: 5,000 empty cells, 0.4 MB, cost 12.9 MB, 32x). These two budgets bound that fixed part.
    max_cells=1_000,  # 11x
    max_cell_chars=1 << 20,  # 170x
    max_source_chars=4 << 20,  # 25x: every cell's text is executed, fingerprinted and stored with the result
    max_kept_metadata_bytes=1 << 20,  # 35x
    max_kept_metadata_values=20_000,  # 17x (chapter 10's release keeps 1,168)
    # The child needs about 3 times an accepted file (its bytes, then its text, then its strings), 8 times when
    # its text holds a character outside the BMP (4 bytes a character, in the text and again in the strings):
    # 422 MB for 50 MB of it, measured. 1 GiB leaves 2.4x over that worst case (benchmarks/intake_memory.py).
    memory_bytes=1 << 30,
    wall_s=60.0,  # a 50 MiB file takes about 2 s of CPU to measure and parse; 30x for a loaded machine
)
NBGRADER_REMOVED = "a cell's nbgrader metadata was not valid (nbgrader would not accept it) and was removed"
CUT = "[cut by the grader: nested too deeply]"

NOT_UNICODE = "text that is not valid Unicode was replaced (U+FFFD)"
TOO_DEEP = f"data nested deeper than {MAX_DEPTH} levels was cut"


class Unusable(Exception):
    """The submission cannot be graded at all; ``str(exc)`` is the reason shown to the learner."""


def clean_text(text: str) -> tuple[str, bool]:
    """``text`` with every code point UTF-8 cannot encode (lone surrogates) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text), True


def clean_json(value, max_depth: int = MAX_DEPTH, fix_text: bool = True) -> tuple[object, set[str]]:
    """A copy of a JSON-like value safe to serialise, deep-copy and store, and what had to change.

    Iterative (an explicit stack), so a value nested thousands of levels deep cannot exhaust Python's stack.
    ``fix_text=False`` leaves strings as they are (the kernel's frames carry lone surrogates through
    ``surrogatepass``; the engine replaces and flags them).
    """
    problems: set[str] = set()

    def leaf(v):
        if isinstance(v, str) and not fix_text:
            return v
        if isinstance(v, str):
            text, changed = clean_text(v)
            if changed:
                problems.add(NOT_UNICODE)
            return text
        if v is None or type(v) in (bool, int):
            return v
        if type(v) is float:
            return v if math.isfinite(v) else None
        return str(type(v).__name__)  # not JSON at all: its type's name

    root: list = [None]
    stack = [(value, root, 0, 0)]  # (value, container, key in container, depth)
    while stack:
        v, parent, key, depth = stack.pop()
        if isinstance(v, (dict, list, tuple)) and depth >= max_depth:
            problems.add(TOO_DEEP)
            parent[key] = CUT
        elif isinstance(v, dict):
            out: dict = {}
            parent[key] = out
            for k, item in v.items():
                k = clean_text(k)[0] if isinstance(k, str) else str(k)
                out[k] = None
                stack.append((item, out, k, depth + 1))
        elif isinstance(v, (list, tuple)):
            out_list = [None] * len(v)
            parent[key] = out_list
            for i, item in enumerate(v):
                stack.append((item, out_list, i, depth + 1))
        else:
            parent[key] = leaf(v)
    return root[0], problems


def clean_report(report) -> tuple[dict, list[str]]:
    """The kernel's report (learner-controlled) through :func:`clean_json`; flags naming what changed."""
    cleaned, problems = clean_json(report if isinstance(report, dict) else {})
    return cleaned, [f"in the notebook's outputs: {p}" for p in sorted(problems)]


def read_submission(path: Path, chapter: str,
                    budget: bounded_json.Budget = BUDGET) -> tuple[nbformat.NotebookNode, list[str]]:
    """A submitted file as a notebook (cells, sources and allow-listed metadata only) and the intake's flags.

    Raises :class:`Unusable` with the reason when the file cannot be a notebook of ``chapter`` or is past
    ``budget``; :class:`bounded_json.ReaderFailed` when the grader's own reader could not run.
    """
    path = Path(path)
    expected = f"{chapter}.ipynb"
    if path.name != expected:  # the name itself is the learner's text: never quoted in a reason (issue 41, class 7)
        raise Unusable(f"wrong file name: expected {expected}")
    # Never through a link, never blocking on a FIFO, never more than the limit (autograder/learner_files.py,
    # which the reader's child uses to open it).
    try:
        size = os.lstat(path).st_size
    except OSError:
        raise Unusable("file not found") from None
    if size > budget.max_bytes:
        raise Unusable(f"file too large ({size >> 20} MB; the limit is {budget.max_bytes >> 20} MB)")
    try:
        skeleton = bounded_json.read_notebook(path, budget, safe_output.CELL_METADATA, safe_output.NOTEBOOK_METADATA)
    except bounded_json.Unreadable as exc:
        what = str(exc)
        if what == "missing":
            raise Unusable("file not found") from None
        if what.startswith(("too large", "unreadable")):
            raise Unusable(f"file {what}") from None
        raise Unusable(f"not a regular file (a {what}): refused") from None
    except bounded_json.Refused as exc:
        raise Unusable(str(exc)) from None
    skeleton, problems = clean_json(skeleton)
    flags = [f"in the submitted file: {p}" for p in sorted(problems)]
    cells = []
    for kind, cid, src, meta in skeleton["cells"]:
        kept = safe_output.cell_metadata(meta)  # the allow-list's shapes (the keys were cut in the reader)
        if "nbgrader" in meta and "nbgrader" not in kept and NBGRADER_REMOVED not in flags:
            flags.append(NBGRADER_REMOVED)
        cell = {"id": cid or random_cell_id(), "cell_type": kind, "metadata": kept, "source": src}
        if kind == "code":
            cell.update(outputs=[], execution_count=None)  # the grader runs the notebook again
        cells.append(cell)
    meta = {k: v for k, v in skeleton["metadata"].items() if isinstance(v, dict)}
    nb = nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": meta, "cells": cells})
    return nb, flags
