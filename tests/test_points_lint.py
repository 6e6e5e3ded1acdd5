"""Points only from reference values (issue 24): every graded test cell of every chapter earns its points
through at least one check whose expected value the learner's process never holds.

The rule is :mod:`autograder.points_lint`; it reads each chapter's source notebook and its reference
profile (the one reference run, with the re-seeded and re-initialised runs that tell reference values from
self-consistency ones), so chapters added later are covered the day they are written. The unit tests below
pin the rule on small profiles shaped like the ones the engine writes, including the two cells of chapter 8
the security examination gamed (a model with no attention that writes the reversed source into its logits,
and an AST transformer that makes every ``true`` record True).
"""
from __future__ import annotations

import nbformat
import pytest

from attention_course.encoding import encode
from autograder.course import Course
from autograder.isolation import cached_profile
from autograder.points_lint import PROPERTY_KINDS, cell_trust, violations

COURSE = Course()


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter", COURSE.chapters())
def test_every_graded_cell_earns_points_from_reference_values(engine_profiles, chapter):
    profile = cached_profile(COURSE, chapter)
    assert profile is not None, f"no reference profile for {chapter} in {engine_profiles}"
    source = nbformat.read(COURSE.source_notebook(chapter), as_version=4)
    bad = violations(source, profile)
    assert not bad, "\n".join(v.describe() for v in bad)


def _check(name, kind, site, want=None):
    params = {"hint": ""}
    if want is not None:
        params["want"] = encode(want)
    return {"key": f"cell/{name}", "check": name, "kind": kind, "site": site, "params": params, "ref_got": encode(0)}


def _spec(checks, keep=(), conservative=False):
    return {"checks": checks, "keep_want_sites": list(keep), "conservative": conservative}


@pytest.mark.unit
def test_property_kinds_are_the_kinds_without_an_expected_value():
    assert PROPERTY_KINDS == {"true", "shape", "sums_to_one", "finite", "raises"}


@pytest.mark.unit
def test_chapter_8_model_and_training_cells_as_they_were_fail_the_rule():
    # test_model_hidden before issue 24: stack sizes (true), shapes, "no future leak" and "padding ignored"
    # compared the model with itself (kept in the kernel), "reads the source" (true), too long rejected.
    model = _spec([_check("stacks", "true", 1), _check("shape", "shape", 2), _check("no-future", "close", 3, 0.0),
                   _check("reads-source", "true", 4), _check("padding-ignored", "close", 5, 0.0),
                   _check("too-long", "raises", 6)], keep=(3, 5))
    # test_train_hidden before issue 24: three true checks on numbers the learner's process computed.
    train = _spec([_check("loss-history", "true", 1), _check("final-loss-low", "true", 2),
                   _check("held-out-accuracy-99", "true", 3)])
    for gid, spec in (("test_model_hidden", model), ("test_train_hidden", train)):
        trust = cell_trust(gid, 3, spec)
        assert not trust.earns_honestly and trust.trusted == ()
        assert gid in trust.describe() and "no check with a reference value" in trust.describe()


@pytest.mark.unit
def test_reference_values_earn_points():
    assert cell_trust("c", 2, _spec([_check("shape", "shape", 1), _check("ref", "matches_reference", 2)])).trusted \
        == ("ref",)
    # a close whose expected value did not move between the reference runs is taken from the reference
    assert cell_trust("c", 2, _spec([_check("torch", "close", 1, 1.5)])).trusted == ("torch",)
    # yes/no questions with both answers: a recorder that answers one thing to everything fails some
    both = _spec([_check("leaks", "equals", 1, True), _check("causal", "equals", 2, False)])
    assert cell_trust("c", 2, both).trusted == ("leaks", "causal")
    # a count is a value, not a yes/no question
    assert cell_trust("c", 1, _spec([_check("count", "equals", 1, 3)])).trusted == ("count",)


@pytest.mark.unit
def test_claims_do_not_earn_points():
    kept = _spec([_check("self", "close", 1, 0.0), _check("own", "equals", 2, 4)], keep=(1, 2))
    assert not cell_trust("c", 1, kept).earns_honestly
    conservative = _spec([_check("a", "close", 1, 0.0), _check("b", "equals", 2, 3)], conservative=True)
    assert not cell_trust("c", 1, conservative).earns_honestly
    same_answer = _spec([_check("eval-mode", "equals", 1, False), _check("no-graph", "equals", 2, False)])
    assert not cell_trust("c", 1, same_answer).earns_honestly
    properties = _spec([_check(k, k, n) for n, k in enumerate(sorted(PROPERTY_KINDS), start=1)])
    assert not cell_trust("c", 1, properties).earns_honestly
    # a cell worth nothing is not charged
    assert cell_trust("c", 0, properties).earns_honestly


@pytest.mark.unit
def test_a_cell_missing_from_the_profile_is_a_violation():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("pass")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_x", "points": 1, "solution": False}
    nb.cells.append(cell)
    (bad,) = violations(nb, {"cells": {}})
    assert bad.grade_id == "test_x" and "not in the reference profile" in bad.describe()
