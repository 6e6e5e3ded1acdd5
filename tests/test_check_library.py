"""The check library's decisions: right answers pass, and each kind of wrong answer fails with a message
that names its symptom and reveals no expected value."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytestmark = pytest.mark.unit
import torch

from attention_course import verdicts
from attention_course.checks import CheckFailed, Checks
from attention_course.encoding import DecodedTensor, Unsupported, decode, encode


def roundtrip(x):
    return decode(json.loads(json.dumps(encode(x))))


def test_tensors_roundtrip_exactly_with_dtype_and_device():
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bool):
        t = (torch.arange(12) % 5).to(dtype).reshape(3, 4)
        got = roundtrip(t)
        assert isinstance(got, DecodedTensor)
        assert got.dtype == str(dtype).removeprefix("torch.") and got.device == "cpu"
        assert np.array_equal(got.values, t.numpy())


def test_unknown_objects_are_recorded_by_type_name_only():
    class Rigged:
        def __eq__(self, other):
            return True

    assert roundtrip(Rigged()) == Unsupported("Rigged")
    verdict = verdicts.compare(roundtrip(Rigged()), roundtrip(torch.ones(2)))
    assert not verdict.passed and "Rigged" in verdict.message


def test_tensor_subclass_is_rejected():
    class Sneaky(torch.Tensor):
        pass

    fake = torch.ones(3).as_subclass(Sneaky)
    verdict = verdicts.compare(roundtrip(fake), roundtrip(torch.ones(3)))
    assert not verdict.passed and "subclass" in verdict.message


@pytest.mark.parametrize("got,want,symptom", [
    (torch.ones(2, 3), torch.ones(3, 2), "shape"),
    (torch.ones(3, dtype=torch.float32), torch.ones(3, dtype=torch.float64), "dtype"),
    (torch.tensor([1.0, math.nan]), torch.tensor([1.0, 2.0]), "NaN"),
    (torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 3.0], [2.0, 4.0]]), "transposed"),
    (torch.tensor([2.0, 4.0, 6.0]), torch.tensor([1.0, 2.0, 3.0]), "same factor"),
    (torch.tensor([[0.5, 0.5], [0.9, 0.9]]), torch.tensor([[0.5, 0.5], [0.5, 0.5]]), "softmax axis"),
    (torch.tensor([0.3, 0.3, 0.4]), torch.tensor([0.5, 0.5, 0.0]), "wrong"),
    (torch.zeros(3), torch.tensor([1.0, 2.0, 4.0]), "all zeros"),
])
def test_wrong_answers_fail_naming_the_symptom(got, want, symptom):
    verdict = verdicts.compare(roundtrip(got), roundtrip(want))
    assert not verdict.passed
    assert symptom in verdict.message
    for value in want.flatten().tolist():
        if value not in (0.0, 1.0):
            assert f"{value}" not in verdict.message, "expected values must not be revealed"


def test_tolerance_depends_on_dtype():
    want = torch.tensor([1.0], dtype=torch.float64)
    assert verdicts.compare(roundtrip(want + 1e-9), roundtrip(want)).passed
    assert not verdicts.compare(roundtrip(want + 1e-5), roundtrip(want)).passed
    want32 = want.float()
    assert verdicts.compare(roundtrip(want32 + 1e-5), roundtrip(want32)).passed


def test_sums_to_one_names_the_axis():
    w = torch.softmax(torch.randn(3, 4), dim=0)
    verdict = verdicts.sums_to_one(roundtrip(w), dim=-1)
    assert not verdict.passed and "wrong axis" in verdict.message
    assert verdicts.sums_to_one(roundtrip(torch.softmax(torch.randn(3, 4), dim=-1))).passed


def test_raises_requires_the_right_error_and_argument_name():
    def silent(x):
        return x

    def vague(x):
        raise ValueError("bad")

    def clear(x):
        raise ValueError("keys must have shape (..., Tk, d)")

    outcomes = {}
    for fn in (silent, vague, clear):
        check = Checks("demo")
        try:
            check.raises("r", fn, 1, match="keys")
            outcomes[fn.__name__] = "passed"
        except CheckFailed as exc:
            outcomes[fn.__name__] = str(exc)
    assert "accepted silently" in outcomes["silent"]
    assert "mention 'keys'" in outcomes["vague"]
    assert outcomes["clear"] == "passed"


def test_check_ids_must_be_unique_in_a_cell():
    check = Checks("demo")
    check.true("a", True)
    with pytest.raises(ValueError):
        check.true("a", True)


def test_true_accepts_only_a_real_bool():
    assert not verdicts.is_true(roundtrip("yes")).passed
    assert verdicts.is_true(roundtrip(True)).passed


def test_a_new_kind_with_an_expected_value_is_a_registry_row_and_a_verdict(monkeypatch):
    """Adding a kind touches attention_course/kinds.py (its row) and verdicts.py (its decision) only: the
    check library, the rewriter and the trusted decision all read the row. Here the row and the verdict are
    added for the test's duration: ``at_most`` (the learner's number is at most the expected bound)."""
    from attention_course import kinds
    from autograder import trusted

    def at_most(got, bound, hint=""):  # what would go into verdicts.py
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return verdicts.Verdict(False, f"expected a number, got {type(got).__name__}")
        return verdicts.PASS if got <= bound else verdicts.fail("the value is too large", hint)

    row = kinds.Kind("at_most", ("got", "bound"), lambda got, p, ref: at_most(got, p["bound"], p.get("hint", "")),
                     "{check_id}: small enough", expected="bound")
    monkeypatch.setitem(kinds.REGISTRY, "at_most", row)

    check = Checks("test_peak")
    check.at_most("peak", 3.0, 4.0)  # in the learner's kernel: decided at once
    with pytest.raises(CheckFailed, match="too-big: small enough: the value is too large. shrink it"):
        check.at_most("too-big", 5.0, 4.0, hint="shrink it")
    with pytest.raises(TypeError, match="takes a check id and 2 values"):
        check.at_most("no-bound", 5.0)

    cell = 'check = Checks("test_peak")\nbound = 4.0 + 0.25\ncheck.at_most("peak", peak(x), bound)\n'
    graded, sites = trusted.rewrite_test_cell(cell, "grade")
    assert sites == {1: "at_most"}
    assert "4.0" not in graded and "peak(x)" in graded  # the bound never runs in the learner's process
    profiled, _ = trusted.rewrite_test_cell(cell, "profile")
    assert "__ac_site__(1, check).at_most(" in profiled  # the reference run records the bound
    assert kinds.decide("at_most", 4.5, {"bound": 4.25}).message == "the value is too large"
    assert kinds.decide("at_most", 4.0, {"bound": 4.25}).passed


def test_an_empty_or_mistyped_answer_fails_in_the_learners_kernel_with_a_plain_message():
    """What a learner sees when the value is not even of the right kind (issue 24: ``[]`` passed every check
    whose expected value was a number)."""
    check = Checks("demo")
    with pytest.raises(CheckFailed, match="expected a Python number, got a list or tuple"):
        check.close("variance", [], 3.0)
    with pytest.raises(CheckFailed, match=r"got an empty result of shape \(0,\)"):
        check.close("all-zero", torch.zeros(0), 0.0)
    with pytest.raises(CheckFailed, match=r"result has shape \(2, >64\) but should have shape \(2, 100\)"):
        check.close("big", torch.zeros(2, 101), torch.zeros(2, 100))
    with pytest.raises(CheckFailed, match="expected a tensor, got a Python number"):
        check.close("tensor", 0.0, torch.zeros(()))
    check.close("count", 6.0, 6)  # a count compares by value
    check.close("zeros", torch.zeros(2, 3), 0.0)  # a number expected of a tensor: every entry


def test_stock_nbgrader_holds_a_value_to_the_references_form_as_the_grader_does(monkeypatch):
    """A reference-vs-learner type rule made `grade` and stock nbgrader disagree: the trusted side holds the value
    to the form of the reference's own value, a kernel only to the expected value's, so a 0-d tensor where the
    reference returns a float passed `close(x, 0.5)` under stock nbgrader and failed under `grade`. Under
    ``nbgrader autograde`` (NBGRADER_EXECUTION=autograde) the kernel now looks the reference's value up too; a
    learner's own kernel, with no solutions, keeps the expected value's form."""
    from attention_course import checks, expected

    asked = []

    def reference_form(chapter, cell, check, kind):
        asked.append((chapter, cell, check))
        assert kind == "close"
        return {"variance": 0.5, "weights": decode(encode(torch.zeros(2, 3)))}.get(check)

    monkeypatch.setattr(expected, "reference_form", reference_form)
    monkeypatch.setattr(checks, "current_chapter", lambda: "03_scoring_functions")
    monkeypatch.delenv("ATTENTION_COURSE_GRADING", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    Checks("learner").close("variance", torch.tensor(0.5), 0.5)  # the learner's kernel: no reference to ask
    assert asked == []
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    check = Checks("stock")
    with pytest.raises(CheckFailed, match="expected a Python number, got a tensor"):
        check.close("variance", torch.tensor(0.5), 0.5)
    check.close("variance-float", 0.5, 0.5)  # no recorded form: the expected value's decides
    with pytest.raises(CheckFailed, match=r"should have shape \(2, 3\)"):
        check.close("weights", torch.zeros(3, 2), 0.0)
    assert [c for _, _, c in asked] == ["variance", "variance-float", "weights"]
    assert {ch for ch, _, _ in asked} == {"03_scoring_functions"}


def test_the_reference_table_holds_no_form_at_a_self_consistency_site():
    from attention_course.expected import reference_table

    prof = {"cells": {"t": {"keep_want_sites": ["s2"], "checks": [
        {"key": "t/a", "check": "a", "kind": "close", "params": {}, "ref_got": 1.0, "site": "s1"},
        {"key": "t/b", "check": "b", "kind": "close", "params": {}, "ref_got": 1.0, "site": "s2"}]}}}
    table = reference_table(prof)
    assert (table["t/a"]["form"], table["t/b"]["form"]) == (True, False)


def test_a_check_the_grader_rewrote_to_another_kind_has_no_form_under_stock_nbgrader(monkeypatch):
    """The grader rewrites ``check.true(id, f(x) == 3)`` to ``equals(id, f(x))``, so the profile records the number
    f(x); stock nbgrader runs the cell as written and checks a bool, which that number's form would refuse (it
    failed two references, chapters 1 and 6, until this rule)."""
    from attention_course import expected

    table = {"t/count": {"kind": "equals", "got": encode(3), "form": True},
             "t/weights": {"kind": "close", "got": encode(torch.zeros(2)), "form": True},
             "t/own": {"kind": "close", "got": encode(1.0), "form": False}}
    monkeypatch.setitem(expected._loaded, "99_demo", table)
    assert expected.reference_form("99_demo", "t", "count", "true") is None
    assert expected.reference_form("99_demo", "t", "count", "equals") == 3
    assert expected.reference_form("99_demo", "t", "weights", "close").shape == (2,)
    assert expected.reference_form("99_demo", "t", "own", "close") is None  # a self-consistency site
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr("attention_course.checks.current_chapter", lambda: "99_demo")
    Checks("t").true("count", 3 == 3)  # the reference's own cell, unrewritten, passes under stock nbgrader


def test_stock_nbgrader_decides_with_the_references_expected_value_as_the_grader_does(monkeypatch):
    """Issue 43: chapter 10's DecoderBlock test compares a cached run with ``out = block(x)``, the learner's own
    output, which the trusted side replaces by the reference's. A catalogued RMSNorm mistake within the visible
    checks' tolerance (eps outside the root) then failed that check under `grade` and passed it under stock
    nbgrader (23 and 25 of 34). Under ``nbgrader autograde`` the kernel now decides with the reference's expected
    value too, except at a self-consistency site, where both keep the learner's."""
    from attention_course import expected

    table = {"t/cached": {"kind": "close", "params": {"want": encode(torch.ones(3))}, "got": encode(torch.ones(3)),
                          "form": True},
             "t/own": {"kind": "close", "params": {"want": encode(torch.ones(3))}, "got": encode(torch.ones(3)),
                       "form": False},
             "t/count": {"kind": "equals", "params": {"want": encode(3)}, "got": encode(3), "form": True}}
    monkeypatch.setitem(expected._loaded, "99_demo", table)
    monkeypatch.setattr("attention_course.checks.current_chapter", lambda: "99_demo")
    monkeypatch.delenv("ATTENTION_COURSE_GRADING", raising=False)
    learners = torch.ones(3) * 1.001  # the learner's own output, off the reference's by an upstream mistake
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    Checks("t").close("cached", learners.clone(), learners)  # the learner's kernel: consistent with itself
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(CheckFailed, match="cached"):
        Checks("t").close("cached", learners.clone(), learners)  # held to the reference's, as `grade` holds it
    Checks("t").close("own", learners.clone(), learners)  # a self-consistency site: the learner's own, as in `grade`
    Checks("t").equals("count", 3, 3)
    with pytest.raises(CheckFailed):
        Checks("t").equals("count", 4, 4)  # the reference's 3, not the kernel's 4
