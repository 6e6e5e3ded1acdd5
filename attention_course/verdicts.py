"""The decisions behind every check, as pure functions of decoded values.

:mod:`.kinds` says which of these decides which check kind. The same function decides a check twice: in the
learner's kernel, for instant feedback, and in the trusted grading process, on the values the kernel recorded
against the values a clean run of the reference produced. Nothing here imports torch or calls anything a
learner could have patched.

Messages name the symptom (shape, dtype, axis, scale, NaN, mask) and never print expected values or hidden
inputs.

The form rule (verdicts are strict)
-----------------------------------
A value passes a check only if it has the *form* of the value it is measured against: the same category
(tensor, NumPy array, Python number, Python bool, list or tuple, string, None, dict) and, for a tensor or an
array, the same dtype family (float, int, bool, complex) and exactly the same shape (so ``[]``, ``()``, an
empty tensor or a 0-d tensor is never "close" to a number, and ``(1,)`` is not ``()``); a list or tuple has
the same length and each item the form of the corresponding item. On the trusted side the form is that of
the reference's own value for the same expression (every check in a reference profile records it; see
:func:`form_problem` and :func:`.kinds.decide`), and stock ``nbgrader autograde``, run where the solutions
are, looks the same value up (:func:`.expected.reference_form`), so both refuse the same values; in a learner's own
kernel, which has no reference, it is that of the expected value, so a 0-d tensor passes ``close(x, 0.5)`` there
and fails under the grader when the reference returns a Python number (the feedback page then says "expected a
Python number, got a tensor"). What legitimately varies, decided from what the course's reference solutions return
(every recorded value of chapters 1-9): a Python ``int`` and ``float`` are one category (counts are ints,
losses floats, and ``6 == 6.0``); a list and a tuple are one category; a ``Parameter`` is a tensor. A Python
number as the expected value of a tensor means "every entry equals it" (test authors write
``close(out[..., 3:], 0.0)``: 37 checks): the tensor must then be non-empty, of a float or int dtype, and on
the trusted side still have the reference's form. The exact dtype is compared only where ``check_dtype``
asks and the expected value has a dtype.

The feedback budget (what a learner's value can make a message say)
--------------------------------------------------------------------
A failure message of a visible check is shown on the learner's feedback page, and the learner's process
chose the value it describes: anything a message quotes from that value is a channel out of the grader
(hidden test inputs were once read out of the shapes of empty tensors). So every quote goes through one of
the quantisers below, each with a small fixed set of outputs, and nothing else from the learner's value is
ever formatted into a message:

- :func:`shape_text`: at most ``SHOWN_DIMS`` (4) dimensions, each shown exactly up to ``SHOWN_MAX`` (64) and
  as ``>64`` above; more dimensions are "(more than 4 dimensions)" (< 2^24.2 outputs);
- :func:`count_text`: a count exactly up to 64, "more than 64" above (65 outputs);
- :func:`number_text`: 3 significant digits between 0.001 and 1000 in size, three fixed words outside
  (< 2^13.4 outputs);
- dtypes come from the wire format's fixed list, type names from Python's own (``encoding.PYTHON_NAMES``),
  categories from :data:`CATEGORY_NAMES`.

A message quotes at most one shape, or at most two counts and one number, on top of the choice of its
sentence (fewer than 64 sentences): at most ``FEEDBACK_BITS`` (32) bits per message, whatever the value.
Hidden checks have their own message (:attr:`Verdict.hidden`), which quotes nothing of the learner's value: the
symptom's sentence only (and an exception's name from :data:`HIDDEN_EXCEPTION_NAMES`), at most
``HIDDEN_FEEDBACK_BITS`` (10) bits: one of fewer than 64 sentences, one of 9 names. ``tests/test_verdict_properties.py`` checks both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .encoding import PYTHON_NAMES, SUBCLASS, DecodedTensor, Unsupported
from .language import N_, tr
from .language import hint as translated_hint

# (rtol, atol) by dtype: float64 is held tight; float32 allows for a GPU's different summation order.
TOLERANCES = {
    "float64": (1e-6, 1e-8),
    "float32": (1e-4, 1e-5),
    "bfloat16": (2e-2, 2e-2),
    "float16": (5e-3, 5e-3),
}

SHOWN_DIMS = 4
SHOWN_MAX = 64
FEEDBACK_BITS = 32
HIDDEN_FEEDBACK_BITS = 10
# The exceptions a hidden check's message may name (an honest mistake raises one of these); any other
# class is "another exception". A fixed list of 8: 3 bits, inside the hidden budget.
HIDDEN_EXCEPTION_NAMES = ("ValueError", "TypeError", "RuntimeError", "IndexError", "KeyError", "AttributeError",
                          "ZeroDivisionError", "NotImplementedError")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str
    hidden: str = ""  # the message for a hidden check: nothing quoted from the learner's value

    @property
    def hidden_message(self) -> str:
        return self.hidden or self.message


PASS = Verdict(True, "")


def fail(message: str, hint: str = "", hidden: str | None = None) -> Verdict:
    """A failed verdict. ``hidden`` is the same sentence with every quote of the learner's value left out
    (``None``: the message quotes nothing of it). ``hint`` is the test cell's English; it is shown in the active
    language (:func:`attention_course.language.hint`: the learner's, or the class's on the grader)."""
    hint = translated_hint(hint)

    def with_hint(text: str) -> str:
        if not hint:
            return text
        if text.rstrip()[-1:] in ("?", "!", ".", "？", "！", "。"):  # a question ends its own sentence
            return tr("{message} {hint}", message=text, hint=hint).strip()
        return tr("{message}. {hint}", message=text, hint=hint).strip()

    return Verdict(False, with_hint(message), with_hint(message if hidden is None else hidden))


# ---------------------------------------------------------------------------------------------------------
# quantisers: the only way a learner's value reaches a message (see "The feedback budget")


def shape_text(shape) -> str:
    shape = tuple(int(s) for s in shape)
    if len(shape) > SHOWN_DIMS:
        return tr("(more than {count} dimensions)", count=SHOWN_DIMS)
    dims = [str(d) if d <= SHOWN_MAX else f">{SHOWN_MAX}" for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def count_text(n: int) -> str:
    return str(int(n)) if n <= SHOWN_MAX else tr("more than {count}", count=SHOWN_MAX)


def number_text(x: float) -> str:
    if not math.isfinite(x):
        return tr("not a finite number")
    if abs(x) < 1e-3:
        return tr("about 0")
    if abs(x) >= 1e3:
        return tr("more than 1000 in size")
    return f"{x:.3g}"


def _shape_exact(shape) -> str:
    """An expected shape (the test's, not the learner's): shown as it is."""
    shape = tuple(int(s) for s in shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


# ---------------------------------------------------------------------------------------------------------
# forms


# In English; a message shows them through tr (category_name).
CATEGORY_NAMES = {"tensor": N_("a tensor"), "array": N_("a NumPy array"), "number": N_("a Python number"),
                  "bool": N_("a Python bool"), "sequence": N_("a list or tuple"), "str": N_("a string"),
                  "None": N_("None"), "dict": N_("a dict")}
_FAMILIES = {"f": "float", "i": "int", "u": "int", "b": "bool", "c": "complex"}


def _family(dtype: str) -> str:
    if dtype == "bfloat16":
        return "float"
    try:
        return _FAMILIES.get(np.dtype(dtype).kind, "other")
    except TypeError:
        return "other"


def _category(value) -> str:
    if isinstance(value, DecodedTensor):
        return "tensor"
    if isinstance(value, np.ndarray):
        return "array"
    if type(value) is bool:
        return "bool"
    if type(value) in (int, float):
        return "number"
    if type(value) in (list, tuple):
        return "sequence"
    if type(value) is str:
        return "str"
    if value is None:
        return "None"
    if type(value) is dict:
        return "dict"
    return "unsupported"


def category_name(category: str) -> str:
    """A category of :data:`CATEGORY_NAMES` as a message names it, in the active language."""
    return tr(CATEGORY_NAMES[category])


def _what(value) -> str:
    """What a value is, in a fixed vocabulary (Python's own type names at most)."""
    category = _category(value)
    if category != "unsupported":
        return category_name(category)
    if isinstance(value, Unsupported):
        if value.type_name == SUBCLASS:
            return tr("a tensor subclass")
        # on the trusted side: one of our notes or Python's own names
        return tr("a {type_name}", type_name=value.type_name)
    return tr("a {type_name}", type_name=type(value).__name__)


def _dtype_of(value) -> str:
    return value.dtype if isinstance(value, DecodedTensor) else str(value.dtype)


def _not_tensor_problem(value) -> tuple[str, str] | None:
    """Why a tensor cannot be used at all (a subclass, the meta device), as (message, hidden message)."""
    if isinstance(value, Unsupported) and value.type_name == SUBCLASS:
        return tr("got a tensor subclass; return a plain torch.Tensor"), None
    if isinstance(value, DecodedTensor):
        if value.type_name not in ("Tensor", "Parameter"):
            return tr("got a tensor subclass; return a plain torch.Tensor"), None
        if value.device == "meta":
            return tr("got a tensor on the meta device, which holds no values"), None
    return None


def form_problem(got, like, depth: int = 0) -> Verdict | None:
    """Why ``got`` does not have the form of ``like`` (see "The form rule"), or None when it does.

    ``like`` is a value the grader trusts (the reference's, or the test's expected value). Never allocates:
    it compares types, dtypes and claimed shapes only.
    """
    broken = _not_tensor_problem(got)
    if broken:
        return fail(broken[0], hidden=broken[1])
    c_got, c_like = _category(got), _category(like)
    if c_like == "unsupported":  # the reference recorded something without a form (a function, say)
        return None
    if c_got != c_like:
        return fail(tr("expected {wanted}, got {got}", wanted=category_name(c_like), got=_what(got)),
                    hidden=tr("the result has the wrong type"))
    if c_like in ("tensor", "array"):
        if isinstance(like, DecodedTensor) and like.device == "meta":
            return None
        if tuple(got.shape) != tuple(like.shape):
            return fail(tr("result has shape {got} but should have shape {wanted}", got=shape_text(got.shape),
                           wanted=_shape_exact(like.shape)), hidden=tr("the result has the wrong shape"))
        if _family(_dtype_of(got)) != _family(_dtype_of(like)):
            return fail(tr("result has dtype {got} but should have a {family} dtype", got=_dtype_of(got),
                           family=_family(_dtype_of(like))), hidden=tr("the result has the wrong dtype"))
    if c_like == "sequence":
        if len(got) != len(like):
            return fail(tr("result has {got} items but should have {wanted}", got=count_text(len(got)),
                           wanted=len(like)), hidden=tr("the result has the wrong number of items"))
        if depth < 32:
            for g, w in zip(got, like):
                problem = form_problem(g, w, depth + 1)
                if problem:
                    return fail(tr("an item of the result: {problem}", problem=problem.message),
                                hidden=tr("an item of the result: {problem}", problem=problem.hidden_message))
    return None


def _as_numbers(value):
    """A decoded value of a numeric form as (ndarray, dtype name); ``None`` when it is not numbers."""
    if isinstance(value, DecodedTensor):
        return np.asarray(value.values, dtype=np.float64), value.dtype
    if isinstance(value, np.ndarray):
        return value.astype(np.float64), str(value.dtype)
    if type(value) in (int, float):
        return np.asarray(float(value)), "python"
    if type(value) in (list, tuple):
        try:
            return np.asarray(value, dtype=np.float64), "python"
        except (TypeError, ValueError):
            return None, None
    return None, None


def _symptom(got: np.ndarray, want: np.ndarray, bad: np.ndarray) -> tuple[str, str]:
    """Why two arrays of the same shape differ, in words a learner can act on: (message, hidden message)."""
    n_bad, n = int(bad.sum()), bad.size
    base = tr("{wrong} of {total} values are wrong", wrong=count_text(n_bad), total=count_text(n))
    hidden = tr("all values are wrong") if n_bad == n else tr("some values are wrong")

    def both(more: str) -> tuple[str, str]:  # the symptom after the count, in both messages
        return tr(more, problem=base), tr(more, problem=hidden)

    if got.ndim >= 2 and got.shape[-1] == got.shape[-2]:
        if np.allclose(np.swapaxes(got, -1, -2), want, rtol=1e-4, atol=1e-6):
            return both(N_("{problem}; the result looks transposed (rows and columns swapped)"))
    nz = np.abs(want) > 1e-12
    if nz.any():
        with np.errstate(all="ignore"):
            ratio = got[nz] / want[nz]
        factor = ratio.flat[0]
        if (np.all(np.isfinite(ratio)) and np.allclose(ratio, factor, rtol=1e-3) and abs(factor - 1) > 1e-3
                and abs(factor) > 1e-6):
            return (tr("{problem}; every value is off by the same factor ({factor}): check the scaling", problem=base,
                       factor=number_text(float(factor))),
                    tr("{problem}; every value is off by the same factor: check the scaling", problem=hidden))
    if not np.any(got):
        return both(N_("{problem}; the result is all zeros (or all False)"))
    if got.ndim >= 1 and want.ndim >= 1:
        want_rows, got_rows = want.sum(-1), got.sum(-1)
        if np.allclose(want_rows, 1.0, atol=1e-4) and not np.allclose(got_rows, 1.0, atol=1e-4):
            return both(N_("{problem}; rows should sum to 1 but do not: check the softmax axis"))
        if np.allclose(want_rows, got_rows, rtol=1e-4, atol=1e-5) and got.ndim >= 2:
            return both(N_("{problem}; each row has the right total but the wrong distribution"))
    if n_bad and np.all(want[bad] == 0):
        return both(N_("{problem}; only entries that should be exactly 0 are wrong: is the mask applied?"))
    return base, hidden


def _numeric_problem(got, what: str = N_("a tensor or a number"), empty_ok: bool = False) -> Verdict | None:
    """A property check's value must be numbers: a tensor, an array or a Python number (not a bool), and
    hold at least one value (unless the check's own expected form is empty)."""
    broken = _not_tensor_problem(got)
    if broken:
        return fail(broken[0])
    if _category(got) not in ("tensor", "array", "number"):
        return fail(tr("expected {wanted}, got {got}", wanted=tr(what), got=_what(got)),
                    hidden=tr("the result has the wrong type"))
    if not empty_ok and _category(got) != "number" and math.prod(got.shape) == 0:
        return fail(tr("got an empty result of shape {got}", got=shape_text(got.shape)),
                    hidden=tr("got an empty result"))
    return None


def compare(got, want, rtol: float | None = None, atol: float | None = None, hint: str = "",
            check_dtype: bool = True) -> Verdict:
    """Is ``got`` numerically ``want`` (form, dtype, NaN pattern, values)? See "The form rule"."""
    if _category(want) not in ("tensor", "array", "number", "sequence") or _as_numbers(want)[0] is None:
        return fail(tr("internal error: expected value is unusable"))  # the test, not the learner, is wrong
    if _category(want) == "number" and _category(got) in ("tensor", "array"):
        # every entry equals ``want``: a non-empty tensor of numbers
        problem = _numeric_problem(got)
        if problem is None and _family(_dtype_of(got)) not in ("float", "int"):
            problem = fail(tr("result has dtype {got} but should hold numbers", got=_dtype_of(got)),
                           hidden=tr("the result has the wrong dtype"))
    else:
        problem = form_problem(got, want)
    if problem:
        return fail(problem.message, hint, problem.hidden_message)
    g, g_dtype = _as_numbers(got)
    w, w_dtype = _as_numbers(want)
    if g is None:
        return fail(tr("got a nested sequence that is not a rectangular array of numbers"), hint)
    if g.shape != np.broadcast_shapes(g.shape, w.shape):  # forms agree, so only a malformed nesting gets here
        return fail(tr("got a nested sequence that is not a rectangular array of numbers"), hint)
    if check_dtype and w_dtype != "python" and g_dtype != w_dtype:
        return fail(tr("result has dtype {got} but should have dtype {wanted} (keep the inputs' dtype)", got=g_dtype,
                       wanted=w_dtype), hint, tr("the result has the wrong dtype (keep the inputs' dtype)"))
    dtype = w_dtype if w_dtype in TOLERANCES else (g_dtype if g_dtype in TOLERANCES else "float64")
    d_rtol, d_atol = TOLERANCES.get(dtype, TOLERANCES["float64"])
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    wb = np.broadcast_to(w, g.shape)
    g_nan, w_nan = np.isnan(g), np.isnan(wb)
    if g_nan.any() and not w_nan.any():
        return fail(tr("result contains NaN in {nans} of {total} places (an empty row, an overflow, or 0/0?)",
                       nans=count_text(int(g_nan.sum())), total=count_text(g.size)), hint,
                    tr("result contains NaN in some places (an empty row, an overflow, or 0/0?)"))
    if np.isinf(g).any() and not np.isinf(wb).any():
        return fail(tr("result contains inf: something overflowed (subtract the maximum before exp?)"), hint)
    ok = np.isclose(g, wb, rtol=rtol, atol=atol, equal_nan=True)
    if ok.all():
        return PASS
    message, hidden = _symptom(g, np.asarray(wb), ~ok)
    return fail(message, hint, hidden)


def sums_to_one(got, dim: int = -1, hint: str = "") -> Verdict:
    problem = _numeric_problem(got, N_("a tensor of weights"))
    if problem:
        return fail(problem.message, hint, problem.hidden_message)
    if _category(got) == "number" or len(got.shape) == 0:
        return fail(tr("got a scalar where a tensor of weights was expected"), hint)
    if _family(_dtype_of(got)) != "float":
        return fail(tr("weights have dtype {got}; weights are floating-point numbers", got=_dtype_of(got)), hint,
                    tr("the weights have the wrong dtype"))
    g, _ = _as_numbers(got)
    if not -g.ndim <= dim < g.ndim:
        return fail(tr("weights have no axis {dim}", dim=dim), hint, tr("the weights have too few dimensions"))
    if np.isnan(g).any():
        return fail(tr("weights contain NaN"), hint)
    totals = g.sum(axis=dim)
    if np.allclose(totals, 1.0, rtol=1e-4, atol=1e-5):
        if (g < -1e-7).any():
            return fail(tr("weights sum to 1 but some are negative"), hint)
        return PASS
    other = [ax for ax in range(g.ndim) if ax != dim % g.ndim]
    for ax in other:
        if np.allclose(g.sum(axis=ax), 1.0, rtol=1e-4, atol=1e-5):
            return fail(tr("weights sum to 1 along axis {axis} instead of axis {dim}: softmax was taken over the "
                           "wrong axis", axis=ax - g.ndim, dim=dim), hint,
                        tr("weights sum to 1 along another axis than axis {dim}: softmax was taken over the wrong axis",
                           dim=dim))
    return fail(tr("weights along axis {dim} must sum to 1 (they do not)", dim=dim), hint)


def has_shape(got, shape, hint: str = "") -> Verdict:
    broken = _not_tensor_problem(got)
    on_meta = isinstance(got, DecodedTensor) and got.type_name in ("Tensor", "Parameter") and got.device == "meta"
    if broken and not on_meta:  # where a result lives is all a shape check needs
        return fail(broken[0], hint)
    if _category(got) not in ("tensor", "array"):
        return fail(tr("expected {wanted}, got {got}", wanted=category_name("tensor"), got=_what(got)), hint,
                    tr("the result has the wrong type"))
    want = tuple(int(s) for s in shape)
    if tuple(got.shape) != want:
        return fail(tr("result has shape {got} but should have shape {wanted}", got=shape_text(got.shape),
                       wanted=_shape_exact(want)), hint, tr("the result has the wrong shape"))
    return PASS


def is_finite(got, hint: str = "") -> Verdict:
    problem = _numeric_problem(got)
    if problem:
        return fail(problem.message, hint, problem.hidden_message)
    if _category(got) != "number" and _family(_dtype_of(got)) not in ("float", "complex"):
        # only floating-point numbers can be NaN or inf: an int or bool result says nothing (and is not one)
        return fail(tr("result has dtype {got} but should hold floating-point numbers", got=_dtype_of(got)), hint,
                    tr("the result has the wrong dtype"))
    g, _ = _as_numbers(got)
    if np.isnan(g).any():
        return fail(tr("result contains NaN in {nans} of {total} places", nans=count_text(int(np.isnan(g).sum())),
                       total=count_text(g.size)), hint, tr("result contains NaN in some places"))
    if np.isinf(g).any():
        return fail(tr("result contains inf"), hint)
    return PASS


def equals(got, want, hint: str = "") -> Verdict:
    """``got`` is the plain value ``want`` (a yes/no answer, a count, a name): same type, same value.

    Ints and floats compare by value; anything else must have ``want``'s type. The message never says what
    ``want`` is (a hidden yes/no answer is one bit: naming it would give it away).
    """
    wanted = tr("a plain Python {type_name}", type_name=type(want).__name__)
    if type(got) not in (bool, int, float, str, type(None)):
        what = category_name("tensor") if isinstance(got, DecodedTensor) else _what(got)
        return fail(tr("expected {wanted}, got {got}", wanted=wanted, got=what), hint,
                    tr("the result has the wrong type"))
    numbers = (int, float)
    if type(got) is type(want) or (type(got) in numbers and type(want) in numbers):
        return PASS if got == want else fail(tr("the answer is wrong"), hint)
    return fail(tr("expected {wanted}, got {got}", wanted=wanted, got=type(got).__name__), hint,
                tr("the result has the wrong type"))


def is_true(got, hint: str = "") -> Verdict:
    if got is True:
        return PASS
    if got is False:
        return fail(tr("condition does not hold"), hint)
    return fail(tr("expected a plain True/False, got {got}", got=_what(got)), hint, tr("expected a plain True/False"))


def either(names) -> str:
    """``A or B or C`` in the active language."""
    names = [str(n) for n in names]
    text = names[0] if names else ""
    for name in names[1:]:
        text = tr("{first} or {second}", first=text, second=name)
    return text


def raised(got, expected_types, match: str | None = None, hint: str = "") -> Verdict:
    """``got`` is the recorded outcome: ``{"raised": type name or None, "message": str}``."""
    if not isinstance(got, dict):
        return fail(tr("no outcome was recorded"), hint)
    name, message = got.get("raised"), got.get("message", "")
    message = message if isinstance(message, str) else ""
    wanted = either(expected_types)
    if name is not None and not isinstance(name, str):
        return fail(tr("no outcome was recorded"), hint)
    if name is not None and name not in PYTHON_NAMES and name not in expected_types:
        name = tr("an exception of its own class")  # a learner's class name is text the learner chose: never shown
    if name is None:
        return fail(tr("bad input was accepted silently; raise {wanted} with a clear message", wanted=wanted), hint)
    if name not in expected_types:
        shown = name if name in HIDDEN_EXCEPTION_NAMES else tr("another exception")
        sentence = N_("bad input raised {name}; raise {wanted} with a message that names the problem")
        return fail(tr(sentence, name=name, wanted=wanted), hint, tr(sentence, name=shown, wanted=wanted))
    if match and match.lower() not in message.lower():
        return fail(tr("the {name} message should mention '{match}'", name=name, match=match), hint)
    return PASS
