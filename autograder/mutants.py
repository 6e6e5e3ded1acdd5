"""``python -m autograder mutants [CHAPTER...]``: the mutation score of every graded function's hidden tests.

A catalogue of mistakes (``mistakes.toml``) samples the slips a learner makes; mutation testing covers them
mechanically. This module makes small, realistic changes (*mutants*) to every reference solution cell,
grades each one with the isolated engine exactly as a learner's notebook is graded, and counts how many
lose points in their exercise's test cells.

The mutants (``generate``), each attributed to its solution cell (grade_id) and enclosing function:

``arith``     an arithmetic operator swapped (+ -, * /, // /, ** *, @ *);
``compare``   a comparison swapped (< <=, > >=, == !=, is / is not, in / not in);
``bounds``    a bound shifted by one: a slice bound, ``range``'s start or stop, a ``tril``/``triu``/
              ``diagonal=`` offset (one given or the default), a window size;
``dim``       an axis changed (-1 and -2, 0 and 1, 2 to 1, -3 to -2) in a ``dim=``/``axis=`` argument, a
              reducing or reshaping method's positional dim, or a ``.shape[i]`` index;
``constant``  a number changed: 0 and 1, -inf to 0, an eps to 0, any other float doubled (a scale);
``scale``     a scale not applied (``x / sqrt(d)`` or ``x * scale`` becomes ``x``);
``drop``      a call dropped: ``torch.no_grad`` (a ``with`` block or a decorator), ``.to(...)``,
              ``.contiguous()``, ``.transpose(...)``, ``.clone()``, ``.detach()``, ``.masked_fill(...)``,
              a dropout call, a ``training=`` or ``device=`` argument;
``delete``    a statement deleted (replaced by ``pass``): a re-assignment (a mask or scale line), an
              augmented assignment, a bare call;
``swap``      two adjacent positional arguments of a call swapped (not of a symmetric call such as
              ``transpose`` or ``maximum``).

What is left alone, on purpose: docstrings and strings; code outside the ``### BEGIN/END SOLUTION``
markers; guard clauses (an ``if`` whose body only raises, and ``raise`` statements), whose slips change which
bad inputs are refused rather than any answer (the catalogues and ``check.raises`` cover those).

Each mutant's source is the reference cell with one node's text replaced (comments and layout kept), and is
checked by re-parsing: its syntax tree must be exactly the reference's tree with that one node changed.

Grading (``grade_chapter``) packs mutants the way the shortcut lint packs shortcuts (tests/test_shortcuts.py):
one mutant per solution cell per notebook, cells sharing a notebook only when neither's exercise tests can
reach the other's code (autograder/cell_reach.py); every solution cell no judged cell reaches is idled
(autograder/idling.py), so a notebook costs little more than the exercises
it judges. A mutant is judged on its own exercise's graded test cells (those after its solution cell, up to
the next one): *killed* when they lose points (a crash or a timeout loses them too), else *survived*, unless
it is a documented *equivalent* (``EQUIVALENT``: a reason per mutant, or the class of device-only mutants,
which cannot change anything on the CPU that grades). A notebook the grader could not finish (the whole
notebook timed out or the kernel died) is graded again one mutant at a time.

Results are cached per chapter in ``grading/mutants/<chapter>.json`` (keyed by the mutant's source, and
valid while the chapter's test cells are unchanged); the
command prints per chapter and per function: mutants, killed, survived, equivalent and the score
killed / (total - equivalent), then every survivor as a diff.
"""
from __future__ import annotations

import argparse
import ast
import copy
import difflib
import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from attention_course.cells import grade_id, is_graded_test, is_solution

from .course import Course

# -- the mutants ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One small change to one solution cell."""
    chapter: str
    cell: str  # grade_id of the solution cell
    function: str  # the enclosing top-level function, ``Class.method``, or ``<cell>`` for module-level code
    operator: str  # one of OPERATORS
    line: int  # 1-based line of the change in the cell
    before: str  # the changed node's text, as in the reference
    after: str  # its replacement
    source: str  # the whole mutated cell
    reference: str = field(repr=False, default="")  # the reference cell

    @property
    def id(self) -> str:
        """Stable while the cell's code is: a digest of the cell, the place and the change."""
        h = hashlib.sha256(f"{self.cell}\0{self.line}\0{self.operator}\0{self.source}".encode())
        return f"{self.cell}:{self.line}:{self.operator}:{h.hexdigest()[:10]}"

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.reference.splitlines(True), self.source.splitlines(True),
                                            f"{self.cell} (reference)", f"{self.cell} (mutant)", n=1))


OPERATORS = ("arith", "compare", "bounds", "dim", "constant", "scale", "drop", "delete", "swap")

_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Pow: ast.Mult, ast.MatMult: ast.Mult}
_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_DIM_SWAP = {-1: -2, -2: -1, 0: 1, 1: 0, 2: 1, -3: -2}
_DIM_KEYWORDS = {"dim", "axis", "dim0", "dim1", "start_dim", "end_dim"}
# Methods and functions whose positional integer arguments are dimensions (after the tensor, for functions).
_DIM_CALLS = {"sum", "mean", "softmax", "log_softmax", "amax", "amin", "max", "min", "argmax", "argmin", "cumsum",
              "cumprod", "unsqueeze", "squeeze", "flatten", "unflatten", "logsumexp", "var", "std", "norm", "cat",
              "stack", "size", "transpose", "swapaxes", "movedim", "narrow", "split", "chunk", "roll", "flip",
              "diff", "prod", "all", "any", "count_nonzero", "unbind", "select", "index_select", "gather"}
_OFFSET_CALLS = {"tril", "triu", "diagonal", "diag", "diag_embed", "tril_indices", "triu_indices"}
_OFFSET_KEYWORDS = {"diagonal", "offset"}
_DROPPED_METHODS = {"to", "contiguous", "transpose", "clone", "detach", "masked_fill", "t", "float", "double",
                    "cpu", "cuda", "type_as"}
_DEVICE_ONLY_METHODS = {"to", "cpu", "cuda"}  # dropping these can only move data between devices (see below)
_SYMMETRIC = {"transpose", "swapaxes", "swapdims", "maximum", "minimum", "max", "min", "add", "mul", "eq", "ne",
              "logical_and", "logical_or", "logical_xor", "isclose", "allclose", "equal", "hypot", "gcd", "lcm",
              "broadcast_shapes"}
_SCALE_CALLS = {"sqrt", "rsqrt", "isqrt"}


def _int_value(node: ast.AST) -> int | None:
    """The value of an int literal (``3`` or ``-3``), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return -inner if inner is not None else None
    return None


def _int_node(value: int) -> ast.AST:
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def _shifted(node: ast.AST, away_from_zero: bool = False) -> ast.AST:
    """``node`` moved by one: a literal folded (n + 1, or n - 1 for a negative one when ``away_from_zero``),
    anything else ``(node) + 1``."""
    value = _int_value(node)
    if value is not None:
        return _int_node(value - 1 if away_from_zero and value < 0 else value + 1)
    return ast.BinOp(copy.deepcopy(node), ast.Add(), ast.Constant(1))


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _is_method_call(call: ast.Call) -> bool:
    """``x.name(...)`` on a value (not ``torch.name(...)``/``F.name(...)``/``math.name(...)``)."""
    f = call.func
    return isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name)
                                                 and f.value.id in ("torch", "F", "nn", "math", "np", "functional"))


def _is_minus_inf(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and _call_name(node) == "float" and len(node.args) == 1 \
            and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).strip().lower() == "-inf":
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        o = node.operand
        return (isinstance(o, ast.Attribute) and o.attr == "inf") or (
            isinstance(o, ast.Call) and _call_name(o) == "float" and o.args
            and isinstance(o.args[0], ast.Constant) and str(o.args[0].value).strip().lower() == "inf")
    return isinstance(node, ast.Attribute) and node.attr == "min" and isinstance(node.value, ast.Call) \
        and _call_name(node.value) == "finfo"


def _is_scale(node: ast.AST) -> bool:
    """A scale factor as written: ``sqrt(...)``, ``x ** 0.5``, or a name mentioning ``scale``."""
    if isinstance(node, ast.Call) and _call_name(node) in _SCALE_CALLS:
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) \
            and node.right.value in (0.5, -0.5):
        return True
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "scale" in name.lower()


def _expression_mutations(node: ast.AST, parent: ast.AST | None):
    """(operator, replacement node) for one expression node; replacements are fresh nodes."""
    if isinstance(node, ast.BinOp):
        if type(node.op) in _ARITH:
            yield "arith", ast.BinOp(node.left, _ARITH[type(node.op)](), node.right)
        if isinstance(node.op, (ast.Div, ast.Mult)) and _is_scale(node.right):
            yield "scale", node.left
        elif isinstance(node.op, ast.Mult) and _is_scale(node.left):
            yield "scale", node.right
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE:
                ops = list(node.ops)
                ops[i] = _COMPARE[type(op)]()
                yield "compare", ast.Compare(node.left, ops, node.comparators)
    elif isinstance(node, ast.Slice):
        for part in ("lower", "upper"):
            bound = getattr(node, part)
            if bound is not None:
                new = copy.copy(node)
                setattr(new, part, _shifted(bound, away_from_zero=True))
                yield "bounds", new
    elif isinstance(node, ast.Call):
        yield from _call_mutations(node)
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        value = _int_value(node.slice)
        if value in _DIM_SWAP:
            yield "dim", ast.Subscript(node.value, _int_node(_DIM_SWAP[value]), node.ctx)
    if _is_minus_inf(node):
        yield "constant", ast.Constant(0.0)
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and not _is_dim_literal(node, parent):
        v = node.value
        if v in (0, 1):
            yield "constant", ast.Constant(type(v)(1 - v))
        elif isinstance(v, float):
            yield "constant", ast.Constant(0.0 if 0 < abs(v) < 1e-3 else v * 2)


def _is_dim_literal(node: ast.AST, parent: ast.AST | None) -> bool:
    """A literal the ``dim`` operator already changes (so it is not also mutated as a constant)."""
    if isinstance(parent, ast.UnaryOp):
        return True  # -1 and friends: a dim or an offset, moved by ``dim``/``bounds``, or a sign
    if isinstance(parent, ast.keyword) and parent.arg in _DIM_KEYWORDS | _OFFSET_KEYWORDS:
        return True
    if isinstance(parent, ast.Call) and node in parent.args:
        name = _call_name(parent)
        return name in _DIM_CALLS or name in _OFFSET_CALLS or name == "range"
    return isinstance(parent, (ast.Slice, ast.Subscript))


def _call_mutations(call: ast.Call):
    name = _call_name(call)
    method = _is_method_call(call)

    def with_args(args=None, keywords=None) -> ast.Call:
        return ast.Call(call.func, call.args if args is None else args,
                        call.keywords if keywords is None else keywords)

    # dims, positional and keyword
    if name in _DIM_CALLS:
        first = 0 if method else 1  # x.sum(dim), but torch.sum(x, dim) and torch.cat(tensors, dim)
        for i in range(first, len(call.args)):
            value = _int_value(call.args[i])
            if value in _DIM_SWAP and not (name in ("transpose", "swapaxes") and _DIM_SWAP[value] in
                                           {_int_value(a) for a in call.args}):
                args = list(call.args)
                args[i] = _int_node(_DIM_SWAP[value])
                yield "dim", with_args(args=args)
    for j, kw in enumerate(call.keywords):
        value = _int_value(kw.value)
        if kw.arg in _DIM_KEYWORDS and value in _DIM_SWAP:
            kws = list(call.keywords)
            kws[j] = ast.keyword(kw.arg, _int_node(_DIM_SWAP[value]))
            yield "dim", with_args(keywords=kws)
    # offsets and windows, by one either way
    for j, kw in enumerate(call.keywords):
        if kw.arg in _OFFSET_KEYWORDS or (kw.arg and "window" in kw.arg):
            for delta in (1, -1):
                kws = list(call.keywords)
                v = _int_value(kw.value)
                kws[j] = ast.keyword(kw.arg, _int_node(v + delta) if v is not None else
                                     ast.BinOp(kw.value, ast.Add() if delta > 0 else ast.Sub(), ast.Constant(1)))
                yield "bounds", with_args(keywords=kws)
    if name in ("tril", "triu"):
        offset_at = 0 if method else 1
        if len(call.args) > offset_at:
            for delta in (1, -1):
                args = list(call.args)
                v = _int_value(args[offset_at])
                args[offset_at] = _int_node(v + delta) if v is not None else \
                    ast.BinOp(args[offset_at], ast.Add() if delta > 0 else ast.Sub(), ast.Constant(1))
                yield "bounds", with_args(args=args)
        elif not any(kw.arg == "diagonal" for kw in call.keywords):
            for offset in (1, -1):
                yield "bounds", with_args(keywords=[*call.keywords, ast.keyword("diagonal", _int_node(offset))])
    if name == "range" and not method and call.args:
        stop = 0 if len(call.args) == 1 else 1
        args = list(call.args)
        args[stop] = _shifted(args[stop])
        yield "bounds", with_args(args=args)
        if len(call.args) >= 2:
            args = list(call.args)
            args[0] = _shifted(args[0])
            yield "bounds", with_args(args=args)
    # calls dropped
    if method and name in _DROPPED_METHODS:
        yield ("drop-device" if name in _DEVICE_ONLY_METHODS else "drop"), call.func.value
    if "dropout" in name.lower() and call.args:  # F.dropout(x, ...) or self.dropout(x): x
        yield "drop", call.args[0]
    for j, kw in enumerate(call.keywords):
        if kw.arg in ("training", "device"):
            yield ("drop-device" if kw.arg == "device" else "drop"), \
                with_args(keywords=call.keywords[:j] + call.keywords[j + 1:])
    # two adjacent arguments swapped
    if name not in _SYMMETRIC and not any(isinstance(a, ast.Starred) for a in call.args):
        for i in range(len(call.args) - 1):
            a, b = call.args[i], call.args[i + 1]
            if ast.dump(a) != ast.dump(b):
                args = list(call.args)
                args[i], args[i + 1] = b, a
                yield "swap", with_args(args=args)


# -- applying a mutation as a text edit ----------------------------------------------------------------------


class _Source:
    """A cell's text with byte-offset positions (``ast`` columns count UTF-8 bytes)."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode())

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def replaced(self, start: int, end: int, new: str) -> str:
        return self.text[:start] + new + self.text[end:]


def _solution_regions(text: str) -> list[tuple[int, int]]:
    """The (first, last) lines (1-based) between each ``### BEGIN SOLUTION`` and ``### END SOLUTION``; the
    whole cell when it has no markers."""
    lines = text.splitlines()
    begins = [i + 2 for i, line in enumerate(lines) if line.strip() == "### BEGIN SOLUTION"]
    ends = [i for i, line in enumerate(lines) if line.strip() == "### END SOLUTION"]
    return list(zip(begins, ends)) if begins else [(1, len(lines))]


def _in_solution(node: ast.AST, regions: list[tuple[int, int]]) -> bool:
    return any(b <= node.lineno and node.end_lineno <= e for b, e in regions)


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _owner(node: ast.AST, parents: dict) -> str:
    chain = []
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            chain.append(node.name)
    chain.reverse()
    if not chain:
        return "<cell>"
    return ".".join(chain[:2])  # a class and its method, or a function (nested helpers count as their owner's)


def _is_guard(node: ast.AST) -> bool:
    """``raise``, or an ``if`` whose body only raises (input validation)."""
    return isinstance(node, ast.Raise) or (isinstance(node, ast.If) and all(isinstance(s, ast.Raise)
                                                                            for s in node.body)
                                           and not node.orelse)


def _docstrings(tree: ast.AST) -> set[ast.AST]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body \
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant):
            out.add(n.body[0])
    return out


def _bound_before(stmt: ast.AST, parents: dict) -> bool:
    """Every target of an assignment is a name the enclosing function (or cell) bound earlier: deleting the
    statement leaves the old value in use instead of a NameError (a mask or a scale that is not applied)."""
    if not isinstance(stmt, ast.Assign):
        return False
    names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if len(names) != len(stmt.targets):
        return False
    scope = stmt
    while scope in parents and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = parents[scope]
    bound = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = scope.args
        bound |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x}
    for n in ast.walk(scope):
        if n is stmt:
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and (n.lineno, n.col_offset) < \
                (stmt.lineno, stmt.col_offset):
            bound.add(n.id)
    return all(name in bound for name in names)


def mutate_source(text: str, chapter: str = "", cell: str = "") -> list[Mutant]:
    """Every mutant of one solution cell's source, in source order, without duplicates."""
    tree = ast.parse(text)
    src = _Source(text)
    regions = _solution_regions(text)
    parents = _parents(tree)
    skip = _docstrings(tree)
    guarded = set()
    for n in ast.walk(tree):
        if _is_guard(n):
            guarded |= set(ast.walk(n))
    reference_dump = ast.dump(tree)
    out, seen = [], {text}

    def emit(operator: str, node: ast.AST, new_text: str, expected: ast.AST, start: int, end: int,
             before: str | None = None):
        for candidate in (new_text, f"({new_text})"):
            mutated = src.replaced(start, end, candidate)
            if mutated in seen:
                return
            try:
                ok = ast.dump(ast.parse(mutated)) == ast.dump(expected)
            except SyntaxError:
                ok = False
            if ok:
                seen.add(mutated)
                out.append(Mutant(chapter, cell, _owner(node, parents), operator, node.lineno,
                                  before if before is not None else src.text[start:end], candidate, mutated, text))
                return

    def substituted(node: ast.AST, new: ast.AST | list) -> ast.AST:
        """The reference tree with ``node`` replaced by ``new`` (a node, or statements for a statement)."""
        holder = parents[node]
        for fname, value in ast.iter_fields(holder):
            if value is node:
                setattr(holder, fname, new)
                try:
                    return copy.deepcopy(tree)
                finally:
                    setattr(holder, fname, node)
            if isinstance(value, list) and any(v is node for v in value):
                i = next(k for k, v in enumerate(value) if v is node)
                replacement = new if isinstance(new, list) else [new]
                setattr(holder, fname, value[:i] + replacement + value[i + 1:])
                try:
                    return copy.deepcopy(tree)
                finally:
                    setattr(holder, fname, value)
        raise AssertionError("node not found in its parent")

    for node in ast.walk(tree):
        if node is tree or node in guarded or not hasattr(node, "lineno") or not _in_solution(node, regions):
            continue
        if any(node is d or node in set(ast.walk(d)) for d in skip):
            continue
        # statements
        if isinstance(node, ast.stmt):
            if isinstance(node, ast.With) and any(isinstance(i.context_expr, ast.Call)
                                                  and _call_name(i.context_expr) == "no_grad" for i in node.items):
                header_start = src.offset(node.lineno, node.col_offset)
                header_end = src.starts[node.body[0].lineno - 1]
                header = src.text[header_start:header_end]
                expected = substituted(node, ast.If(ast.Constant(True), node.body, []))
                emit("drop", node, "if True:\n", expected, header_start, header_end, before=header.rstrip("\n"))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for k, dec in enumerate(node.decorator_list):
                    if isinstance(dec, ast.Call) and _call_name(dec) == "no_grad":
                        start = src.starts[dec.lineno - 1]
                        end = src.starts[dec.end_lineno]
                        changed = copy.copy(node)
                        changed.decorator_list = node.decorator_list[:k] + node.decorator_list[k + 1:]
                        emit("drop", node, "", substituted(node, changed), start, end,
                             before=src.text[start:end].rstrip("\n"))
            deletable = isinstance(node, ast.AugAssign) or _bound_before(node, parents) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Call))
            if deletable:
                start, end = src.span(node)
                emit("delete", node, "pass", substituted(node, ast.Pass()), start, end)
            continue
        if not isinstance(node, ast.expr) and not isinstance(node, ast.Slice):
            continue
        if isinstance(parents.get(node), ast.JoinedStr) or isinstance(parents.get(node), ast.FormattedValue):
            continue
        for operator, new in _expression_mutations(node, parents.get(node)):
            start, end = src.span(node)
            emit(operator, node, ast.unparse(new), substituted(node, new), start, end)
    assert ast.dump(tree) == reference_dump, "the reference tree was changed while mutating"
    out.sort(key=lambda m: (m.line, OPERATORS.index(m.operator.split("-")[0]) if m.operator.split("-")[0] in
                            OPERATORS else 99, m.source))
    return out


def generate(course: Course, chapter: str) -> list[Mutant]:
    """Every mutant of every solution cell of ``chapter``, in notebook order."""
    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    return [m for c in source.cells if is_solution(c) for m in mutate_source(c.source, chapter, grade_id(c))]


# -- equivalents ---------------------------------------------------------------------------------------------

# Mutants proven equivalent, by id: ``{mutant id: reason}``. Each reason is an argument that no output the
# docstring allows can differ, and tests/test_mutants.py checks it: the mutant and the reference give identical
# outputs (bit for bit) on a wide set of inputs with every edge case the docstring allows. An id names the
# cell's code, so an entry lapses (and its mutant is graded again) when the cell changes.
EQUIVALENT: dict[str, str] = {
    "masked_softmax:44:constant:d14a9f54ad":
        "the divisor is max(total, 1) either way: a row with a key to attend holds exp(0) = 1 for its largest "
        "score, so its total is 0 (empty row) or at least 1, and where it is exactly 1 both divide by 1",
    "self_attention_loops:38:swap:bb56c20876":
        "q . k summed as k . q: floating-point multiplication is commutative and the order of the sum is kept, "
        "so every score is bit-identical",
    "self_attention_module:31:delete:9461fb0ef9":
        "masked_fill broadcasts the mask itself: for every mask the docstring allows (bool, broadcastable to "
        "(..., T, T)) the weights and outputs are identical; only a mask that does not broadcast fails "
        "differently (a RuntimeError instead of the ValueError), which the docstring does not promise",
    # Chapter 9: loop bounds and tile conditions that only add empty blocks, fully masked tiles, or masks with
    # nothing to hide (tests/test_mutants.py probes every shape relation the docstrings allow).
    "online_softmax:35:bounds:5917beb1fe":
        "the second pass's range(0, N + 1, b) adds a start at N only when b divides N: it writes an empty slice, "
        "a no-op",
    "tiled_attention:30:bounds:490f6daab0":
        "range(0, Tq + 1, b) adds a query block at Tq only when b divides Tq: zero rows, written to an empty "
        "slice of the output and logsumexp, a no-op",
    "tiled_attention:37:arith:eecc28a0e0":
        "breaking at k0 > q1 + 1 instead of k0 > q1 - 1 visits up to two more tiles, whose keys all come after "
        "every query of the block: fully masked, they add exp(-inf) = 0 to the sum and the output and rescale "
        "by exp(0) = 1 (key 0 was seen first, so every row's max is finite): the same bits",
    "tiled_attention:37:constant:c2796b0597":
        "breaking at k0 > q1 instead of k0 > q1 - 1 visits one more tile, whose keys all come after every query "
        "of the block: fully masked, it adds 0 and rescales by 1 (every row's max is already finite)",
    "tiled_attention:41:arith:06169c1c54":
        "the causal mask is also applied to tiles just below the diagonal, where no key comes after its query: "
        "masked_fill with nothing to fill, a no-op",
    "tiled_attention:41:compare:6f74186cb1":
        "the causal mask is also applied to a tile whose last key is the block's first query: no key comes "
        "after its query there, so masked_fill fills nothing",
    "tiled_attention:41:constant:9029eadc32":
        "the causal mask is also applied to a tile whose last key is the block's first query: no key comes "
        "after its query there, so masked_fill fills nothing",
    "flash_attention:29:bounds:d1e14503e0":
        "the backward pass's range(0, Tq + 1, b) adds a query block at Tq only when b divides Tq: zero rows, "
        "whose contributions to dK and dV are sums over no query (exact zeros) and to dQ an empty slice",
    "flash_attention:32:bounds:b1d5e4b138":
        "the backward pass's range(0, Tk + 1, b) adds a key block at Tk only when b divides Tk: zero keys, whose "
        "contribution to dQ is a sum over no key (exact zeros) and to dK and dV an empty slice",
    "flash_attention:33:arith:2b97ea97ad":
        "the backward pass visits up to two more tiles whose keys all come after every query of the block: "
        "fully masked, their weights exp(-inf - L) are 0, so they add exact zeros to dQ, dK and dV",
    "flash_attention:33:constant:af1d367486":
        "the backward pass visits one more tile whose keys all come after every query of the block: fully "
        "masked, its weights are 0, so it adds exact zeros to dQ, dK and dV",
    "flash_attention:38:arith:17ef8b969d":
        "the rebuilt tiles just below the diagonal are masked too, where no key comes after its query: "
        "masked_fill with nothing to fill, a no-op",
    "flash_attention:38:compare:6336c8ca39":
        "a rebuilt tile whose last key is the block's first query is masked too: no key comes after its query "
        "there, so masked_fill fills nothing",
    "flash_attention:38:constant:6a7fd58863":
        "a rebuilt tile whose last key is the block's first query is masked too: no key comes after its query "
        "there, so masked_fill fills nothing",
    "kv_cache:51:compare:9133bbc25e":
        "the causal mask is also built for a single new position (t = 1), whose query sits at the last "
        "position: no key comes after it, so masked_fill fills nothing",
    "kv_cache:51:constant:fc2593e602":
        "the causal mask is also built for a single new position (t = 1), whose query sits at the last "
        "position: no key comes after it, so masked_fill fills nothing",
    "generate:23:bounds:05076ac92c":
        "range(num_new_tokens + 1) never reaches its extra step: the loop breaks after appending the last "
        "token, at step num_new_tokens - 1",
    # Chapter 8: depends_on_future's random projection, its loop over the last position and its copy of x; the
    # progress bar's label of train_transformer (tests/test_mutants.py probes them).
    "depends_on_future:13:drop:dfd648d0ff":
        "x copied without detach: for an x that does not require grad detach changes nothing, and for one that "
        "does the clone still requires grad and the gradients are taken with respect to that clone, so the same "
        "entries are nonzero; x itself is not changed either way",
    "depends_on_future:19:constant:98efdd69f6":
        "another seed for the random projection: the exercise allows any fixed random numbers, and with any of "
        "them a cancellation to exactly zero has probability zero, so the same bool comes back",
    "depends_on_future:20:bounds:26667dcdd0":
        "the loop also visits the last output position, which has no later input row: its slice of the "
        "gradient (rows after T - 1) is empty and can find nothing",
    "depends_on_future:20:constant:662221aed7":
        "range(T - 0): the loop also visits the last output position, whose slice of later gradient rows is "
        "empty and can find nothing",
    "depends_on_future:21:arith:8c0b0f6cc0":
        "each output row divided by the random numbers instead of multiplied: 1/probe is as random and as "
        "nonzero as probe, so exactly the same gradient entries are zero",
    "train_transformer:26:delete:aef4b1d6b7":
        "only the progress bar's label: nothing returned or stored depends on it",
    # Chapter 10: the end of lr_at's schedule, and sample's renormalisation, which torch.multinomial does itself
    # (tests/test_mutants.py probes them).
    "lr_at:10:compare:18feb509da":
        "step >= total_steps instead of step > total_steps: at step == total_steps the cosine already returns "
        "min_lr exactly (progress 1.0, math.cos(math.pi) == -1.0, min_lr + 0.5 * (max_lr - min_lr) * 0.0); the two "
        "differ only when total_steps == warmup_steps, where the docstring's cosine would start at max_lr and end at "
        "min_lr on the same step, a schedule it does not define",
    "lr_at:12:dim:f41ce81180":
        "max(total_steps - warmup_steps, 0) instead of 1: the division is reached only with warmup_steps <= step "
        "<= total_steps, so on every schedule the docstring defines (total_steps > warmup_steps) the divisor is at "
        "least 1 either way",
    "sample:24:arith:52edfa1800":
        "the nucleus's weights multiplied by their row's sum instead of divided: one positive factor per row, and "
        "torch.multinomial draws from weights / weights.sum() whatever their scale (the probe's seeded draws are "
        "identical)",
    "sample:24:delete:2d01aac641":
        "the renormalisation left out: torch.multinomial takes weights that do not sum to 1 and normalises them "
        "itself (the probe's seeded draws are identical)",
}

DEVICE_REASON = ("moves data between devices only: the engine grades on the CPU, where every tensor is on the one "
                 "device, so no output can differ (tests/test_devices.py audits the reference's devices on meta)")


def classified(mutants: list[Mutant], graded: dict[str, dict]) -> dict[str, dict]:
    """The engine's verdicts with the documented equivalents laid over them: an equivalent is never counted
    as a survivor (nor as killed: a documented equivalent the engine kills is a wrong proof, and says so)."""
    out = {}
    for m in mutants:
        reason = equivalent_reason(m)
        if reason is None:
            out[m.id] = graded[m.id]
        elif graded.get(m.id, {}).get("status") == "killed":
            raise ValueError(f"mutant {m.id} is documented as equivalent but loses points: {reason}")
        else:
            out[m.id] = {"status": "equivalent", "reason": reason}
    return out


def equivalent_reason(m: Mutant) -> str | None:
    if m.operator == "drop-device":
        return DEVICE_REASON
    return EQUIVALENT.get(m.id)


def namespace(course: Course, chapter: str, replace_cells: dict[str, str] | None = None) -> dict:
    """A fresh namespace holding the chapter's setup (its first code cell) and every solution cell, in order,
    with ``replace_cells`` ({grade_id: source}) in place of the reference's: for proving equivalents outside
    the sandbox (this is the course's own code, never a learner's)."""
    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    code = [c for c in source.cells if c.cell_type == "code"]
    ns: dict = {"__name__": f"mutants_{chapter}"}
    exec(compile(code[0].source, f"{chapter}:setup", "exec"), ns)  # noqa: S102 - the course's own setup cell
    for c in code:
        if is_solution(c):
            text = (replace_cells or {}).get(grade_id(c), c.source)
            exec(compile(text, f"{chapter}:{grade_id(c)}", "exec"), ns)  # noqa: S102 - reference or its mutant
    return ns


# -- grading -------------------------------------------------------------------------------------------------


def exercise_tests(source: nbformat.NotebookNode) -> dict[str, list[str]]:
    """{solution cell: the graded test cells after it, up to the next solution cell} (a mutant's own cells)."""
    tests, current = {}, None
    for cell in source.cells:
        if is_solution(cell):
            current = grade_id(cell)
            tests[current] = []
        elif is_graded_test(cell) and current is not None:
            tests[current].append(grade_id(cell))
    return tests


def _reach(course: Course, chapter: str) -> dict[str, set[str]]:
    """autograder/cell_reach.py's table (one owner of the reach analysis)."""
    from .cell_reach import reach

    return reach(course, chapter)


def pack(mutants: list[Mutant], own: dict[str, list[str]], reach: dict[str, set[str]]) -> list[list[Mutant]]:
    """Mutants in as few notebooks as keep them apart: at most one per solution cell in a notebook, and two
    cells share one only when neither's exercise tests can reach the other's code."""
    def touches(a: str, b: str) -> bool:
        return any(a in reach.get(t, set()) for t in own.get(b, []))

    queues: dict[str, list[Mutant]] = {}
    for m in mutants:
        queues.setdefault(m.cell, []).append(m)
    bins: list[list[Mutant]] = []
    # Each bin takes the next mutant of every cell compatible with those already in it (longest queues first).
    while any(queues.values()):
        bin_: list[Mutant] = []
        for cell in sorted(queues, key=lambda c: -len(queues[c])):
            if queues[cell] and all(o.cell != cell and not touches(o.cell, cell) and not touches(cell, o.cell)
                                    for o in bin_):
                bin_.append(queues[cell].pop(0))
        bins.append(bin_)
    return bins


def submission(course: Course, chapter: str, bin_: list[Mutant], own: dict[str, list[str]],
               reach: dict[str, set[str]], solution_cells: list[str]) -> nbformat.NotebookNode:
    """The reference with each mutant's cell replaced and every cell no judged test reaches idled."""
    from . import idling, submissions

    idle = idling.unreached(reach, solution_cells, judged=[t for m in bin_ for t in own[m.cell]],
                            kept=[m.cell for m in bin_])
    nb = submissions.reference(course, chapter)
    by_cell = {m.cell: m for m in bin_}
    for cell in nb.cells:
        if is_solution(cell) and grade_id(cell) in by_cell:
            cell.source = by_cell[grade_id(cell)].source
    return idling.idle(nb, idle, carrying=by_cell, what="mutant")


def verdict(result: dict, cells: list[str]) -> str:
    """killed, survived, or retry (the notebook as a whole scored zero: a notebook timeout or a dead kernel,
    which may be any of its mutants' doing). A grader failure is never a verdict: it raises."""
    from .isolation import GraderError

    if result.get("status") == "failed":
        raise GraderError(f"the grader failed on a mutant notebook: {result.get('reason')}")
    if result.get("status") != "graded":
        return "retry"
    got = result["cells"]
    return "killed" if any(got[c]["score"] < got[c]["max_score"] for c in cells) else "survived"


def grade_mutants(course: Course, chapter: str, mutants: list[Mutant], engine, log=print) -> dict[str, dict]:
    """{mutant id: {"status": killed|survived, "cells": {cell: score}}} for ``mutants`` of one chapter, graded
    by ``engine`` (an :class:`autograder.isolation.Engine` on ``course``); equivalence is not its business
    (:func:`classified`)."""
    from . import submissions
    from .isolation import GraderError

    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    own = exercise_tests(source)
    reach = _reach(course, chapter)
    solution_cells = [grade_id(c) for c in source.cells if is_solution(c)]
    out: dict[str, dict] = {}
    bins = pack(mutants, own, reach)
    started = time.monotonic()
    retry: list[Mutant] = []

    def run(bin_: list[Mutant], tag: str) -> dict:
        nb = submission(course, chapter, bin_, own, reach, solution_cells)
        path = submissions.write_submission(course, f"mutants-{tag}", chapter, nb)
        # a mutant is judged on its exercise's own cells only: the engine runs just those (and what they read)
        return engine.grade(chapter, path, f"mutants-{tag}", judge=frozenset(c for m in bin_ for c in own[m.cell]))

    # The control: the reference itself, laid out like the fullest notebook (the same cells idled), must keep
    # every point its judged cells carry; otherwise a "killed" would only measure a broken layout.
    if bins:
        control = [replace(m, source=m.reference) for m in max(bins, key=len)]
        result = run(control, "control")
        lost = [c for m in control for c in own[m.cell] if verdict(result, [c]) != "survived"]
        if lost:
            raise GraderError(f"the reference loses points in {lost} when laid out for mutants: "
                              f"{result.get('reason') or [result['cells'][c]['messages'][:1] for c in lost]}")
    for i, bin_ in enumerate(bins):
        result = run(bin_, str(i))
        for m in bin_:
            v = verdict(result, own[m.cell])
            if v == "retry":
                retry.append(m)
            else:
                out[m.id] = {"status": v, "cells": {c: result["cells"][c]["score"] for c in own[m.cell]}}
        log(f"  {chapter}: notebook {i + 1}/{len(bins)} ({len(bin_)} mutants) {result.get('seconds', 0):.1f} s"
            + (f" [{result.get('reason', '')[:60]}]" if result.get("status") != "graded" else ""))
    for m in retry:  # alone: a notebook timeout or a dead kernel is this mutant's doing
        result = run([m], "alone")
        out[m.id] = {"status": "survived" if verdict(result, own[m.cell]) == "survived" else "killed",
                     "reason": str(result.get("reason", ""))[:200]}
    log(f"  {chapter}: {len(mutants)} mutants in {len(bins)} notebooks, {time.monotonic() - started:.0f} s")
    return out


# -- the report ----------------------------------------------------------------------------------------------


def tally(mutants: list[Mutant], verdicts: dict[str, dict]) -> dict[tuple[str, str], dict]:
    """{(cell, function): {mutants, killed, survived, equivalent}}."""
    rows: dict[tuple[str, str], dict] = {}
    for m in mutants:
        row = rows.setdefault((m.cell, m.function), {"mutants": 0, "killed": 0, "survived": 0, "equivalent": 0})
        row["mutants"] += 1
        row[verdicts[m.id]["status"]] += 1
    return rows


def score(row: dict) -> float | None:
    """killed / (total - equivalent); None when every mutant is equivalent."""
    judged = row["mutants"] - row["equivalent"]
    return row["killed"] / judged if judged else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def report(chapter: str, mutants: list[Mutant], verdicts: dict[str, dict], diffs: bool = True) -> str:
    rows = tally(mutants, verdicts)
    total = {k: sum(r[k] for r in rows.values()) for k in ("mutants", "killed", "survived", "equivalent")}
    lines = [f"## {chapter}: score {_pct(score(total))} ({total['killed']} killed, {total['survived']} survived, "
             f"{total['equivalent']} equivalent of {total['mutants']})", "",
             "| cell | function | mutants | killed | survived | equivalent | score |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for (cell, fn), r in rows.items():
        lines.append(f"| {cell} | {fn} | {r['mutants']} | {r['killed']} | {r['survived']} | {r['equivalent']} | "
                     f"{_pct(score(r))} |")
    survivors = [m for m in mutants if verdicts[m.id]["status"] == "survived"]
    if survivors and diffs:
        lines += ["", f"Survivors of {chapter}:", ""]
        for m in survivors:
            lines += [f"- `{m.id}` ({m.function}, {m.operator})", "", "```diff", m.diff().rstrip("\n"), "```", ""]
    equivalents = [m for m in mutants if verdicts[m.id]["status"] == "equivalent" and m.operator != "drop-device"]
    if equivalents and diffs:
        lines += ["", f"Equivalent mutants of {chapter}:", ""]
        for m in equivalents:
            lines += [f"- `{m.id}` ({m.function}): {verdicts[m.id]['reason']}", "", "```diff",
                      m.diff().rstrip("\n"), "```", ""]
    return "\n".join(lines)


def _cache_path(course: Course, chapter: str) -> Path:
    return course.grading / "mutants" / f"{chapter}.json"


def tests_digest(course: Course, chapter: str) -> str:
    """A digest of the chapter's graded test cells: cached verdicts hold only while the tests do."""
    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    h = hashlib.sha256()
    for c in source.cells:
        if is_graded_test(c):
            h.update(c.source.encode() + b"\0")
    return h.hexdigest()[:16]


def load_cache(course: Course, chapter: str) -> dict[str, dict]:
    """The cached verdicts of ``chapter``'s mutants, or {} when its tests changed since."""
    path = _cache_path(course, chapter)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data.get("verdicts", {}) if data.get("tests") == tests_digest(course, chapter) else {}


def save_cache(course: Course, chapter: str, verdicts: dict[str, dict]) -> None:
    path = _cache_path(course, chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"tests": tests_digest(course, chapter), "verdicts": verdicts}, indent=1,
                               sort_keys=True))


def sample(mutants: list[Mutant], per_chapter: int, seed: int) -> list[Mutant]:
    """A fixed, seeded sample of a chapter's graded (non-device) mutants, in their order."""
    pool = [m for m in mutants if m.operator != "drop-device"]
    picked = set(random.Random(seed).sample(range(len(pool)), min(per_chapter, len(pool))))
    return [m for i, m in enumerate(pool) if i in picked]


def main(argv: list[str]) -> int:
    from .isolation import Engine, Limits

    parser = argparse.ArgumentParser(prog="python -m autograder mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapters (default: all)")
    parser.add_argument("--fresh", action="store_true", help="grade again even mutants already in the cache")
    parser.add_argument("--list", action="store_true", help="only list the mutants (no grading)")
    parser.add_argument("--out", type=Path, help="also write the report (Markdown) to this file")
    parser.add_argument("--no-diffs", action="store_true", help="leave the survivors' diffs out of the report")
    parser.add_argument("--cell-timeout", type=float, default=60, help="seconds per cell (default 60)")
    args = parser.parse_args(argv)
    course = Course()
    chapters = args.chapters or course.chapters()
    unknown = [c for c in chapters if c not in course.chapters()]
    if unknown:
        parser.error(f"unknown chapters: {', '.join(unknown)}")
    if args.list:
        for ch in chapters:
            for m in generate(course, ch):
                print(f"{m.id}\t{m.function}\t{m.before!r} -> {m.after!r}")
        return 0
    parts, totals = [], []
    limits = Limits(cell_timeout_s=args.cell_timeout, notebook_timeout_s=600, memory_mb=2048)
    with Engine(course.root, limits) as engine:
        missing = engine.missing_capabilities()
        if missing:
            print(f"isolated grading is not available here: missing {', '.join(missing)}", file=sys.stderr)
            return 2
        for ch in chapters:  # one chapter at a time: one warm engine, one kernel at a time
            mutants = generate(course, ch)
            cached = {} if args.fresh else load_cache(course, ch)
            verdicts = {m.id: cached[m.id] for m in mutants if m.id in cached}
            todo = [m for m in mutants if m.id not in verdicts and not equivalent_reason(m)]
            print(f"{ch}: {len(mutants)} mutants, {len(todo)} to grade", file=sys.stderr)
            if todo:
                verdicts.update(grade_mutants(course, ch, todo, engine, log=lambda s: print(s, file=sys.stderr)))
                save_cache(course, ch, {m.id: verdicts[m.id] for m in mutants if m.id in verdicts})
            verdicts = classified(mutants, verdicts)
            parts.append(report(ch, mutants, verdicts, diffs=not args.no_diffs))
            totals.append((ch, {k: sum(r[k] for r in tally(mutants, verdicts).values())
                                for k in ("mutants", "killed", "survived", "equivalent")}))
    summary = ["| chapter | mutants | killed | survived | equivalent | score |", "|---|---:|---:|---:|---:|---:|"]
    summary += [f"| {ch} | {t['mutants']} | {t['killed']} | {t['survived']} | {t['equivalent']} | {_pct(score(t))} |"
                for ch, t in totals]
    text = "\n".join(summary) + "\n\n" + "\n\n".join(parts) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0
