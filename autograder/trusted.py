"""The trusted half of grading: what a test cell may compute in the learner's process, and the decision.

Why test cells are rewritten
----------------------------
A graded test cell runs in the same Python process as the learner's code, so anything it passes to a
function can be seen and changed by that code. If a cell evaluated ``check.close("x", got, want)`` as
written, a learner who patched the check library (or anything it calls) could record ``want`` in place of
``got`` and pass without a correct answer. So before a test cell runs in the sandbox it is rewritten
(:func:`rewrite_test_cell`):

- every ``check.<kind>(...)`` call on a name bound to ``Checks(...)`` becomes a call to the kernel's
  recorder with only the check id and the learner's value (``__ac_record__(site, kind, id, got)``), or for
  ``raises`` the function and its arguments (``__ac_raises__(site, id, fn, *args, **kwargs)``);
- expected values (``want``), shapes, tolerances, hints and dims are *not evaluated* in the learner's
  process: the decision takes them from a clean run of the reference solution;
- an assignment whose names are only used by what was dropped (``expected = torch.tensor(...)`` feeding a
  ``want``) is dropped too, so hidden expected values never exist in the learner's process.

Where an expected value depends on the run itself (the learner's own outputs, e.g. "the stored weights
equal the returned weights", the global RNG, or a module's own parameters, which the learner's code
initialises as it likes), the reference cannot provide it; such *self-consistency sites* are found by
running the reference twice with different seeds and once with its modules re-initialised
(:mod:`autograder.isolation`, :mod:`autograder.reinitialise`) and keep their ``want`` in the kernel. The reference is then graded like a learner's notebook; a cell the
rewrite would break (an expected value whose computation also advanced a generator the next check needs)
falls back to a *conservative* rewrite that keeps that cell's expected values in the kernel.

What a learner's process can and cannot do
-------------------------------------------
(The whole trust model, with its limits, is in ``autograder/TRUST.md``.) Everything the kernel reports
(outputs, records, even the final result frame) comes from a process the learner controls, so the decision
trusts only the *values* recorded, never a verdict, kind, parameter or expected value, and those values only
as far as :func:`attention_course.encoding.validate` can prove them: a tensor's dtype and shape must be what
its bytes are. Patching numpy/torch/builtins or ``torch.Tensor.dtype``, rigged ``__eq__``, tensor subclasses
(rejected by exact type), edits to ``sys.modules`` or the check library, fake records and forged results
therefore cannot turn a wrong value into points: a check with a reproducible expected value (``close``,
``equals``, ``matches_reference``) passes only if the recorded value *is* right, and the right value never
exists in the learner's process unless the learner's code computed it. Yes/no questions written
``check.true(id, f(x) is False)`` (or ``== literal``) are rewritten to ``equals`` (:func:`_as_equals`), so their
answer is not in the kernel either. Limits, stated plainly: a learner who tampers with the recorder can pass
self-consistency checks and property checks (shape, sums_to_one, finite, raises, and ``true`` on any other
condition) by fabricating a value with the property, and can pass a visible check by reproducing the value
the visible test shows, exactly as hardcoding it in the function would. Hidden checks against reference
values are what prove an answer right.

The trusted decision
--------------------
For each graded test cell: the check keys the reference produced for that cell (``"<cell>/<check>"``),
each with the reference's kind and parameters. The cell passes iff it ran without error and every one of
those keys was recorded exactly once by that cell and the kind's verdict (:func:`attention_course.kinds.decide`
on the learner's value, the reference's parameters and the reference's value) passes. Records are read only
from that cell's own outputs and only for that cell's grade_id. Records with the same key: the recorder
records each key once, so a second record means the notebook emitted a fake one, printed before the check
ran or after it; neither the first nor the last is trusted and the check fails ("recorded 2 times"). A
missing key fails ("did not run"). Nothing is taken from the learner's record but the value, and that only
after :func:`attention_course.encoding.validate`.

Feedback carries trusted text only: the grader's own sentences, the verdicts' symptom texts (with the
authors' hints), Python's own exception names, and reasons and flags that describe the submitted file;
never text the learner's process produced (an exception message, something printed, a class name), however
it is encoded. Messages are prefixed by the check id in visible cells and by "hidden check N" in hidden
ones, where sizes, shapes and ratios are redacted (:func:`redact_hidden`). :class:`LeakFilter` remains as a
second line. The executed notebook, like nbgrader's autograded notebook, holds the hidden tests and
everything the kernel printed: it is for instructors only.
"""
from __future__ import annotations

import ast
import functools
import html
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from attention_course.encoding import PYTHON_NAMES, decode, validate
from attention_course.kinds import REGISTRY, decide
from attention_course.language import ENGLISH, LANGUAGES, N_, chosen
from attention_course.selfcheck import exercise_name
from attention_course.verdicts import HIDDEN_EXCEPTION_NAMES

from .class_language import page_language, tr, translations

if TYPE_CHECKING:
    from .results import GradingResult

HIDDEN_BEGIN = "BEGIN HIDDEN TESTS"


class TestCellNotSupported(Exception):
    """A graded test cell uses the check library in a way the rewriter cannot make safe."""


def _signature(kind: str) -> list[str]:
    return ["check_id", *REGISTRY[kind].args]


def _reserved(kind: str) -> set[str]:
    """Keyword arguments of a call-kind check that belong to the check, not to the function it calls."""
    spec = REGISTRY[kind]
    return {*spec.options, *spec.shown}


def _is_checks_ctor(node) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "Checks") or (isinstance(f, ast.Attribute) and f.attr == "Checks")


def _check_names(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_checks_ctor(node.value):
            for t in node.targets:
                if not isinstance(t, ast.Name):
                    raise TestCellNotSupported("Checks(...) must be assigned to a plain name")
                names.add(t.id)
    return names


def _is_check_call(node, names) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in REGISTRY
            and isinstance(node.func.value, ast.Name) and node.func.value.id in names)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def _check_calls(tree, names) -> list[ast.Call]:
    calls = [n for n in ast.walk(tree) if _is_check_call(n, names)]
    for scope in (n for n in ast.walk(tree) if isinstance(n, _SCOPES)):
        if any(_is_check_call(n, names) for n in ast.walk(scope)):
            # the kernel's recorder accepts calls from the cell's top-level code only (see the sandbox)
            raise TestCellNotSupported("a check call inside a function, lambda, class or comprehension")
    for call in calls:
        for arg in [*call.args, *[k.value for k in call.keywords]]:
            if any(_is_check_call(n, names) for n in ast.walk(arg)):
                raise TestCellNotSupported("a check call inside another check call")
    return sorted(calls, key=lambda n: (n.lineno, n.col_offset))


def _record_call(call: ast.Call, site: int, keep_want: set[int]) -> ast.Call:
    """``check.kind(id, value, want, ...)`` -> ``__ac_record__(site, kind, id, value[, want])``."""
    kind = call.func.attr
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise TestCellNotSupported(f"check.{kind}(...) with *args or **kwargs")
    spec = REGISTRY[kind]
    sig = _signature(kind)
    bound: dict[str, ast.expr] = {}
    extra_args, extra_kw = [], []
    for i, a in enumerate(call.args):
        if i < len(sig):
            bound[sig[i]] = a
        elif spec.calls:
            extra_args.append(a)
        else:
            raise TestCellNotSupported(f"too many arguments to check.{kind}")
    for k in call.keywords:
        if k.arg in sig:
            bound[k.arg] = k.value
        elif spec.calls and k.arg not in _reserved(kind):
            extra_kw.append(k)
    if "check_id" not in bound or len(sig) < 2 or sig[1] not in bound:
        raise TestCellNotSupported(f"check.{kind}(...) without a check id and a value")
    if spec.calls:
        return ast.Call(func=ast.Name("__ac_raises__", ast.Load()),
                        args=[ast.Constant(site), bound["check_id"], bound[sig[1]], *extra_args], keywords=extra_kw)
    args = [ast.Constant(site), ast.Constant(kind), bound["check_id"], bound[sig[1]]]
    if spec.expected and site in keep_want:
        if spec.expected not in bound:
            raise TestCellNotSupported(f"check.{kind}(...) without {spec.expected}")
        args.append(bound[spec.expected])
    return ast.Call(func=ast.Name("__ac_record__", ast.Load()), args=args, keywords=[])


class _Replace(ast.NodeTransformer):
    def __init__(self, table: dict[int, ast.AST]):
        self.table = table

    def visit(self, node):
        if id(node) in self.table:
            return self.table[id(node)]
        return super().visit(node)


def _loaded_names(tree) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


_RNG_NAMES = {"manual_seed", "seed", "Generator", "rand", "randn", "randint", "randperm", "rand_like",
              "randn_like", "randint_like", "normal", "normal_", "uniform_", "bernoulli", "multinomial", "poisson",
              "random", "random_", "shuffle", "choice", "permutation", "dropout", "exponential_", "geometric_",
              "cauchy_", "log_normal_", "sample", "rsample"}


def _uses_generator(node) -> bool:
    """Evaluating this might draw random numbers (so not evaluating it would change later inputs)."""
    for n in ast.walk(node):
        if isinstance(n, ast.keyword) and n.arg == "generator":
            return True
        if isinstance(n, ast.Attribute) and n.attr in _RNG_NAMES:
            return True
        if isinstance(n, ast.Name) and n.id in (_RNG_NAMES | {"__ac_record__", "__ac_raises__"}):
            return True
    return False


def _live_loads(tree, dropped: dict) -> set[str]:
    live = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Assign) and id(node) in dropped:
            continue  # neither its targets nor its value are live
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            live.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return live


def _dead_assignments(tree) -> list[ast.Assign]:
    """``name = expr`` statements whose names nothing in the (rewritten) cell reads, to a fixpoint."""
    dropped: dict[int, ast.Assign] = {}
    for _ in range(50):
        live = _live_loads(tree, dropped)
        changed = False
        for n in ast.walk(tree):
            if not isinstance(n, ast.Assign) or id(n) in dropped:
                continue
            targets: list[str] | None = []
            for t in n.targets:
                if isinstance(t, ast.Name):
                    targets.append(t.id)
                elif (isinstance(t, ast.Tuple) and len(n.targets) == 1
                      and all(isinstance(e, ast.Name) for e in t.elts)):
                    targets.extend(e.id for e in t.elts)
                else:
                    targets = None
                    break
            if targets and not (set(targets) & live) and not _uses_generator(n.value):
                dropped[id(n)] = n
                changed = True
        if not changed:
            break
    return list(dropped.values())


class _Splicer:
    """Replace source segments given by AST positions (UTF-8 byte columns), keeping every line where it was."""

    def __init__(self, source: str):
        self.lines = source.splitlines(keepends=True) or [""]
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.source = source
        self.edits: list[tuple[int, int, str]] = []

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def replace(self, node, text: str) -> None:
        start = self.offset(node.lineno, node.col_offset)
        end = self.offset(node.end_lineno, node.end_col_offset)
        extra = (node.end_lineno - node.lineno) - text.count("\n")
        if extra > 0:  # keep the line count: pad inside a pair of parentheses
            text = f"({text}{chr(10) * extra})"
        self.edits.append((start, end, text))

    def result(self) -> str:
        out, pos = [], 0
        for start, end, text in sorted(self.edits):
            if start < pos:
                raise TestCellNotSupported("overlapping rewrites")
            out.append(self.source[pos:start])
            out.append(text)
            pos = end
        out.append(self.source[pos:])
        return "".join(out)


def _as_equals(call: ast.Call) -> ast.Call | None:
    """``check.true(id, X is C)`` or ``check.true(id, X == C)`` with a literal ``C``, as ``check.equals(id, X, C)``.

    A yes/no question written as ``true(f(x) is False)`` would leave its expected answer in the kernel, where
    a function under test can read it off the calling line (or a tampered recorder can answer ``True`` to
    everything). As ``equals``, the kernel records only what ``f(x)`` returned and the trusted side compares
    it with the reference's ``C``. The same happens in the reference run, so both sides agree on the kind.
    """
    if call.func.attr != "true":
        return None
    by_name = {k.arg: k.value for k in call.keywords}
    check_id = call.args[0] if call.args else by_name.get("check_id")
    cond = call.args[1] if len(call.args) > 1 else by_name.get("condition")
    if (check_id is None or len(call.args) > 2 or not isinstance(cond, ast.Compare) or len(cond.ops) != 1
            or not isinstance(cond.ops[0], (ast.Is, ast.Eq)) or not isinstance(cond.comparators[0], ast.Constant)
            or type(cond.comparators[0].value) not in (bool, int, float, str, type(None))):
        return None
    keywords = [k for k in call.keywords if k.arg not in ("check_id", "condition")]
    return ast.Call(func=ast.Attribute(value=call.func.value, attr="equals", ctx=ast.Load()),
                    args=[check_id, cond.left, cond.comparators[0]], keywords=keywords)


def rewrite_test_cell(source: str, mode: str, keep_want: set[int] | frozenset = frozenset(),
                      conservative: bool = False) -> tuple[str, dict]:
    """The code a graded test cell runs in the sandbox, and its check sites ``{site: kind}``
    (:func:`_rewrite`, which says how; the caller gets its own dict)."""
    text, sites = _rewrite(source, mode, frozenset(keep_want), conservative)
    return text, dict(sites)


# A graded test cell's text is always the source's (autograder/structure.py restores it), so every notebook of a
# class rewrites the same cells: a warm engine rewrites each once. Rewriting was two thirds of the trusted side's
# time per notebook (0.33 s of chapter 9's 0.5 s). Keyed by the whole text, so an edited cell is a new entry.
@functools.lru_cache(maxsize=2048)
def _rewrite(source: str, mode: str, keep_want: frozenset, conservative: bool) -> tuple[str, tuple]:
    """The code a graded test cell runs in the sandbox, and its check sites ``((site, kind), ...)``.

    ``mode="profile"`` (the reference run) turns ``check.kind(...)`` into ``__ac_site__(site, check).kind(...)``
    so each record is tagged with its site, and keeps everything else. ``mode="grade"`` (a learner's run)
    keeps only check ids and learner values (plus ``want`` at the self-consistency sites in ``keep_want``)
    and replaces the value of every assignment that only fed what was dropped by ``None`` (or a tuple of
    them). Lines stay where
    they were, so tracebacks point at the learner's view of the cell. Raises :class:`TestCellNotSupported`
    for check-library use it cannot make safe. ``conservative`` keeps every ``want`` and every assignment
    (used only for a cell whose careful rewrite would not reproduce the reference's own verdicts).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TestCellNotSupported(f"test cell is not plain Python ({exc.msg})") from None
    names = _check_names(tree)
    calls = _check_calls(tree, names)
    canonical = {id(call): _as_equals(call) for call in calls}  # yes/no answers leave the kernel
    sites = {n: (canonical[id(call)] or call).func.attr for n, call in enumerate(calls, start=1)}
    splice = _Splicer(source)
    table: dict[int, ast.AST] = {}
    if conservative:  # every expected value stays (a cell the careful rewrite would change: see isolation)
        keep_want = {site for site, kind in sites.items() if REGISTRY[kind].expected}
    for site, call in enumerate(calls, start=1):
        equals = canonical[id(call)]
        if mode == "profile" and equals is not None:
            new = ast.Call(func=ast.Attribute(value=ast.Call(func=ast.Name("__ac_site__", ast.Load()),
                                                             args=[ast.Constant(site), call.func.value], keywords=[]),
                                              attr="equals", ctx=ast.Load()),
                           args=equals.args, keywords=equals.keywords)
            table[id(call)] = new
            splice.replace(call, ast.unparse(new))
        elif mode == "profile":
            func = ast.Attribute(value=ast.Call(func=ast.Name("__ac_site__", ast.Load()),
                                                args=[ast.Constant(site), call.func.value], keywords=[]),
                                 attr=call.func.attr, ctx=ast.Load())
            table[id(call.func)] = func
            splice.replace(call.func, ast.unparse(func))
        else:
            new = _record_call(equals or call, site, set(keep_want))
            table[id(call)] = new
            splice.replace(call, ast.unparse(new))
    rewritten = _Replace(table).visit(tree)
    if mode == "grade":
        leftovers = {n for n in _loaded_names(rewritten) if n in names}
        if leftovers:
            raise TestCellNotSupported(f"the Checks object {sorted(leftovers)[0]!r} is used other than by calling "
                                       "one of its checks")
        dead = [] if conservative else _dead_assignments(rewritten)
        nothing = {}
        for assign in dead:
            target = assign.targets[0]
            if isinstance(target, ast.Tuple):  # a, b = ... needs as many values
                nothing[id(assign.value)] = ast.Tuple([ast.Constant(None) for _ in target.elts], ast.Load())
            else:
                nothing[id(assign.value)] = ast.Constant(None)
            splice.replace(assign.value, ast.unparse(nothing[id(assign.value)]))
        rewritten = _Replace(nothing).visit(rewritten)
    ast.fix_missing_locations(rewritten)
    text = splice.result()
    try:
        same = ast.dump(ast.parse(text)) == ast.dump(rewritten)
    except SyntaxError:
        same = False
    if not same:  # the splice went wrong somewhere: fall back to regenerated code (lines may move)
        text = ast.unparse(rewritten)
    return (text if text.endswith("\n") else text + "\n"), tuple(sites.items())


def is_hidden(source: str) -> bool:
    return HIDDEN_BEGIN in source


# ---------------------------------------------------------------------------------------------------------
# the decision


_REDACTIONS = [
    (re.compile(r"\b(\d+) of (\d+) values are wrong"),
     lambda m: "all values are wrong" if m.group(1) == m.group(2) else "some values are wrong"),
    (re.compile(r"\bin \d+ of \d+ places"), lambda m: "in some places"),
    (re.compile(r"\bshape \((\d+(, ?\d+)*,?)?\)"), lambda m: "shape (...)"),
    (re.compile(r"\bsame factor \([^)]*\)"), lambda m: "same factor"),
]


def redact_hidden(message: str) -> str:
    """A hidden check's verdict without the sizes and ratios that would describe the hidden inputs."""
    for pattern, repl in _REDACTIONS:
        message = pattern.sub(repl, message)
    return message


def _decode_params(kind: str, params: dict) -> dict:
    out = dict(params)
    expected = REGISTRY[kind].expected
    if expected and expected in out:
        out[expected] = decode(validate(out[expected]))
    return out


def _name(text) -> str:
    """A learner-controlled name (of an exception or a type) as feedback may show it: Python's own names only.

    A learner can name a class anything, including text read from a hidden test while it ran; such names
    never reach a message.
    """
    text = str(text)
    return text if text in PYTHON_NAMES else "an exception of its own class"


class LeakFilter:
    """Withholds any message that quotes hidden test code (24 characters or more, whitespace ignored).

    Built from the hidden regions of the chapter's source notebook, minus the hint and describe strings,
    which are written to be shown. A last line of defence: messages are built from the grader's own words
    and sanitized names, but a learner's exception text in a visible cell is shown and could quote code the
    learner's process read from memory while a hidden test ran.
    """

    WINDOW = 24

    def __init__(self, hidden_sources: list[str]):
        self.windows: set[str] = set()
        for src in hidden_sources:
            region = src.split(HIDDEN_BEGIN, 1)[1] if HIDDEN_BEGIN in src else src
            for shown in _shown_strings(src):
                region = region.replace(shown, " ")
            text = " ".join(region.split())
            for i in range(max(0, len(text) - self.WINDOW + 1)):
                self.windows.add(text[i:i + self.WINDOW])

    def quotes_hidden(self, message: str) -> bool:
        text = " ".join(str(message).split())
        return any(text[i:i + self.WINDOW] in self.windows for i in range(max(0, len(text) - self.WINDOW + 1)))

    def clean(self, messages: list[str]) -> list[str]:
        withheld = tr("(message withheld: it quoted hidden test code)")
        return [(withheld if self.quotes_hidden(m) else m) for m in messages]


def _shown_strings(source: str) -> list[str]:
    """The hint/describe strings of a test cell (meant for learners), longest first."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("hint", "describe"):
            for n in ast.walk(node.value):
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value:
                    out.add(n.value)
    return sorted(out, key=len, reverse=True)


NOT_IMPLEMENTED = N_("not implemented yet: the function this test calls still raises NotImplementedError")


def not_implemented(messages) -> bool:
    """Whether a cell's messages say its function still raises NotImplementedError, in whichever language the
    class was graded in."""
    return any(m in messages for m in {NOT_IMPLEMENTED, *(translations(lang).get(NOT_IMPLEMENTED, NOT_IMPLEMENTED)
                                                           for lang in LANGUAGES)})


def decide_cell(spec: dict, records: list[dict], error: dict | None, grade_id: str,
                cell_timeout_s: float | None = None) -> tuple[bool, list[str]]:
    """Decide one graded test cell. ``spec`` is the cell's entry of the reference profile."""
    hidden = bool(spec.get("hidden"))
    counts: dict[str, int] = {}
    by_key: dict[str, dict] = {}
    for rec in records:
        if not isinstance(rec, dict) or rec.get("cell") != grade_id or not isinstance(rec.get("check"), str):
            continue
        key = f"{grade_id}/{rec['check']}"
        counts[key] = counts.get(key, 0) + 1
        by_key.setdefault(key, rec)
    failures: list[tuple[int, str, str]] = []  # (check number, check id, message)
    stopped = 0  # checks an error stopped before they ran
    for n, chk in enumerate(spec["checks"], start=1):
        key, kind = chk["key"], chk["kind"]
        label = chk["check"]
        count = counts.get(key, 0)
        if count == 0:
            if error is not None:  # said once below: one line per check buried the error that stopped them
                stopped += 1
            else:
                failures.append((n, label, tr("no result recorded by the test itself (the notebook replaced the "
                                              "grader's recorder?)")))
            continue
        if count > 1:  # how many times is the learner's to choose: not quoted (the feedback budget)
            failures.append((n, label, tr("recorded more than once; the notebook emitted a fake check record")))
            continue
        rec = by_key[key]
        try:
            got = decode(validate(rec.get("got")))
            params = _decode_params(kind, chk["params"])
            expected = REGISTRY[kind].expected
            if expected and chk["site"] in spec.get("keep_want_sites", []):
                if "want" not in rec:
                    failures.append((n, label, tr("the expected value was not recorded")))
                    continue
                params[expected] = decode(validate(rec["want"]))
            ref_got = decode(validate(chk["ref_got"])) if "ref_got" in chk else None
            reference = ref_got if REGISTRY[kind].needs_reference else None
            # The learner's value must have the form (type, dtype family, shape) of the reference's value for
            # the same check, except at a self-consistency site, whose expected value is the learner's own
            # (attention_course.verdicts, "The form rule").
            like = None if chk["site"] in spec.get("keep_want_sites", []) else ref_got
            verdict = decide(kind, got, params, reference, like)
        except Exception:  # noqa: BLE001 - a forged or broken record must not crash the grader
            failures.append((n, label, tr("the recorded value is unreadable")))  # no exception name: fixed text
            continue
        if not verdict.passed:  # a hidden check's message quotes nothing of the learner's value
            failures.append((n, label, redact_hidden(verdict.hidden_message) if hidden else verdict.message))
    messages = []
    if error is not None:
        ename = _name(error.get("ename", "Error"))
        if ename == "CellTimeout":
            messages.append(tr("the cell did not finish within {seconds} s and was interrupted",
                               seconds=f"{cell_timeout_s:g}") if cell_timeout_s else
                            tr("the cell did not finish in time and was interrupted"))
        elif ename == "NotImplementedError":  # a blank exercise: the learner's first thing to do, said plainly
            messages.append(tr(NOT_IMPLEMENTED))
        elif hidden:  # an exception name from a fixed list of 8 (the hidden feedback budget: verdicts.py)
            shown = ename if ename in HIDDEN_EXCEPTION_NAMES else tr("an error")
            messages.append(tr("the cell stopped with {error} while running the hidden tests", error=shown))
        else:  # the message is the learner's process's text: it stays in the learner's own notebook
            messages.append(tr("the cell stopped with {error} (run this test in your notebook to see its message)",
                               error=ename))
    if hidden:  # many hidden checks often fail the same way: say it once
        merged: dict[str, list[str]] = {}
        for n, _, msg in failures:
            merged.setdefault(msg, []).append(str(n))
        messages.extend(tr("hidden checks {numbers}: {problem}", numbers=", ".join(ns), problem=msg) if len(ns) > 1
                        else tr("hidden check {number}: {problem}", number=ns[0], problem=msg)
                        for msg, ns in merged.items())
    else:
        messages.extend(tr("{check}: {problem}", check=label, problem=msg) for _, label, msg in failures)
    if stopped:
        messages.append(tr("{count} checks did not run (the error stopped the cell)", count=stopped) if stopped > 1
                        else tr("1 check did not run (the error stopped the cell)"))
    passed = error is None and not failures
    return passed, messages


# ---------------------------------------------------------------------------------------------------------
# feedback


# Why a notebook was not graded normally, as feedback may say it: the grader's own sentences, with numbers and
# chapter names as the only variable parts (no reason quotes learner text: issue 41, class 7). A kernel whose
# Python the notebook broke is named with its exception (from a fixed list, sandbox/monitor.broke_python) for the
# instructor; feedback keeps the fixed part only.
# Each reason is (its pattern, the sentence feedback shows, in English: the pattern's named groups are its fields,
# so a translated sentence shows the same numbers and names).
_PUBLIC_REASONS = [(re.compile(p), s) for p, s in (
    (r"wrong file name: expected (?P<name>[\w.-]+\.ipynb)", N_("wrong file name: expected {name}")),
    (r"file not found", N_("file not found")), (r"empty file", N_("empty file")),
    (r"file too large \((?P<size>\d+) MB; the limit is (?P<limit>\d+) MB\)",
     N_("file too large ({size} MB; the limit is {limit} MB)")),
    (r"malformed JSON", N_("malformed JSON")),
    (r"malformed JSON \((?P<detail>[a-zA-Z0-9 -]+)\)", N_("malformed JSON ({detail})")),
    (r"not a notebook \((?P<detail>[a-z' _]+)\)", N_("not a notebook ({detail})")),
    (r"timeout: notebook exceeded (?P<seconds>[\d.]+) s", N_("timeout: notebook exceeded {seconds} s")),
    (r"kernel died \(out of memory: limit (?P<limit>\d+) MB\)", N_("kernel died (out of memory: limit {limit} MB)")),
    (r"process limit exceeded: the notebook tried to run more than (?P<count>\d+) processes or threads \(fork bomb\?\)",
     N_("process limit exceeded: the notebook tried to run more than {count} processes or threads (fork bomb?)")),
    (r"the notebook interfered with the grader's result channel",
     N_("the notebook interfered with the grader's result channel")),
    (r"kernel died \((?P<signal>segfault|SIG[A-Z0-9]+|signal \d+)\)", N_("kernel died ({signal})")),
    (r"kernel died \(exited with status (?P<status>-?\d+) before the notebook finished\)",
     N_("kernel died (exited with status {status} before the notebook finished)")),
)]
_BROKE_PYTHON = "kernel died (the notebook broke the Python it runs in"

# The flags of the structure repair and the intake that a feedback page shows in the class's language, as
# (pattern, sentence) like the reasons above; a flag of another kind is shown as it was written. Only grade_ids of
# the course's own cells fill them (the repair names no id of the learner's: autograder/structure.py).
_FLAGS = [(re.compile(p), s) for p, s in (
    (r"duplicated grade_id (?P<test>\S+): the extra copy runs as an ordinary cell",
     N_("duplicated grade_id {test}: the extra copy runs as an ordinary cell")),
    (r"duplicated grade_id (?P<test>\S+): extra copy removed", N_("duplicated grade_id {test}: extra copy removed")),
    (r"a cell with a grade_id the chapter does not have: its nbgrader metadata was removed",
     N_("a cell with a grade_id the chapter does not have: its nbgrader metadata was removed")),
    (r"solution cell (?P<test>\S+) was changed from (?P<was>\w+) to (?P<now>\w+); it runs as (?P<runs>\w+)",
     N_("solution cell {test} was changed from {was} to {now}; it runs as {runs}")),
    (r"deleted solution cell (?P<test>\S+) \(not restored: write your answer in it\)",
     N_("deleted solution cell {test} (not restored: write your answer in it)")),
    (r"deleted test cell (?P<test>\S+) restored", N_("deleted test cell {test} restored")),
    (r"deleted read-only cell (?P<test>\S+) restored", N_("deleted read-only cell {test} restored")),
    (r"edited test cell (?P<test>\S+) restored", N_("edited test cell {test} restored")),
    (r"edited read-only cell (?P<test>\S+) restored", N_("edited read-only cell {test} restored")),
    (r"a cell's nbgrader metadata was not valid \(nbgrader would not accept it\) and was removed",
     N_("a cell's nbgrader metadata was not valid (nbgrader would not accept it) and was removed")),
    (r"text that is not valid Unicode was replaced \(U\+FFFD\)",
     N_("text that is not valid Unicode was replaced (U+FFFD)")),
)]


def public_reason(reason: str) -> str:
    """A result's reason as a learner's feedback shows it (see ``_PUBLIC_REASONS``), in the class's language."""
    reason = str(reason)
    known = _table_sentence(reason, _PUBLIC_REASONS)
    if known is not None:
        return known
    if reason.startswith(_BROKE_PYTHON):
        return tr("kernel died (the notebook broke the Python it runs in)")
    return tr("the notebook could not be graded normally (your instructor can see why)")


# The late-penalty policies' descriptions (late_policy.describe, deadlines.PerHourPenalty.describe), likewise.
_POLICIES = [(re.compile(p), s) for p, s in (
    (r"a late notebook scores zero", N_("a late notebook scores zero")),
    (r"no late penalty", N_("no late penalty")),
    (r"(?P<fraction>\d+%) of the score per started hour late, at most (?P<cap>\d+%)",
     N_("{fraction} of the score per started hour late, at most {cap}")),
)]


def _table_sentence(text: str, table) -> str | None:
    """``text`` in the class's language where it is one of ``table``'s (pattern, sentence) pairs, else None."""
    for pattern, sentence in table:
        match = pattern.fullmatch(text)
        if match:
            return tr(sentence, **match.groupdict())
    return None


def _in_class_language(text: str, table) -> str:
    """``text`` in the class's language where it is one of ``table``'s sentences, else as it was written."""
    text = str(text)
    known = _table_sentence(text, table)
    return text if known is None else known


def public_flag(flag: str) -> str:
    """A flag as a learner's feedback shows it: in the class's language where it is one of ``_FLAGS``."""
    return _in_class_language(flag, _FLAGS)


def _public_message(message: str) -> str:
    """A cell's message for feedback: decisions are the grader's own text; a "not graded" note quotes a
    reason, which goes through :func:`public_reason`."""
    message = str(message)
    if message.startswith("not graded: "):
        return tr("not graded: {reason}", reason=public_reason(message.removeprefix("not graded: ")))
    return message


def exercise_names(chapter: str, course_root: Path | None = None) -> dict[str, str]:
    """``{grade_id: "Exercise 1: `masked_softmax`"}`` for the chapter's graded test cells, read from the course's
    own text, never the learner's copy of it: the chapter's release in the language of this grading
    (``chapters_zh/`` for a Chinese class, the same grade_ids), else its English source notebook (with the word
    "Exercise" translated); empty when there is none."""
    from attention_course.cells import grade_id, is_graded_test
    from attention_course.selfcheck import exercises

    from .course import Course

    course = Course(course_root) if course_root else Course()
    lang = chosen()
    places = [course.translated_release_notebook(str(chapter), lang)] if lang and lang != ENGLISH else []
    for path in [*places, course.source_notebook(str(chapter))]:
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
            break
        except (OSError, ValueError):
            continue
    else:
        return {}
    where = exercises(nb)
    return {grade_id(c): exercise_name(where[c["id"]]) for c in nb["cells"]
            if is_graded_test(c) and c.get("id") in where}


def _exercise_html(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _lead(result: GradingResult, names: dict[str, str]) -> list[str]:
    """What to fix first, before the table: the first failed test's exercise and symptom, and every exercise still
    blank named once (a blank notebook used to list one 'did not run' line per check, dozens of them)."""
    failed = [cell for cell in result.cells if not cell.passed]
    if not failed or result.status == "failed":
        return []
    blank = []
    for cell in failed:
        gid = cell.grade_id
        if not_implemented(cell.messages):
            name = names.get(gid, tr("the exercise tested by {test}", test=gid))
            if name not in blank:
                blank.append(name)
    cell = failed[0]
    gid = cell.grade_id
    blanks = tr("; ").join(map(_exercise_html, blank))
    if not_implemented(cell.messages):  # the first thing to do is to write the first blank function
        return ["<p class='first-fix'>" + tr("<strong>Not implemented yet</strong> (the function still raises "
                                             "NotImplementedError), start with the first: {exercises}",
                                             exercises=blanks) + "</p>"]
    where = (_exercise_html(names[gid]) if gid in names
             else tr("the test {test}", test=f"<code>{html.escape(str(gid))}</code>"))
    symptom = html.escape(_public_message(next(iter(cell.messages), tr("failed"))))
    parts = ["<p class='first-fix'>" + tr("<strong>Fix first:</strong> {exercise}: {symptom}", exercise=where,
                                          symptom=symptom) + "</p>"]
    if blank:
        parts.append("<p class='not-implemented'>" + tr("<strong>Not implemented yet</strong> (the function still "
                                                        "raises NotImplementedError): {exercises}", exercises=blanks)
                     + "</p>")
    return parts


def feedback_html(result: GradingResult) -> str:
    """One learner's feedback as a self-contained HTML fragment: per graded cell points, pass/fail and the
    symptom messages, led by what to fix first. Every text in it is the grader's own (verdict symptoms, authors' hints,
    the exercise headings of the course's own source notebook, Python's own
    exception names, the reasons of ``_PUBLIC_REASONS``, the flags of the intake and the structure repair,
    which describe the submitted file): nothing the learner's process printed, raised or recorded as text,
    so nothing it read from a hidden test while it ran, however encoded."""
    from .safe_output import CSP_META  # the one Content-Security-Policy of the pages the grader writes

    esc = html.escape
    # A whole page with a head, so the browser applies the policy: no script, no remote resource (issue 24). Its
    # lang attribute lets a browser pick the right fonts for the class's language.
    parts = [f"<!DOCTYPE html><html lang='{page_language()}'><head><meta charset='utf-8'>{CSP_META}"
             f"<title>{esc(tr('Feedback'))}</title>"
             # Chinese text breaks between any two characters: the result and points columns keep to one line.
             "<style>.attention-course-feedback th,.attention-course-feedback td:nth-child(2),"
             ".attention-course-feedback td:nth-child(3){white-space:nowrap}</style></head><body>",
             "<div class='attention-course-feedback'>",
             "<h2>" + esc(tr("{chapter}: {score} / {max_score} points", chapter=result.chapter,
                             score=f"{result.score:g}", max_score=f"{result.max_score:g}")) + "</h2>"]
    late = result.late
    if late and late.seconds > 0:  # the grader's own numbers (autograder/deadlines.py): how late, the points lost
        after = max(0.0, result.score - late.penalty)
        parts.append("<p class='late'>" + tr("<strong>Late:</strong> submitted {late_by} after the due date; {lost} "
                                             "points lost, so {after} / {max_score} count (policy: {policy}).",
                                             late_by=esc(late.text), lost=f"{late.penalty:g}", after=f"{after:g}",
                                             max_score=f"{result.max_score:g}",
                                             policy=esc(_in_class_language(late.policy, _POLICIES))) + "</p>")
    if late and late.held:  # no recorded arrival while a due date is set (late_policy.held): nothing is final yet
        parts.append("<p class='late'>" + tr("<strong>Held:</strong> your instructor has no record of when this "
                                             "notebook arrived; the points below count once they record it.") + "</p>")
    if late and (late.arrived or late.claimed):  # the recorded time, and beside it the learner's own claim
        arrived = esc(late.arrived or tr("not recorded"))
        parts.append("<p class='arrival'>" + (tr("Received: {arrived} (your timestamp.txt says {claimed}).",
                                                 arrived=arrived, claimed=esc(late.claimed)) if late.claimed
                                              else tr("Received: {arrived}.", arrived=arrived)) + "</p>")
    if result.status == "failed":  # the grader's own trouble: its details are for the instructor
        parts.append("<p class='reason'>" + tr("<strong>Not graded:</strong> the grader had a problem with this "
                                               "notebook (not your fault); your instructor can see why.") + "</p>")
    elif result.reason:
        parts.append("<p class='reason'>" + tr("<strong>Not graded normally:</strong> {reason}",
                                               reason=esc(public_reason(result.reason))) + "</p>")
    if result.flags:
        parts.append("<p>" + esc(tr("Changes the grader made to your notebook:")) + "</p><ul class='flags'>")
        parts.extend(f"<li>{esc(public_flag(f))}</li>" for f in result.flags)
        parts.append("</ul>")
    names = exercise_names(result.chapter)
    parts.extend(_lead(result, names))
    parts.append("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in (
        tr("test"), tr("result"), tr("points"), tr("what to look at"))) + "</tr></thead><tbody>")
    for cell in result.cells:
        gid, ok, messages = cell.grade_id, cell.passed, list(cell.messages)
        if not_implemented(messages):  # named once, above the table; its stopped checks say nothing more
            messages = [tr("listed above")]
        msgs = "".join(f"<li>{esc(_public_message(m))}</li>" for m in messages)
        exercise = f"<br>{_exercise_html(names[gid])}" if gid in names else ""
        parts.append(f"<tr class='{'pass' if ok else 'fail'}'><td><code>{esc(gid)}</code>{exercise}</td>"
                     f"<td>{esc(tr('passed') if ok else tr('failed'))}</td>"
                     f"<td>{cell.score:g} / {cell.max_score:g}</td>"
                     f"<td>{'<ul>' + msgs + '</ul>' if msgs else ''}</td></tr>")
    parts.append("</tbody></table></div></body></html>")
    return "\n".join(parts)
