"""The check kinds: one table that says, for every kind, everything the rest of the grader needs to know.

For each kind: its arguments after the check id (the learner's value first), which argument is the
*expected value* (evaluated only where the reference runs and recorded encoded; never evaluated in a
learner's process under the isolated grader), which keyword options its verdict reads, how it is decided
(a function of :mod:`.verdicts`), and how it is described to a learner by default.

Who reads this table: :class:`.checks.Checks` (the methods test cells call), the rewriter and the decision
in :mod:`autograder.trusted` (which arguments to keep in the kernel, which to take from the reference), and
:func:`decide`. Nothing here imports torch, so the trusted decision does not load it.

Adding a kind with an expected value is a new :class:`Kind` row here, its verdict in :mod:`.verdicts`,
and (for test authors) a method on :class:`.checks.Checks` that calls ``self._run``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import verdicts
from .language import N_, tr
from .verdicts import Verdict


@dataclass(frozen=True)
class Kind:
    name: str
    args: tuple[str, ...]  # positional parameters after check_id; args[0] is the learner's value
    decide: Callable[[object, dict, object], Verdict]  # (learner value, parameters, reference value)
    describe: str  # default description (English, marked with N_), translated and formatted with the parameters
    expected: str | None = None  # the argument holding the expected value, if any
    options: tuple[str, ...] = ()  # keyword parameters the verdict reads (besides hint)
    calls: bool = False  # the value is a function: extra positional/keyword arguments are its arguments
    needs_reference: bool = False  # decided against the reference's value for the same expression
    shown: tuple[str, ...] = field(default=("hint", "describe"))  # texts written to be shown to learners


def _close(got, p, ref):
    return verdicts.compare(got, p["want"], p.get("rtol"), p.get("atol"), p.get("hint", ""),
                            p.get("check_dtype", True))


def _matches_reference(got, p, ref):
    if ref is None:
        return verdicts.Verdict(False, tr("internal error: no reference value for this check"))
    return verdicts.compare(got, ref, p.get("rtol"), p.get("atol"), p.get("hint", ""), p.get("check_dtype", True))


REGISTRY: dict[str, Kind] = {k.name: k for k in (
    Kind("close", ("got", "want"), _close, N_("{check_id}: values match"), expected="want",
         options=("rtol", "atol", "check_dtype")),
    Kind("matches_reference", ("got",), _matches_reference, N_("{check_id}: matches the reference"),
         options=("rtol", "atol", "check_dtype"), needs_reference=True),
    Kind("equals", ("got", "want"), lambda got, p, ref: verdicts.equals(got, p["want"], p.get("hint", "")),
         N_("{check_id}: the answer is right"), expected="want"),
    Kind("sums_to_one", ("weights",), lambda got, p, ref: verdicts.sums_to_one(got, p.get("dim", -1),
                                                                                 p.get("hint", "")),
         N_("{check_id}: weights sum to 1 along dim {dim}"), options=("dim",)),
    Kind("shape", ("got", "shape"), lambda got, p, ref: verdicts.has_shape(got, p["shape"], p.get("hint", "")),
         N_("{check_id}: shape is {shape}")),
    Kind("finite", ("got",), lambda got, p, ref: verdicts.is_finite(got, p.get("hint", "")),
         N_("{check_id}: no NaN or inf")),
    Kind("true", ("condition",), lambda got, p, ref: verdicts.is_true(got, p.get("hint", "")), N_("{check_id}")),
    Kind("raises", ("fn",), lambda got, p, ref: verdicts.raised(got, p["types"], p.get("match"), p.get("hint", "")),
         N_("{check_id}: bad input is rejected with {types}"), options=("types", "match"), calls=True),
)}


def kind(name: str) -> Kind | None:
    return REGISTRY.get(name)


def decide(name: str, got, params: dict, reference=None, like=None) -> Verdict:
    """Decide one check. ``params`` come from the trusted side; ``reference`` is the reference's value for a
    kind that ``needs_reference``.

    ``like`` is the form the learner's value must have (:func:`.verdicts.form_problem`): the trusted side
    passes the reference's own recorded value for the same check, for every kind, so a value of another type,
    dtype family, shape or size never reaches a verdict, whatever the kind (a new row is covered without a
    word here). In a learner's kernel there is no reference: ``like`` is None and each verdict holds the value
    to the form of its expected value (or, for a property, to being non-empty numbers).
    """
    spec = REGISTRY.get(name)
    if spec is None:
        return verdicts.Verdict(False, tr("internal error: unknown check kind {kind}", kind=repr(name)))
    if like is not None:
        problem = verdicts.form_problem(got, like)
        if problem is not None:
            hint = params.get("hint", "") if isinstance(params.get("hint", ""), str) else ""
            return verdicts.fail(problem.message, hint, problem.hidden_message)
    return spec.decide(got, params, reference)


def call_outcome(fn, args=(), kwargs=None) -> dict:
    """What a ``raises`` check records of calling ``fn``: the exception's class name and the start of its
    message, or ``raised: None`` when the call returned."""
    try:
        fn(*args, **(kwargs or {}))
    except Exception as exc:  # noqa: BLE001 - the outcome is what we record
        try:
            message = str(exc)[:500]
        except Exception:  # noqa: BLE001 - a hostile exception's __str__
            message = ""
        return {"raised": type(exc).__name__, "message": message}
    return {"raised": None, "message": ""}
