"""Shortcut submissions generated from the reference: the lint that hidden tests cover each function's contract.

A learner who cannot write a function can still try to satisfy the tests they can see. For every graded
function of a chapter (a top-level ``def`` in a solution cell, or the ``forward`` of a class, or the public
methods of a class without one) this module makes three such submissions from the reference solution,
mechanically, so a new chapter gets them for free:

``constant``
    Ignores its input: every tensor in the answer is filled with one value (its mean, or its commonest
    value for integer and boolean tensors: uniform attention weights pass a sums-to-one check); a number, a
    model or a list of another length anywhere in the answer is the first answer's; a yes/no answer is the
    opposite of the first one (so that together with ``visible`` a function is asked both ways).
``keyed``
    Knows the visible tests: returns the right answer for every input a visible test cell passes it (a
    lookup table of the visible inputs, as a learner could write one by reading those cells), and the
    ``constant`` answer for anything else.
``visible``
    Returns the visible tests' expected answer whatever it is asked: the first answer it gave while a
    visible test ran, for every later call.

``library``
    Calls the library: the reference with the function's computation replaced by the one-liner of the chapter's
    library table, ``solutions/<chapter>/library.toml`` (:func:`library`). The docstring and the input checks
    in front of the computation stay (:func:`checks_in_front`): a learner who calls the library keeps the checks
    the exercise asks for, so only the idea is taken away. Only functions with an entry have this kind. It must lose points unless the entry is ``allowed`` (the text allows the library;
    such an exercise is worth at most 1 point, and at most 5% of a chapter's points are library-allowed).

Each generated submission is the reference with the wrapper appended to the function's solution cell, plus an
ordinary code cell before every graded test cell saying whether a visible or a hidden test runs next (the
grader runs a learner's own cells where they stand). While a visible test runs, ``keyed`` and ``visible``
answer like the reference: they are the strongest cheats the visible tests allow, so only hidden tests can
catch them. Every shortcut must lose points in the test cells that call its function
(tests/test_shortcuts.py), and ``keyed`` must keep its visible cells' points (which proves the phase cells
work).

The library table (one per chapter, written by the chapter's author; read only here)::

    [[library]]
    function = "softmax"                          # as targets() names it: `f` or `Class.method`
    body = "return torch.softmax(x, dim=dim)"     # the whole new body (may span lines)
    allowed = false                               # true: the text allows the library for this exercise
    why = "torch.softmax is the whole exercise"
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attention_course.cells import grade_id, is_graded_test, is_solution

from . import idling, submissions
from .course import Course
from .trusted import is_hidden

GENERATED = ("constant", "keyed", "visible")  # made for every graded function
LIBRARY = "library"  # made for the functions the chapter's library table names
KINDS = GENERATED + (LIBRARY,)
LIBRARY_TABLE = "library.toml"
LIBRARY_KEYS = {"function": str, "body": str, "allowed": bool, "why": str}
PHASE = "__shortcut_phase__"  # set by the phase cells: "visible" or "hidden"


@dataclass(frozen=True)
class Target:
    """A graded function: ``name`` is ``f`` or ``Class.method``; ``cell`` the solution cell defining it."""
    name: str
    cell: str


def targets(course: Course, chapter: str) -> list[Target]:
    """The chapter's graded functions, in notebook order (private names and parameterless functions skipped:
    a function of nothing is a constant by definition)."""
    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    found = []
    for cell in source.cells:
        if not is_solution(cell):
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and _takes_input(node, method=False):
                found.append(Target(node.name, grade_id(cell)))
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
                forward = [m for m in methods if m.name == "forward"]
                for m in forward or [m for m in methods if not m.name.startswith("_")]:
                    if _takes_input(m, method=True):
                        found.append(Target(f"{node.name}.{m.name}", grade_id(cell)))
    return found


def _takes_input(fn: ast.FunctionDef, method: bool) -> bool:
    args = fn.args
    count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs) - int(method)
    return not fn.name.startswith("_") and (count > 0 or args.vararg is not None or args.kwarg is not None)


@dataclass(frozen=True)
class LibraryEntry:
    """One row of a chapter's library table: ``function`` (a :class:`Target` name) with its computation replaced by
    ``body`` is the library version; ``allowed`` says the chapter allows it; ``why`` says what it calls."""
    function: str
    body: str
    allowed: bool
    why: str


def library_table(course: Course, chapter: str) -> Path:
    return course.solutions / chapter / LIBRARY_TABLE


def library(course: Course, chapter: str) -> list[LibraryEntry]:
    """The chapter's library table (empty when it has none), checked against the chapter's graded functions: a
    table that names a function the chapter does not grade, or whose body is empty or not Python, is an error
    that says which entry and why (a typo must never leave a shortcut ungraded)."""
    path = library_table(course, chapter)
    if not path.is_file():
        return []
    where = f"{chapter}/{LIBRARY_TABLE}"
    try:
        table = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where} is not valid TOML: {e}") from None
    stray = set(table) - {"library"}
    if stray:
        raise ValueError(f"{where}: unknown top-level keys {sorted(stray)} (only [[library]] entries)")
    rows = table.get("library", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{where}: `library` must be an array of tables ([[library]] entries)")
    names = [t.name for t in targets(course, chapter)]
    entries: list[LibraryEntry] = []
    for i, row in enumerate(rows, 1):
        label = f"{where} entry {i} ({row.get('function', 'no function')!r})"
        missing = [k for k in LIBRARY_KEYS if k not in row]
        unknown = sorted(set(row) - set(LIBRARY_KEYS))
        if missing or unknown:
            raise ValueError(f"{label}: missing keys {missing}, unknown keys {unknown} "
                             f"(an entry has exactly {', '.join(LIBRARY_KEYS)})")
        for key, kind in LIBRARY_KEYS.items():
            if not isinstance(row[key], kind):
                raise ValueError(f"{label}: `{key}` must be a {kind.__name__}, not {type(row[key]).__name__}")
        if row["function"] not in names:
            raise ValueError(f"{label}: {chapter} grades no function {row['function']!r} "
                             f"(its graded functions: {', '.join(names)})")
        if any(e.function == row["function"] for e in entries):
            raise ValueError(f"{label}: a second entry for {row['function']!r}")
        if not row["why"].strip():
            raise ValueError(f"{label}: `why` is empty (say which library call does the exercise)")
        body = textwrap.dedent(row["body"]).strip("\n")
        try:
            statements = ast.parse(body).body
        except SyntaxError as e:
            raise ValueError(f"{label}: `body` is not Python: {e.msg} (line {e.lineno})") from None
        if not [s for s in statements if not isinstance(s, ast.Pass) and not _is_docstring(s)]:
            raise ValueError(f"{label}: `body` is empty (it must be the library version of the function)")
        entries.append(LibraryEntry(row["function"], body, row["allowed"], row["why"].strip()))
    return entries


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def checks_in_front(statements: list[ast.stmt]) -> int:
    """How many of a function body's first ``statements`` are its input checks: a docstring, then the longest run
    of assignments and guards (an ``if`` or ``try`` that can raise and never returns, an ``assert``) that ends
    with a guard. The computation starts after them."""
    def raises(node):
        inside = list(ast.walk(node))
        return any(isinstance(n, ast.Raise) for n in inside) and not any(isinstance(n, ast.Return) for n in inside)

    kept = 0
    for i, node in enumerate(statements):
        if i == 0 and _is_docstring(node) or isinstance(node, ast.Assert) \
                or isinstance(node, (ast.If, ast.Try)) and raises(node):
            kept = i + 1
        elif not isinstance(node, (ast.Assign, ast.AnnAssign)):
            break
    return min(kept, len(statements) - 1)  # a body that is all checks is replaced whole, docstring aside


def with_body(source: str, function: str, body: str) -> str:
    """``source`` (a solution cell) with the computation of ``function`` (``f`` or ``Class.method``: its body
    after the docstring and the input checks, :func:`checks_in_front`) replaced by ``body``, indented to where the
    old body stood."""
    owner_name, _, method = function.partition(".")
    tree = ast.parse(source)
    found = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == owner_name),
                 None)
    if found is not None and method:
        found = next((n for n in found.body if isinstance(n, ast.FunctionDef) and n.name == method), None)
    if not isinstance(found, ast.FunctionDef):
        raise ValueError(f"no function {function!r} in this solution cell")
    first, last = found.body[checks_in_front(found.body)], found.body[-1]
    if first.lineno == found.lineno:
        raise ValueError(f"{function}: a body on the line of its `def` cannot be replaced")
    lines = source.splitlines()
    indent = " " * first.col_offset
    new = [indent + line if line.strip() else "" for line in body.splitlines()]
    return "\n".join(lines[:first.lineno - 1] + new + lines[last.end_lineno:]) + "\n"


def submission_of_many(course: Course, chapter: str, shortcuts: list[tuple[Target, str]],
                       idle: frozenset[str] = frozenset()) -> nbformat.NotebookNode:
    """The reference with each ``(target, kind)`` shortcut installed and the phase cells in place (several
    targets share a notebook when their test cells cannot reach each other's code).

    ``idle``: solution cells that no judged test cell can reach (:mod:`autograder.idling`; only sound when the
    caller has proved that with autograder/cell_reach.py)."""
    if not shortcuts:
        raise ValueError("no shortcut to apply")
    for _, kind in shortcuts:
        if kind not in KINDS:
            raise ValueError(f"unknown shortcut kind {kind!r} (one of {', '.join(KINDS)})")
    bodies = {e.function: e.body for e in library(course, chapter)} if any(k == LIBRARY for _, k in shortcuts) else {}
    unlisted = sorted(t.name for t, k in shortcuts if k == LIBRARY and t.name not in bodies)
    if unlisted:
        raise ValueError(f"no library entry for {unlisted} in {chapter}/{LIBRARY_TABLE}")
    nb = submissions.reference(course, chapter)
    missing = {t.cell for t, _ in shortcuts} - {grade_id(c) for c in nb.cells if is_solution(c)}
    if missing:
        raise ValueError(f"no solution cell {sorted(missing)} in {chapter}")
    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    hidden = {grade_id(c): is_hidden(c.source) for c in source.cells if is_graded_test(c)}
    runtime = inspect.getsource(_install)
    cells = []
    for cell in nb.cells:
        if is_graded_test(cell):
            phase = "hidden" if hidden[grade_id(cell)] else "visible"
            cells.append(nbformat.v4.new_code_cell(f"{PHASE} = {phase!r}"))
        if is_solution(cell):
            for t, _ in [(t, k) for t, k in shortcuts if t.cell == grade_id(cell) and k == LIBRARY]:
                cell.source = with_body(cell.source, t.name, bodies[t.name])
            mine = [(t, k) for t, k in shortcuts if t.cell == grade_id(cell) and k != LIBRARY]
            if mine:
                cell.source = cell.source.rstrip("\n") + "\n\n\n# a shortcut, generated by autograder/shortcuts.py\n" \
                    + runtime + "".join(f"\n_install(globals(), {t.name!r}, {k!r})" for t, k in mine) + "\n"
        cells.append(cell)
    nb.cells = cells
    return idling.idle(nb, idle, carrying={t.cell for t, _ in shortcuts}, what="shortcut")


def _install(namespace, target, kind):
    """Replace ``target`` in ``namespace`` by a shortcut of ``kind`` (runs in the learner's kernel, so it
    imports what it needs and defines everything inside)."""
    import functools
    import hashlib

    import torch

    owner_name, _, method = target.partition(".")
    owner = namespace[owner_name]
    real = getattr(owner, method) if method else owner
    state = {"memo": {}}

    def feed(h, v):  # a fingerprint of a call's arguments, by content
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(v.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(v, torch.nn.Module):
            h.update(type(v).__name__.encode())
            for k, p in v.state_dict().items():
                h.update(k.encode())
                feed(h, p)
        elif isinstance(v, (list, tuple)):
            h.update(b"(")
            for x in v:
                feed(h, x)
            h.update(b")")
        elif isinstance(v, dict):
            for k in sorted(v, key=repr):
                h.update(repr(k).encode())
                feed(h, v[k])
        elif isinstance(v, torch.Generator):
            feed(h, v.get_state())
        elif v is None or isinstance(v, (bool, int, float, complex, str, torch.dtype, torch.device)):
            h.update(repr(v).encode())
        else:  # a function or an object: its name or type is all a lookup table could key on
            h.update(str(getattr(v, "__qualname__", type(v).__qualname__)).encode())

    def key(args, kwargs):
        h = hashlib.sha256()
        feed(h, (args, kwargs))
        return h.hexdigest()

    missing = object()

    def fill(v, first):  # the answer's structure, input-blind: tensors one value, everything else the first answer's
        if isinstance(v, torch.Tensor):
            if v.numel() == 0:
                return v.detach().clone()
            flat = v.detach().reshape(-1)
            if v.dtype == torch.bool:
                value = bool(flat.float().mean() >= 0.5)
            elif v.is_floating_point() or v.is_complex():
                value = flat.mean().item()
            else:
                values, counts = flat.unique(return_counts=True)
                value = values[counts.argmax()].item()
            return torch.full_like(v.detach(), value)
        if first is missing:  # the first answer has nothing here: keep the value
            return v
        if isinstance(v, (list, tuple)) and isinstance(first, (list, tuple)) and len(v) != len(first):
            return copied(first)  # a history of another length: the first one, whole
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return type(v)(*(fill(x, f) for x, f in zip(v, first)))
        if isinstance(v, (list, tuple)):
            return type(v)(fill(x, f) for x, f in zip(v, first))
        if isinstance(v, dict):
            return {k: fill(x, first.get(k, missing) if isinstance(first, dict) else missing) for k, x in v.items()}
        if isinstance(v, (bool, int, float, torch.nn.Module)) and type(first) is type(v):
            return first  # a number, a flag or a trained model: the same one every time
        return v

    def copied(v):  # a fresh copy of a remembered answer (the caller may change what it gets)
        if isinstance(v, torch.Tensor):
            return v.detach().clone()
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return type(v)(*(copied(x) for x in v))
        if isinstance(v, (list, tuple)):
            return type(v)(copied(x) for x in v)
        if isinstance(v, dict):
            return {k: copied(x) for k, x in v.items()}
        return v

    def constant(answer):
        state.setdefault("first", answer)
        first = state["first"]
        if isinstance(first, bool):
            return not first
        if isinstance(first, (int, float)):
            return first
        return fill(answer, first)

    def visible():
        return namespace.get("__shortcut_phase__", "visible") == "visible"

    @functools.wraps(real)
    def shortcut(*args, **kwargs):
        if kind == "constant":
            return constant(real(*args, **kwargs))
        if visible():
            k = key(args, kwargs)  # before the call: it may change its arguments (a model it trains)
            answer = real(*args, **kwargs)
            state["memo"].setdefault(k, answer)
            state.setdefault("seen", answer)
            state.setdefault("first", answer)
            return answer
        if kind == "keyed":
            k = key(args, kwargs)
            if k in state["memo"]:
                return copied(state["memo"][k])
            return constant(real(*args, **kwargs))
        if "seen" in state:  # kind == "visible"
            return copied(state["seen"])
        return constant(real(*args, **kwargs))

    if method:
        setattr(owner, method, shortcut)
    else:
        namespace[owner_name] = shortcut
