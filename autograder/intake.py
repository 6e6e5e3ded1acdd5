"""What the grader takes in from a learner, made safe before anything touches JSON, a database or a page.

Two things come from a learner: the submitted file, and what the learner's kernel sends back (outputs,
records, the reason it died). Either can hold text Python can hold but UTF-8 cannot (a lone UTF-16
surrogate such as ``"\\ud800"``, which ``json.loads`` accepts and every ``.encode("utf-8")`` later rejects),
or JSON nested so deep that recursive code (``copy.deepcopy``, nbformat, an indenting ``json.dumps``) runs
out of stack. Both used to end a notebook's grading in an exception, or the whole batch when the text
reached the gradebook or a file.

:func:`clean_json` is the one gate: it rebuilds a JSON value with every string made encodable (lone
surrogates become U+FFFD), every key a string, non-finite floats as ``None`` and anything nested deeper
than :data:`MAX_DEPTH` replaced by a short note; it says what it changed, and the grader turns that into
a flag on the result, so the notebook is graded and the instructor sees why its outputs differ.

:func:`read_submission` reads a submitted file: it rejects what cannot be a notebook with a reason for
that learner (:class:`Unusable`) and passes everything else through :func:`clean_json`.
:func:`clean_report` does the same for the kernel's report. Neither ever raises for a learner's input.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import nbformat

MAX_DEPTH = 100  # deep enough for every check record (their values nest at most 20 levels, 2 JSON levels each)
MAX_NOTEBOOK_BYTES = 50 << 20
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


def read_submission(path: Path, chapter: str) -> tuple[nbformat.NotebookNode, list[str]]:
    """A submitted file as a notebook (cells, sources and metadata only) and the intake's flags.

    Raises :class:`Unusable` with the reason when the file cannot be a notebook of ``chapter``.
    """
    path = Path(path)
    expected = f"{chapter}.ipynb"
    if path.name != expected:  # the name itself is the learner's text: never quoted in a reason (issue 41, class 7)
        raise Unusable(f"wrong file name: expected {expected}")
    # Never through a link, never blocking on a FIFO, never more than the limit (autograder/learner_files.py).
    try:
        size = os.lstat(path).st_size
    except OSError:
        raise Unusable("file not found") from None
    if size > MAX_NOTEBOOK_BYTES:
        raise Unusable(f"file too large ({size >> 20} MB; the limit is {MAX_NOTEBOOK_BYTES >> 20} MB)")
    from .learner_files import NotReadable, read_bounded

    try:
        raw = read_bounded(path, MAX_NOTEBOOK_BYTES)
    except NotReadable as exc:
        what = str(exc)
        if what == "missing":
            raise Unusable("file not found") from None
        if what.startswith(("too large", "unreadable")):
            raise Unusable(f"file {what}") from None
        raise Unusable(f"not a regular file (a {what}): refused") from None
    if not raw.strip():
        raise Unusable("empty file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Unusable("malformed JSON (the file is not UTF-8 text)") from None
    except RecursionError:
        raise Unusable(f"malformed JSON (nested deeper than Python can read)") from None
    except ValueError:
        raise Unusable("malformed JSON") from None
    data, problems = clean_json(data)
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Unusable("not a notebook (no list of cells)")
    cells = []
    for c in data["cells"]:
        if not isinstance(c, dict) or c.get("cell_type") not in ("code", "markdown", "raw"):
            raise Unusable("not a notebook (a cell without a valid cell_type)")
        src = c.get("source", "")
        if isinstance(src, list):
            if not all(isinstance(s, str) for s in src):
                raise Unusable("not a notebook (a cell's source is not text)")
            src = "".join(src)
        if not isinstance(src, str):
            raise Unusable("not a notebook (a cell's source is not text)")
        meta = c.get("metadata") if isinstance(c.get("metadata"), dict) else {}
        if not isinstance(meta.get("nbgrader", {}), dict):
            meta = {k: v for k, v in meta.items() if k != "nbgrader"}
        if c["cell_type"] == "code":
            cell = nbformat.v4.new_code_cell(src, metadata=meta)
        elif c["cell_type"] == "markdown":
            cell = nbformat.v4.new_markdown_cell(src, metadata=meta)
        else:
            cell = nbformat.v4.new_raw_cell(src, metadata=meta)
        if isinstance(c.get("id"), str):
            cell.id = c["id"]
        cells.append(cell)
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    nb = nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": meta, "cells": cells})
    return nb, [f"in the submitted file: {p}" for p in sorted(problems)]
