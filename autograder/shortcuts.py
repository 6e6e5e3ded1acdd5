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

Each submission is the reference with the wrapper appended to the function's solution cell, plus an
ordinary code cell before every graded test cell saying whether a visible or a hidden test runs next (the
grader runs a learner's own cells where they stand). While a visible test runs, ``keyed`` and ``visible``
answer like the reference: they are the strongest cheats the visible tests allow, so only hidden tests can
catch them. Every shortcut must lose points in the test cells that call its function
(tests/test_shortcuts.py), and ``keyed`` must keep its visible cells' points (which proves the phase cells
work).
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

import nbformat

from attention_course.cells import grade_id, is_graded_test, is_solution

from . import idling, submissions
from .course import Course
from .trusted import is_hidden

KINDS = ("constant", "keyed", "visible")
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
            mine = [(t, k) for t, k in shortcuts if t.cell == grade_id(cell)]
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
