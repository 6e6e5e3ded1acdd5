"""Verdicts are total and strict, bounded on the trusted side, and feedback is a bounded channel (issue 24).

Property-based tests over every kind of ``attention_course.kinds.REGISTRY`` (a new row is covered the day it is
added; a row whose arguments this file cannot build fails ``test_every_kind_can_be_exercised``):

- a value of another type, dtype family, shape or size than the reference's never passes, in the trusted
  decision (the form rule of ``attention_course/verdicts.py``); in a learner's kernel, degenerate values
  (empty, 0-d NaN/inf, zero-size with huge dimensions, nested lists, bools, strings) never pass either;
- a forged record, whatever shape it claims, is decided in bounded memory and time;
- the feedback page built from forged records carries no more than the stated budget of learner-chosen bits:
  a secret written into the fields that messages quote (dimensions, counts, ratios, names, duplicates) reads
  the same on the page for every secret, and hidden checks quote nothing of the learner's value at all.
"""
from __future__ import annotations

import base64
import json
import math
import re
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from attention_course import kinds, verdicts
from attention_course.encoding import MAX_ELEMENTS, OWN_CLASS, DecodedTensor, Unsupported, decode, validate
from autograder import trusted
from autograder.results import GradingResult

pytestmark = pytest.mark.unit

# No shrinking: a failure prints its example as drawn (the machines running this suite are shared and slow).
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])


# -- values ------------------------------------------------------------------------------------------------


def tensor(values, dtype: str = "float64", device: str = "cpu", type_name: str = "Tensor") -> DecodedTensor:
    return DecodedTensor(np.asarray(values, dtype=np.dtype("float32" if dtype == "bfloat16" else dtype)),
                         dtype, device, type_name)


def empty_tensor(shape, dtype: str = "float64") -> DecodedTensor:
    return DecodedTensor(np.zeros(shape, dtype=dtype), dtype, "cpu", "Tensor")


def form_key(value):
    """The test's own statement of a value's form (independent of verdicts.form_problem)."""
    if isinstance(value, DecodedTensor):
        kind = np.dtype("float32" if value.dtype == "bfloat16" else value.dtype).kind
        return ("tensor", {"f": "float", "i": "int", "u": "int", "b": "bool", "c": "complex"}[kind], value.shape)
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.kind.replace("u", "i"), value.shape)
    if type(value) in (int, float):
        return ("number",)
    if type(value) in (list, tuple):
        return ("sequence", tuple(form_key(v) for v in value))
    return (type(value).__name__,)


float_dtypes = st.sampled_from(["float64", "float32"])


@st.composite
def float_tensors(draw, min_size: int = 1):
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple))
    dtype = draw(float_dtypes)
    values = draw(st.lists(st.floats(-3, 3), min_size=math.prod(shape), max_size=math.prod(shape)))
    return tensor(np.reshape(values, shape), dtype)


# Values a cheat returns in place of an answer: empty, 0-d, NaN, inf, zero-size with huge dimensions, nested
# lists, bools, strings, and values of every category.
DEGENERATE = [
    [], (), [[]], [[[]]], [[], []], [1.0, [2.0]], "", "0.5", None, {}, {"raised": None}, True, False,
    math.nan, math.inf, -math.inf,
    tensor(math.nan), tensor(math.inf), tensor([]), empty_tensor((0,)), empty_tensor((3, 0)),
    empty_tensor((0, 4)), empty_tensor((1000, 1000, 0)), empty_tensor((0, 1000, 1000)),
    tensor([[math.nan]]), tensor(True, "bool"), tensor([1, 0], "bool"), np.zeros((0,)),
    DecodedTensor(np.broadcast_to(np.zeros(()), (3, 4)), "float64", "meta", "Tensor"),
    tensor([1.0, 2.0], type_name="Sneaky"), Unsupported("tensor subclass"), Unsupported(OWN_CLASS),
    Unsupported("function"),
]


def degenerate_or_other(like):
    """Values whose form differs from ``like``'s: the degenerate ones, plus reshaped and retyped copies."""
    out = [v for v in DEGENERATE if form_key(v) != form_key(like)]
    if isinstance(like, DecodedTensor):
        vals = like.values
        out += [tensor(vals.reshape(-1)) if vals.ndim > 1 else tensor(vals.reshape(1, -1)),
                tensor(vals.astype(np.int64), "int64"), tensor(vals != 0, "bool"),
                vals.astype(np.float64), vals.tolist(), float(vals.flat[0]) if vals.size else 0.0,
                tensor(vals.reshape(-1)[:-1]) if vals.size else tensor([0.0]),
                tensor(np.concatenate([vals.reshape(-1), vals.reshape(-1)]))]
    return [v for v in out if form_key(v) != form_key(like)]


# -- parameters of every kind --------------------------------------------------------------------------------

def reference_value(kind: kinds.Kind, draw):
    """A value the reference could record for a check of this kind."""
    if kind.calls:
        return {"raised": draw(st.sampled_from(["ValueError", "TypeError"])), "message": "keys must match"}
    if kind.name == "true":
        return True
    if kind.name == "equals":
        return draw(st.one_of(st.integers(-5, 5), st.booleans(), st.sampled_from(["sum", "mean"])))
    value = draw(float_tensors())
    if kind.name == "sums_to_one":
        e = np.exp(value.values)
        return tensor(e / e.sum(-1, keepdims=True), value.dtype)
    if kind.name in ("close", "matches_reference"):
        return draw(st.one_of(st.just(value), st.floats(-3, 3), st.integers(0, 100),
                              st.lists(st.integers(0, 9), min_size=1, max_size=4)))
    return value


def params_for(kind: kinds.Kind, ref) -> dict:
    """The trusted parameters of a check whose reference value is ``ref`` (it passes them)."""
    params = {"hint": ""}
    for arg in kind.args[1:]:
        if arg == kind.expected:
            params[arg] = ref
        elif arg == "shape":
            params[arg] = list(ref.shape)
        else:
            raise AssertionError(f"kind {kind.name!r}: this test does not know how to build its argument {arg!r}; "
                                 "add it to params_for")
    for option in kind.options:
        params[option] = {"types": [ref["raised"]] if isinstance(ref, dict) else ["ValueError"], "match": None,
                          "dim": -1}.get(option)
    return params


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_kind_can_be_exercised(data):
    """Every row of the registry gets parameters here and its reference value passes, in the trusted decision
    and in a kernel (a positive control: the failures below are failures of the cheat, not of the set-up)."""
    for kind in kinds.REGISTRY.values():
        ref = reference_value(kind, data.draw)
        reference = ref if kind.needs_reference else None
        verdict = kinds.decide(kind.name, ref, params_for(kind, ref), reference, ref)
        assert verdict.passed, (kind.name, verdict.message)
        assert kinds.decide(kind.name, ref, params_for(kind, ref), reference).passed, kind.name


# -- strict -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(kinds.REGISTRY))
@SETTINGS
@given(data=st.data())
def test_a_value_of_another_form_never_passes_the_trusted_decision(name, data):
    kind = kinds.REGISTRY[name]
    ref = reference_value(kind, data.draw)
    params = params_for(kind, ref)
    reference = ref if kind.needs_reference else None
    assert kinds.decide(name, ref, params, reference, ref).passed, "the reference's own value must pass"
    for got in degenerate_or_other(ref):
        verdict = kinds.decide(name, got, params, reference, ref)
        assert not verdict.passed, (name, ref, got)
        assert verdict.message and verdict.hidden_message


@pytest.mark.parametrize("name", sorted(kinds.REGISTRY))
@SETTINGS
@given(data=st.data())
def test_degenerate_values_never_pass_in_the_kernel(name, data):
    """No reference in a learner's kernel (stock nbgrader decides there): the expected value's form decides,
    and an empty or non-numeric value is never close to a number."""
    kind = kinds.REGISTRY[name]
    ref = reference_value(kind, data.draw)
    params = params_for(kind, ref)
    reference = ref if kind.needs_reference else None
    for got in DEGENERATE:
        if form_key(got) == form_key(ref) or (kind.calls and isinstance(got, dict)):
            continue
        if "shape" in params and getattr(got, "shape", None) == tuple(params["shape"]) and got.device != "meta":
            continue  # a kernel's shape check knows a shape, not a dtype (the trusted side holds the dtype too)
        verdict = kinds.decide(name, got, params, reference)
        assert not verdict.passed, (name, ref, got)


def test_the_audit_cases_fail():
    """The examination's cases: ``[]``/``()`` as a variance (a float) and as a parameter count (an int)."""
    for got in ([], (), empty_tensor((0,)), empty_tensor((5, 0, 7))):
        for want in (7.0, 1.0, 124):
            assert not verdicts.compare(got, want).passed
            assert not kinds.decide("close", got, {"want": want}, None, want).passed
            assert not kinds.decide("matches_reference", got, {}, want, want).passed
    # a 0-d tensor where the reference returns a Python number, and the other way round
    assert not kinds.decide("close", tensor(7.0), {"want": 7.0}, None, 7.0).passed
    assert not kinds.decide("close", 7.0, {"want": tensor(7.0)}, None, tensor(7.0)).passed
    # what the course's reference legitimately does: a count as int or float, a tensor compared with 0.0
    assert kinds.decide("close", 6.0, {"want": 6}, None, 6).passed
    zeros = tensor(np.zeros((2, 3)))
    assert kinds.decide("close", zeros, {"want": 0.0}, None, zeros).passed
    assert not kinds.decide("close", tensor(np.zeros((3, 2))), {"want": 0.0}, None, zeros).passed


# -- bounded ---------------------------------------------------------------------------------------------------

HUGE_CLAIMS = [
    {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": [15000, 15000, 0], "device": "cpu",
                "type": "Tensor", "b64": ""}},
    {"tensor": {"dtype": "float32", "np_dtype": "float32", "shape": [0, 15000, 15000], "device": "cpu",
                "type": "Tensor", "b64": ""}},
    {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": [1000, 1000, 0], "device": "cpu",
                "type": "Tensor", "b64": ""}},  # at the cap: accepted, still cheap
    {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": [15000, 15000], "device": "meta",
                "type": "Tensor", "b64": ""}},
    {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": [1000, 1000], "device": "meta",
                "type": "Tensor", "b64": ""}},
    {"array": {"dtype": "float64", "shape": [15000, 15000, 0], "b64": ""}},
    {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": [2] * 32 + [0], "device": "cpu",
                "type": "Tensor", "b64": ""}},
    {"seq": [{"seq": [{"plain": 1}] * 1000}] * 20},  # 20,000 items: memory in proportion to its bytes
]


def test_claimed_extent_is_capped():
    for rec in HUGE_CLAIMS[:2] + HUGE_CLAIMS[3:4] + HUGE_CLAIMS[5:7]:
        assert "unsupported" in validate(rec), rec
    assert "tensor" in validate(HUGE_CLAIMS[2])


@pytest.mark.parametrize("name", sorted(kinds.REGISTRY))
@settings(max_examples=1, deadline=None, phases=[Phase.generate])
@given(data=st.data())
def test_forged_records_are_decided_in_bounded_memory_and_time(name, data):
    """Whatever shape a record claims, its decision (validate, decode, verdict) stays under 64 MB plus 30 bytes
    per byte of the record's JSON (a parsed record's own Python objects are that large), and 5 s (a
    (15000, 15000, 0) claim of 0 bytes once allocated 3.7 GB and took 17 s in sums_to_one)."""
    kind = kinds.REGISTRY[name]
    refs = [reference_value(kind, data.draw)]
    for rec in HUGE_CLAIMS:
        for ref in refs:
            params = params_for(kind, ref)
            if kind.name == "shape":
                params["shape"] = [1000, 1000, 0]

            def run():
                got = decode(validate(rec))
                for like in (ref, None):
                    verdict = kinds.decide(name, got, params, ref if kind.needs_reference else None, like)
                    if like is not None:
                        assert not verdict.passed

            start = time.perf_counter()  # timed apart from the memory measurement, which slows Python down
            run()
            elapsed = time.perf_counter() - start
            tracemalloc.start()
            try:
                run()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert peak < 64 * 2**20 + 30 * len(json.dumps(rec)), (name, str(rec)[:300], peak)
            assert elapsed < 5.0, (name, elapsed)


@SETTINGS
@given(shape=st.lists(st.integers(0, MAX_ELEMENTS), min_size=0, max_size=40))
def test_any_claimed_shape_is_refused_or_within_the_cap(shape):
    rec = {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": shape, "device": "cpu", "type": "Tensor",
                      "b64": ""}}
    out = validate(rec)
    if "tensor" in out:
        assert math.prod(max(s, 1) for s in shape) <= MAX_ELEMENTS and len(shape) <= 32


# -- the feedback budget ---------------------------------------------------------------------------------------

SHAPE_TEXT = re.compile(r"\((?:(?:\d|[1-5]\d|6[0-4]|>64)(?:, (?:\d|[1-5]\d|6[0-4]|>64)){0,3},?)?\)"
                        r"|\(more than 4 dimensions\)")


@SETTINGS
@given(shape=st.lists(st.integers(0, 10**6), max_size=40), n=st.integers(0, 10**7),
       x=st.floats(allow_nan=True, allow_infinity=True))
def test_quantisers_have_small_fixed_codomains(shape, n, x):
    assert SHAPE_TEXT.fullmatch(verdicts.shape_text(shape))
    assert re.fullmatch(r"\d|[1-5]\d|6[0-4]|more than 64", verdicts.count_text(n))
    text = verdicts.number_text(x)
    assert text in ("not a finite number", "about 0", "more than 1000 in size") or re.fullmatch(
        r"-?(\d{1,3}|\d\.\d{1,2}|\d\d\.\d|0\.\d{1,5}|\d(\.\d{1,2})?e[+-]\d\d)", text), text


def test_the_stated_budget_covers_the_quantisers():
    """Worst case of one visible message: one shape (or two counts and a number) on top of its sentence."""
    per_dim = verdicts.SHOWN_MAX + 2  # 0..64 and ">64"
    shapes = sum(per_dim ** k for k in range(verdicts.SHOWN_DIMS + 1)) + 1
    counts = verdicts.SHOWN_MAX + 2
    numbers = 900 * 6 * 2 + 3  # 3 significant digits over 6 decades, a sign; three words
    names = len(verdicts.PYTHON_NAMES) + 20  # Python's own type names, our notes and categories
    sentences = 64
    worst = max(math.log2(shapes), 2 * math.log2(counts) + math.log2(numbers), math.log2(names))
    assert worst + math.log2(sentences) <= verdicts.FEEDBACK_BITS
    # measured: one dimension can be made to say no more than its 66 texts
    assert len({verdicts.shape_text((d,)) for d in range(0, 5000)}) == per_dim
    assert len({verdicts.shape_text((2, 3, 4, 5) + tail) for tail in [(), (1,), (9, 9), (70,) * 20]}) == 2
    assert len(verdicts.HIDDEN_EXCEPTION_NAMES) <= 8
    assert math.log2(sentences) + math.log2(8 + 1) <= verdicts.HIDDEN_FEEDBACK_BITS
    # the sentences: every failure a verdict can state, and the decision's own (counted from the source)
    source = Path(verdicts.__file__).read_text() + Path(trusted.__file__).read_text()
    assert len(re.findall(r"\bfail\(|\bmore = |failures\.append\(|messages\.append\(", source)) < sentences


def _forged_tensor_record(values: np.ndarray, dtype: str = "float64") -> dict:
    values = np.ascontiguousarray(values, dtype=dtype)
    return {"tensor": {"dtype": dtype, "np_dtype": dtype, "shape": list(values.shape), "device": "cpu",
                       "type": "Tensor", "b64": base64.b64encode(values.tobytes()).decode("ascii")}}


def _spec(hidden: bool, grade_id: str) -> dict:
    """A test cell with one check of every shape a message quotes."""
    ref = np.arange(1.0, 13.0).reshape(3, 4)
    soft = np.full((3, 4), 0.25)
    ref_rec = _forged_tensor_record(ref)
    checks = [
        ("values", "close", {"want": ref_rec, "hint": ""}, ref_rec),
        ("count", "close", {"want": {"plain": 124}, "hint": ""}, {"plain": 124}),
        ("weights", "sums_to_one", {"dim": -1, "hint": ""}, _forged_tensor_record(soft)),
        ("shape", "shape", {"shape": [3, 4], "hint": ""}, ref_rec),
        ("finite", "finite", {"hint": ""}, ref_rec),
        ("matches", "matches_reference", {"hint": ""}, ref_rec),
        ("answer", "equals", {"want": {"plain": 3}, "hint": ""}, {"plain": 3}),
        ("flag", "true", {"hint": ""}, {"plain": True}),
        ("rejects", "raises", {"types": ["ValueError"], "match": "keys", "hint": ""},
         {"map": {"raised": {"plain": "ValueError"}, "message": {"plain": "keys"}}}),
        ("dup", "finite", {"hint": ""}, ref_rec),
    ]
    assert {kind for _, kind, _, _ in checks} == set(kinds.REGISTRY), "a new kind: add a check of it here"
    return {"hidden": hidden, "keep_want_sites": [], "checks": [
        {"key": f"{grade_id}/{cid}", "check": cid, "kind": kind, "site": n, "params": params, "ref_got": ref_got}
        for n, (cid, kind, params, ref_got) in enumerate(checks, start=1)]}


def _forge(secret: bytes, grade_id: str, small: bool) -> tuple[list[dict], dict]:
    """Records and an error that write ``secret`` into every field a message could quote.

    ``small``: also through the fields a visible message may quote within its budget (dimensions up to 64,
    dtypes, Python's own type and exception names), which a hidden message must not quote at all.
    """
    b = list(secret) + [0] * 8
    ref = np.arange(1.0, 13.0).reshape(3, 4)
    # (small dimensions never (3, 4): which symptom a check shows is the learner's choice, the quotes are not)
    shape = (b[0] % 60 + 5, b[1] % 60 + 5) if small else (0, 100 + b[0], 100 + b[1])
    tail = (0, 2, 2, 2, 2 + b[2] % 30, 1 + b[3] % 30)
    factor = 2.0 + (b[4] + 256 * b[5]) * 1e-9  # the digits past the third
    nans = ref.copy()
    nans.flat[: 1 + b[6] % 12 if small else 1] = np.nan
    dtype = ["int64", "int32", "int16", "uint8"][b[7] % 4] if small else "float64"  # one family: one symptom
    names = sorted(verdicts.PYTHON_NAMES - set(verdicts.HIDDEN_EXCEPTION_NAMES) - {"ValueError"})
    name = names[b[0] % len(names)] if small else "SECRET" + secret.hex()
    ename = [n for n in names if n.endswith("Error") and n not in verdicts.HIDDEN_EXCEPTION_NAMES]
    recs = {
        "values": _forged_tensor_record(ref * factor),
        "count": _forged_tensor_record(np.zeros(shape)),
        "weights": _forged_tensor_record(np.zeros(tail)),
        "shape": _forged_tensor_record(np.zeros(shape), dtype),
        "finite": _forged_tensor_record(nans),
        "matches": _forged_tensor_record(np.zeros((3, 4)), dtype),
        "answer": {"unsupported": name},
        "flag": {"unsupported": name},
        "rejects": {"map": {"raised": {"plain": name}, "message": {"plain": secret.hex()}}},
    }
    records = [{"cell": grade_id, "check": cid, "got": rec} for cid, rec in recs.items()]
    records += [{"cell": grade_id, "check": "dup", "got": recs["finite"]}] * (2 + b[3])
    error = {"ename": ename[b[1] % len(ename)] if small else name, "evalue": secret.hex()}
    return records, error


def _page(secret: bytes, small: bool) -> str:
    cells = {}
    for grade_id, hidden in (("test_visible", False), ("test_hidden", True)):
        if small and not hidden:
            continue
        records, error = _forge(secret, grade_id, small)
        passed, messages = trusted.decide_cell(_spec(hidden, grade_id), records, error, grade_id)
        cells[grade_id] = {"passed": passed, "messages": messages, "score": 0, "max_score": 1}
    return trusted.feedback_html(GradingResult.of({"chapter": "99_demo", "score": 0, "max_score": 2,
                                                   "status": "graded", "reason": "", "flags": [], "cells": cells}))


@SETTINGS
@given(a=st.binary(min_size=8, max_size=16), b=st.binary(min_size=8, max_size=16))
def test_a_secret_written_past_the_budget_reads_the_same_on_the_feedback_page(a, b):
    """Dimensions above 64, dimensions past the fourth, digits past the third, duplicate counts, class names
    of the learner's own, exception texts: the page is the same for any two secrets."""
    page = _page(a, small=False)
    assert page == _page(b, small=False)
    assert "SECRET" not in page and a.hex() not in page


@SETTINGS
@given(a=st.binary(min_size=8, max_size=16), b=st.binary(min_size=8, max_size=16))
def test_hidden_checks_quote_nothing_of_the_learners_value(a, b):
    """Within the visible budget too (small dimensions, dtypes, Python's own names): a hidden cell's messages
    are the same for any two secrets."""
    assert _page(a, small=True) == _page(b, small=True)


def test_visible_messages_still_name_the_symptom():
    """The budget keeps feedback useful: the visible page says what is wrong, with small shapes exact."""
    records, _ = _forge(bytes([2, 3, 0, 0, 0, 0, 4, 1]), "test_visible", small=True)
    _, messages = trusted.decide_cell(_spec(False, "test_visible"), records, None, "test_visible")
    text = " | ".join(messages)
    assert "shape: result has shape (7, 8) but should have shape (3, 4)" in text
    assert "values: 12 of 12 values are wrong; every value is off by the same factor (2): check the scaling" in text
    assert "finite: result contains NaN in 5 of 12 places" in text
    assert "matches: result has dtype int32 but should have a float dtype" in text
    assert "dup: recorded more than once; the notebook emitted a fake check record" in text
    assert "count: expected a Python number, got a tensor" in text
