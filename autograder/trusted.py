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
equal the returned weights", or the global RNG), the reference cannot provide it; such *self-consistency
sites* are found by running the reference twice with different seeds (:mod:`autograder.isolation`) and
keep their ``want`` in the kernel. A learner who tampers with the recorder can pass those checks (they
compare the learner's values with each other), and property checks (shape, sums_to_one, finite, true,
raises) can be faked by a learner who fabricates a value with the property. Points for any check whose
expected value is reproducible (``close`` against a fixed value, ``matches_reference``) need values equal
to the reference's: a fake record can only carry a value the learner's process could compute.

The trusted decision
--------------------
For each graded test cell: the check keys the reference produced for that cell (``"<cell>/<check>"``),
each with the reference's kind and parameters. The cell passes iff it ran without error and every one of
those keys was recorded exactly once by that cell and ``verdicts.decide(kind, learner got, reference
params, reference got)`` passes. Records are read only from that cell's own outputs and only for that cell's
grade_id. A key recorded more than once fails: the recorder records each key once, so a second record means
the notebook emitted a fake one (printed before the check ran, or after it); neither first nor last is
trusted. A missing key fails ("did not run"). Nothing is taken from the learner's record but the value.

Feedback never contains hidden test source, expected values or hidden inputs: messages are the verdicts'
symptom texts, prefixed by the check id in visible cells and by "hidden check N" in hidden ones; for an
error in a hidden cell only the exception type is shown (its message could echo hidden inputs).
"""
from __future__ import annotations

import ast
import html
import inspect

from attention_course import verdicts
from attention_course.encoding import decode

KINDS = ("close", "matches_reference", "sums_to_one", "shape", "finite", "true", "raises")
RAISES_RESERVED = {"types", "match", "hint", "describe"}
HIDDEN_BEGIN = "BEGIN HIDDEN TESTS"


class TestCellNotSupported(Exception):
    """A graded test cell uses the check library in a way the rewriter cannot make safe."""


def _signatures() -> dict[str, list[str]]:
    from attention_course.checks import Checks

    out = {}
    for kind in KINDS:
        params = list(inspect.signature(getattr(Checks, kind)).parameters.values())[1:]
        out[kind] = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return out


_SIGS = _signatures()


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
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KINDS
            and isinstance(node.func.value, ast.Name) and node.func.value.id in names)


class _Rewriter(ast.NodeTransformer):
    def __init__(self, names: set[str], mode: str, keep_want: set[int]):
        self.names, self.mode, self.keep_want = names, mode, keep_want
        self.site = 0
        self.sites: dict[int, str] = {}

    def visit_Call(self, node):
        if not _is_check_call(node, self.names):
            return self.generic_visit(node)
        for arg in [*node.args, *[k.value for k in node.keywords]]:
            if any(_is_check_call(n, self.names) for n in ast.walk(arg)):
                raise TestCellNotSupported("a check call inside another check call")
        self.site += 1
        site, kind = self.site, node.func.attr
        self.sites[site] = kind
        if self.mode == "profile":
            return ast.Call(func=ast.Name("__ac_site__", ast.Load()),
                            args=[ast.Constant(site), node.func, *node.args], keywords=node.keywords)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise TestCellNotSupported(f"check.{kind}(...) with *args or **kwargs")
        sig = _SIGS[kind]
        bound: dict[str, ast.expr] = {}
        extra_args = []
        for i, a in enumerate(node.args):
            if i < len(sig):
                bound[sig[i]] = a
            elif kind == "raises":
                extra_args.append(a)
            else:
                raise TestCellNotSupported(f"too many arguments to check.{kind}")
        extra_kw = []
        for k in node.keywords:
            if k.arg in sig:
                bound[k.arg] = k.value
            elif kind == "raises" and k.arg not in RAISES_RESERVED:
                extra_kw.append(k)
        if "check_id" not in bound or len(sig) < 2 or sig[1] not in bound:
            raise TestCellNotSupported(f"check.{kind}(...) without a check id and a value")
        if kind == "raises":
            return ast.Call(func=ast.Name("__ac_raises__", ast.Load()),
                            args=[ast.Constant(site), bound["check_id"], bound["fn"], *extra_args], keywords=extra_kw)
        args = [ast.Constant(site), ast.Constant(kind), bound["check_id"], bound[sig[1]]]
        if kind == "close" and site in self.keep_want:
            if "want" not in bound:
                raise TestCellNotSupported("check.close(...) without want")
            args.append(bound["want"])
        return ast.Call(func=ast.Name("__ac_record__", ast.Load()), args=args, keywords=[])


def _loaded_names(tree) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


_RNG_NAMES = {"manual_seed", "seed", "Generator", "rand", "randn", "randint", "randperm", "rand_like",
              "randn_like", "randint_like", "normal", "normal_", "uniform_", "bernoulli", "multinomial", "poisson",
              "random", "random_", "shuffle", "choice", "permutation", "dropout", "exponential_", "geometric_",
              "cauchy_", "log_normal_", "sample", "rsample"}


def _uses_generator(node) -> bool:
    """Evaluating this might draw random numbers (so dropping it would change later inputs)."""
    for n in ast.walk(node):
        if isinstance(n, ast.keyword) and n.arg == "generator":
            return True
        if isinstance(n, ast.Attribute) and n.attr in _RNG_NAMES:
            return True
        if isinstance(n, ast.Name) and n.id in _RNG_NAMES:
            return True
    return False


class _DropDead(ast.NodeTransformer):
    """Replace ``name = expr`` statements whose names nothing else reads by ``pass``."""

    def __init__(self, dead: set[str]):
        self.dead = dead
        self.changed = False

    def visit_Assign(self, node):
        targets = []
        for t in node.targets:
            if isinstance(t, ast.Name):
                targets.append(t.id)
            elif isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
                targets.extend(e.id for e in t.elts)
            else:
                return node
        if targets and all(t in self.dead for t in targets) and not _uses_generator(node.value):
            self.changed = True
            return ast.copy_location(ast.Pass(), node)
        return node


def _assigned_names(tree) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return out


def rewrite_test_cell(source: str, mode: str, keep_want: set[int] | frozenset = frozenset()) -> tuple[str, dict]:
    """The code a graded test cell runs in the sandbox, and its check sites ``{site: kind}``.

    ``mode="profile"`` (the reference run) wraps each check call so its record is tagged with its site and
    keeps everything else. ``mode="grade"`` (a learner's run) keeps only check ids and learner values (plus
    ``want`` at the self-consistency sites in ``keep_want``) and drops assignments that only fed what was
    dropped. Raises :class:`TestCellNotSupported` for check-library use it cannot make safe.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TestCellNotSupported(f"test cell is not plain Python ({exc.msg})") from None
    names = _check_names(tree)
    rw = _Rewriter(names, mode, set(keep_want))
    tree = rw.visit(tree)
    if mode == "grade":
        ctor_targets = names
        leftovers = {n for n in _loaded_names(tree) if n in ctor_targets}
        if leftovers:
            raise TestCellNotSupported(f"the Checks object {sorted(leftovers)[0]!r} is used other than by calling "
                                       "one of its checks")
        # drop assignments that only fed dropped expressions, to a fixpoint
        for _ in range(20):
            dead = _assigned_names(tree) - _loaded_names(tree)
            dd = _DropDead(dead)
            tree = dd.visit(tree)
            if not dd.changed:
                break
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", rw.sites


def is_hidden(source: str) -> bool:
    return HIDDEN_BEGIN in source


# ---------------------------------------------------------------------------------------------------------
# the decision


def _decode_params(kind: str, params: dict) -> dict:
    out = dict(params)
    if kind == "close" and "want" in out:
        out["want"] = decode(out["want"])
    return out


def decide_cell(spec: dict, records: list[dict], error: dict | None, grade_id: str) -> tuple[bool, list[str]]:
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
    failures: list[str] = []
    for n, chk in enumerate(spec["checks"], start=1):
        key, kind = chk["key"], chk["kind"]
        label = f"hidden check {n}" if hidden else chk["check"]
        count = counts.get(key, 0)
        if count == 0:
            failures.append(f"{label}: did not run (an earlier error stopped the cell)")
            continue
        if count > 1:
            failures.append(f"{label}: recorded {count} times; the notebook emitted a fake check record")
            continue
        rec = by_key[key]
        try:
            got = decode(rec.get("got"))
            params = _decode_params(kind, chk["params"])
            if kind == "close" and chk["site"] in spec.get("keep_want_sites", []):
                if "want" not in rec:
                    failures.append(f"{label}: the expected value was not recorded")
                    continue
                params["want"] = decode(rec["want"])
            reference = decode(chk["ref_got"]) if kind == "matches_reference" else None
            verdict = verdicts.decide(kind, got, params, reference)
        except Exception as exc:  # noqa: BLE001 - a forged or broken record must not crash the grader
            failures.append(f"{label}: the recorded value is unreadable ({type(exc).__name__})")
            continue
        if not verdict.passed:
            failures.append(f"{label}: {verdict.message}")
    messages = []
    if error is not None:
        ename = str(error.get("ename", "Error"))
        if ename == "CellTimeout":
            messages.append(str(error.get("evalue", "the cell did not finish in time")))
        elif hidden:
            messages.append(f"the cell stopped with {ename} while running the hidden tests")
        else:
            messages.append(f"the cell stopped with {ename}: {str(error.get('evalue', ''))[:300]}")
    if hidden:  # many hidden checks often fail the same way: say it once
        merged: dict[str, list[str]] = {}
        for f in failures:
            label, _, msg = f.partition(": ")
            merged.setdefault(msg, []).append(label.removeprefix("hidden check "))
        failures = [f"hidden check{'s' if len(ns) > 1 else ''} {', '.join(ns)}: {msg}" for msg, ns in merged.items()]
    messages.extend(failures)
    passed = error is None and not failures
    return passed, messages


# ---------------------------------------------------------------------------------------------------------
# feedback


def feedback_html(result: dict) -> str:
    """One learner's feedback as a self-contained HTML fragment: per graded cell points, pass/fail and the
    symptom messages; never hidden test source or expected values (the result holds none)."""
    esc = html.escape
    parts = [f"<div class='attention-course-feedback'>",
             f"<h2>{esc(str(result.get('chapter', '')))}: {result.get('score', 0):g} / "
             f"{result.get('max_score', 0):g} points</h2>"]
    if result.get("reason"):
        parts.append(f"<p class='reason'><strong>Not graded normally:</strong> {esc(str(result['reason']))}</p>")
    if result.get("flags"):
        parts.append("<p>Changes the grader made to your notebook:</p><ul class='flags'>")
        parts.extend(f"<li>{esc(str(f))}</li>" for f in result["flags"])
        parts.append("</ul>")
    parts.append("<table><thead><tr><th>test</th><th>result</th><th>points</th><th>what to look at</th></tr>"
                 "</thead><tbody>")
    for gid, cell in (result.get("cells") or {}).items():
        ok = bool(cell.get("passed"))
        msgs = "".join(f"<li>{esc(str(m))}</li>" for m in cell.get("messages", []))
        parts.append(f"<tr class='{'pass' if ok else 'fail'}'><td><code>{esc(str(gid))}</code></td>"
                     f"<td>{'passed' if ok else 'failed'}</td>"
                     f"<td>{cell.get('score', 0):g} / {cell.get('max_score', 0):g}</td>"
                     f"<td>{'<ul>' + msgs + '</ul>' if msgs else ''}</td></tr>")
    parts.append("</tbody></table></div>")
    return "\n".join(parts)
