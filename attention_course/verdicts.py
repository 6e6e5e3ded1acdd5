"""The decisions behind every check, as pure functions of decoded values.

:mod:`.kinds` says which of these decides which check kind. The same function decides a check twice: in the learner's kernel, for instant feedback, and in the
trusted grading process, on the values the kernel recorded against the values a clean run of the
reference produced. Nothing here imports torch or calls anything a learner could have patched.

Messages name the symptom (shape, dtype, axis, scale, NaN, mask) and never print expected values or
hidden inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .encoding import PYTHON_NAMES, SUBCLASS, DecodedTensor, Unsupported

# (rtol, atol) by dtype: float64 is held tight; float32 allows for a GPU's different summation order.
TOLERANCES = {
    "float64": (1e-6, 1e-8),
    "float32": (1e-4, 1e-5),
    "bfloat16": (2e-2, 2e-2),
    "float16": (5e-3, 5e-3),
}
_EXACT = (0.0, 0.0)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str


PASS = Verdict(True, "")


def _fail(message: str, hint: str = "") -> Verdict:
    return Verdict(False, f"{message}. {hint}".strip() if hint else message)


def _as_numbers(value):
    """A decoded value as (ndarray, dtype name, type problem or None)."""
    if isinstance(value, Unsupported):
        if value.type_name == SUBCLASS:
            return None, None, "got a tensor subclass; return a plain torch.Tensor"
        return None, None, f"got a {value.type_name}, not a tensor or number"
    if isinstance(value, DecodedTensor):
        if value.type_name not in ("Tensor", "Parameter"):
            return None, None, f"got a tensor subclass ({value.type_name}); return a plain torch.Tensor"
        if value.device == "meta":
            return None, None, "got a tensor on the meta device, which holds no values"
        return np.asarray(value.values, dtype=np.float64), value.dtype, None
    if isinstance(value, np.ndarray):
        return value.astype(np.float64), str(value.dtype), None
    if type(value) in (int, float, bool):
        return np.asarray(float(value)), "python", None
    if isinstance(value, (list, tuple)):
        try:
            return np.asarray(value, dtype=np.float64), "python", None
        except (TypeError, ValueError):
            return None, None, "got a nested sequence that is not a rectangular array of numbers"
    return None, None, f"got {type(value).__name__}, not a tensor or number"


def _symptom(got: np.ndarray, want: np.ndarray, bad: np.ndarray) -> str:
    """Why two arrays of the same shape differ, in words a learner can act on."""
    n_bad, n = int(bad.sum()), bad.size
    base = f"{n_bad} of {n} values are wrong"
    if got.ndim >= 2 and got.shape[-1] == got.shape[-2]:
        if np.allclose(np.swapaxes(got, -1, -2), want, rtol=1e-4, atol=1e-6):
            return base + "; the result looks transposed (rows and columns swapped)"
    nz = np.abs(want) > 1e-12
    if nz.any():
        ratio = got[nz] / want[nz]
        factor = ratio.flat[0]
        if (np.all(np.isfinite(ratio)) and np.allclose(ratio, factor, rtol=1e-3) and abs(factor - 1) > 1e-3
                and abs(factor) > 1e-6):
            return base + f"; every value is off by the same factor ({factor:.3g}): check the scaling"
    if not np.any(got):
        return base + "; the result is all zeros (or all False)"
    if got.ndim >= 1 and want.ndim >= 1:
        want_rows, got_rows = want.sum(-1), got.sum(-1)
        if np.allclose(want_rows, 1.0, atol=1e-4) and not np.allclose(got_rows, 1.0, atol=1e-4):
            return base + "; rows should sum to 1 but do not: check the softmax axis"
        if np.allclose(want_rows, got_rows, rtol=1e-4, atol=1e-5) and got.ndim >= 2:
            return base + "; each row has the right total but the wrong distribution"
    if n_bad and np.all(want[bad] == 0):
        return base + "; only entries that should be exactly 0 are wrong: is the mask applied?"
    return base


def compare(got, want, rtol: float | None = None, atol: float | None = None, hint: str = "",
            check_dtype: bool = True) -> Verdict:
    """Is ``got`` numerically ``want`` (shape, dtype, NaN pattern, values)?"""
    g, g_dtype, problem = _as_numbers(got)
    if problem:
        return _fail(problem, hint)
    w, w_dtype, problem = _as_numbers(want)
    if problem:  # the expectation itself is broken: the test, not the learner, is wrong
        return _fail(f"internal error: expected value is unusable ({problem})")
    if w.ndim and g.shape != w.shape:
        return _fail(f"result has shape {tuple(g.shape)} but should have shape {tuple(w.shape)}", hint)
    if check_dtype and w_dtype not in (None, "python") and g_dtype != w_dtype:
        return _fail(f"result has dtype {g_dtype} but should have dtype {w_dtype} (keep the inputs' dtype)", hint)
    dtype = w_dtype if w_dtype in TOLERANCES else (g_dtype if g_dtype in TOLERANCES else "float64")
    d_rtol, d_atol = TOLERANCES.get(dtype, TOLERANCES["float64"])
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    g_nan, w_nan = np.isnan(g), np.isnan(np.broadcast_to(w, g.shape))
    if g_nan.any() and not w_nan.any():
        return _fail(f"result contains NaN in {int(g_nan.sum())} of {g.size} places (an empty row, "
                     "an overflow, or 0/0?)", hint)
    if np.isinf(g).any() and not np.isinf(w).any():
        return _fail("result contains inf: something overflowed (subtract the maximum before exp?)", hint)
    wb = np.broadcast_to(w, g.shape)
    ok = np.isclose(g, wb, rtol=rtol, atol=atol, equal_nan=True)
    if ok.all():
        return PASS
    return _fail(_symptom(g, np.asarray(wb), ~ok), hint)


def sums_to_one(got, dim: int = -1, hint: str = "") -> Verdict:
    g, _, problem = _as_numbers(got)
    if problem:
        return _fail(problem, hint)
    if g.ndim == 0:
        return _fail("got a scalar where a tensor of weights was expected", hint)
    if np.isnan(g).any():
        return _fail("weights contain NaN", hint)
    totals = g.sum(axis=dim)
    if np.allclose(totals, 1.0, rtol=1e-4, atol=1e-5):
        if (g < -1e-7).any():
            return _fail("weights sum to 1 but some are negative", hint)
        return PASS
    other = [ax for ax in range(g.ndim) if ax != dim % g.ndim]
    for ax in other:
        if np.allclose(g.sum(axis=ax), 1.0, rtol=1e-4, atol=1e-5):
            return _fail(f"weights sum to 1 along axis {ax - g.ndim} instead of axis {dim}: "
                         "softmax was taken over the wrong axis", hint)
    return _fail(f"weights along axis {dim} must sum to 1 (they do not)", hint)


def has_shape(got, shape, hint: str = "") -> Verdict:
    g, _, problem = _as_numbers(got)
    if problem:
        return _fail(problem, hint)
    want = tuple(int(s) for s in shape)
    if tuple(g.shape) != want:
        return _fail(f"result has shape {tuple(g.shape)} but should have shape {want}", hint)
    return PASS


def is_finite(got, hint: str = "") -> Verdict:
    g, _, problem = _as_numbers(got)
    if problem:
        return _fail(problem, hint)
    if np.isnan(g).any():
        return _fail(f"result contains NaN in {int(np.isnan(g).sum())} of {g.size} places", hint)
    if np.isinf(g).any():
        return _fail("result contains inf", hint)
    return PASS


def equals(got, want, hint: str = "") -> Verdict:
    """``got`` is the plain value ``want`` (a yes/no answer, a count, a name): same type, same value.

    Ints and floats compare by value; anything else must have ``want``'s type. The message never says what
    ``want`` is (a hidden yes/no answer is one bit: naming it would give it away).
    """
    if isinstance(got, (DecodedTensor, np.ndarray, Unsupported)) or type(got) not in (bool, int, float, str,
                                                                                      type(None)):
        what = got.type_name if isinstance(got, Unsupported) else type(got).__name__
        if isinstance(got, DecodedTensor):
            what = "tensor"
        return _fail(f"expected a plain Python {type(want).__name__}, got a {what}", hint)
    numbers = (int, float)
    if type(got) is type(want) or (type(got) in numbers and type(want) in numbers):
        return PASS if got == want else _fail("the answer is wrong", hint)
    return _fail(f"expected a plain Python {type(want).__name__}, got {type(got).__name__}", hint)


def is_true(got, hint: str = "") -> Verdict:
    if got is True:
        return PASS
    if got is False:
        return _fail("condition does not hold", hint)
    return _fail(f"expected a plain True/False, got {type(got).__name__}", hint)


def raised(got, expected_types, match: str | None = None, hint: str = "") -> Verdict:
    """``got`` is the recorded outcome: ``{"raised": type name or None, "message": str}``."""
    if not isinstance(got, dict):
        return _fail("no outcome was recorded", hint)
    name, message = got.get("raised"), str(got.get("message", ""))
    wanted = " or ".join(expected_types)
    if name is not None and not isinstance(name, str):
        return _fail("no outcome was recorded", hint)
    if name is not None and name not in PYTHON_NAMES and name not in expected_types:
        name = "an exception of its own class"  # a learner's class name is text the learner chose: never shown
    if name is None:
        return _fail(f"bad input was accepted silently; raise {wanted} with a clear message", hint)
    if name not in expected_types:
        return _fail(f"bad input raised {name}; raise {wanted} with a message that names the problem", hint)
    if match and match.lower() not in message.lower():
        return _fail(f"the {name} message should mention '{match}'", hint)
    return PASS
