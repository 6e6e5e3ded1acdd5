"""Points only from reference values: the rule every graded test cell of every chapter follows.

A graded cell runs in the learner's process, so everything the kernel records is the learner's to choose:
a tampered recorder (an IPython AST transformer, a patched display hook) can record any value it likes.
What it cannot do is know a value that never exists in that process. So a cell may earn its points only
if at least one of its checks compares the learner's value with an expected value the learner's process
never holds (:mod:`autograder.trusted`):

- ``matches_reference``: decided against the reference run's value for the same expression;
- ``close`` or ``equals`` whose expected value the trusted side takes from the reference run: the profile
  build (:meth:`autograder.isolation.Engine._build_profile`) re-runs the reference with other seeds and with
  its modules re-initialised (:mod:`autograder.reinitialise`) and keeps in the kernel (``keep_want_sites``)
  every expected value that moved: those are the learner's own to compute (self-consistency: "the output at
  position t does not change when later tokens do", "the weights stored are the weights returned"), so they
  are claims, not reference values. A cell on the conservative rewrite keeps every expected value in the
  kernel, so none of its ``close``/``equals`` count;
- a yes/no question (``check.true(id, f(x) is False)``, rewritten to ``equals`` by
  :func:`autograder.trusted._as_equals`) counts only where the cell asks questions with both answers: a cell
  whose every yes/no answer is the same is passed by a recorder that answers that for everything (its
  answer is no secret: a passing test says True).

Property kinds decide a property of a value the learner's process chose (``true`` on a non-literal
condition, ``shape``, ``sums_to_one``, ``finite``, ``raises``): a fabricated value has the property, so
they never earn points on their own. They still belong in cells (they name the symptom), beside a
reference-valued check. A cell that declares an external observation (a memory budget the engine enforces
from outside the kernel, cell metadata ``attention_course.memory_budget_mb``) follows the same rule: the
budget says how the work was done, the reference-valued check says that it was done.

:func:`violations` applies the rule to one chapter (its source notebook and its reference profile); the
lint test (tests/test_points_lint.py) runs it for every chapter on disk.
"""
from __future__ import annotations

from dataclasses import dataclass

import nbformat

from attention_course.cells import grade_id, is_graded_test, points
from attention_course.encoding import decode, validate
from attention_course.kinds import REGISTRY

PROPERTY_KINDS = frozenset(name for name, spec in REGISTRY.items()
                           if spec.expected is None and not spec.needs_reference)


@dataclass(frozen=True)
class CellTrust:
    grade_id: str
    points: float
    trusted: tuple[str, ...]  # check ids whose expected value the learner's process never holds
    untrusted: tuple[str, ...]  # "check-id (why)" for every other check

    @property
    def earns_honestly(self) -> bool:
        return self.points <= 0 or bool(self.trusted)

    def describe(self) -> str:
        shown = ", ".join(self.untrusted[:6]) + (f", ... ({len(self.untrusted)} in all)" if len(self.untrusted) > 6
                                                 else "")
        return (f"{self.grade_id} ({self.points:g} points) has no check with a reference value: "
                f"{shown or 'no checks'}")


def _yes_no(check: dict) -> bool | None:
    """The reference's answer when the check is a yes/no ``equals`` (a bool expected value), else None."""
    if check["kind"] != "equals":
        return None
    try:
        want = decode(validate(check["params"]["want"]))
    except Exception:  # noqa: BLE001 - an unreadable expected value is not a yes/no answer
        return None
    return want if isinstance(want, bool) else None


def cell_trust(gid: str, cell_points: float, spec: dict) -> CellTrust:
    """Which of one cell's checks (its entry in the reference profile) carry a reference value."""
    kept = set(spec.get("keep_want_sites", []))
    conservative = bool(spec.get("conservative"))
    answers = {a for a in (_yes_no(c) for c in spec["checks"]) if a is not None}
    trusted, untrusted = [], []
    for c in spec["checks"]:
        kind = REGISTRY.get(c["kind"])
        name = c["check"]
        if kind is None:
            untrusted.append(f"{name} (unknown kind {c['kind']!r})")
        elif kind.needs_reference:
            trusted.append(name)
        elif kind.expected is None:
            untrusted.append(f"{name} ({c['kind']}: a property of the learner's value)")
        elif conservative or c["site"] in kept:
            untrusted.append(f"{name} ({c['kind']}: its expected value is computed in the learner's process)")
        elif _yes_no(c) is not None and len(answers) < 2:
            untrusted.append(f"{name} (a yes/no question in a cell whose every answer is {next(iter(answers))})")
        else:
            trusted.append(name)
    return CellTrust(gid, cell_points, tuple(trusted), tuple(untrusted))


def chapter_trust(source: nbformat.NotebookNode, profile: dict) -> list[CellTrust]:
    """Every graded test cell of a chapter, in order, with its trusted and untrusted checks."""
    out = []
    for cell in source.cells:
        if not is_graded_test(cell):
            continue
        gid = grade_id(cell)
        spec = profile["cells"].get(gid)
        if spec is None:
            out.append(CellTrust(gid, points(cell), (), ("(not in the reference profile)",)))
        else:
            out.append(cell_trust(gid, points(cell), spec))
    return out


def violations(source: nbformat.NotebookNode, profile: dict) -> list[CellTrust]:
    """The graded cells of a chapter that could earn points with no reference-valued check."""
    return [c for c in chapter_trust(source, profile) if not c.earns_honestly]
