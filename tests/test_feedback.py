"""Feedback a learner can act on (issue 25): a blank chapter-3 notebook's page used to say "did not run (an earlier
error stopped the cell)" once per check, dozens of times. Now it names each blank exercise with its function once,
says "not implemented yet" once, and leads with what to fix first."""
from __future__ import annotations

import html
import json
import re

import pytest

from attention_course.cells import grade_id, is_graded_test, points
from autograder import trusted
from autograder.course import Course
from autograder.results import GradingResult

COURSE = Course()
CHAPTER = "03_scoring_functions"


def _graded(source: dict) -> list[tuple[str, str]]:
    """``[(grade_id, cell source)]`` of the chapter's graded test cells."""
    return [(grade_id(c), "".join(c["source"])) for c in source["cells"] if is_graded_test(c)]


def _spec(gid: str, code: str) -> dict:
    """The cell's entry of a reference profile, as many checks as the cell calls (their kinds do not matter:
    none of them runs)."""
    calls = re.findall(r"check\.(\w+)\(\s*\"([^\"]+)\"", code)
    return {"hidden": trusted.is_hidden(code), "keep_want_sites": [],
            "checks": [{"key": f"{gid}/{cid}", "check": cid, "kind": "true", "params": {}, "site": n, "ref_got": None}
                       for n, (_, cid) in enumerate(calls, start=1)]}


def _page(errors: dict[str, dict]) -> str:
    source = json.loads(COURSE.source_notebook(CHAPTER).read_text())
    cells = {}
    for gid, code in _graded(source):
        passed, messages = trusted.decide_cell(_spec(gid, code), [], errors.get(gid), gid)
        cell = next(c for c in source["cells"] if grade_id(c) == gid)
        cells[gid] = {"score": 0.0, "max_score": points(cell), "passed": passed, "messages": messages}
    result = {"chapter": CHAPTER, "score": 0, "max_score": sum(c["max_score"] for c in cells.values()),
              "status": "graded", "flags": [], "cells": cells}
    return html.unescape(re.sub(r"<[^>]+>", "", trusted.feedback_html(GradingResult.of(result))))


@pytest.mark.unit
def test_a_blank_notebook_says_not_implemented_yet_once_and_names_every_exercise():
    source = json.loads(COURSE.source_notebook(CHAPTER).read_text())
    graded = _graded(source)
    assert sum(len(_spec(gid, code)["checks"]) for gid, code in graded) > 20, "the chapter has dozens of checks"
    page = _page({gid: {"ename": "NotImplementedError", "evalue": ""} for gid, _ in graded})
    assert "did not run" not in page
    assert page.lower().count("not implemented yet") == 1, page
    lead = page[page.index("Not implemented yet"):]
    for exercise in ("Exercise 1: masked_softmax", "Exercise 2: the four scores", "Exercise 3: AdditiveAttention",
                     "Exercise 4: scaled_dot_product_attention", "Exercise 5: dot_product_variance"):
        assert exercise in lead.split("\n", 1)[0], f"{exercise} is not named in the lead: {lead[:400]}"
    assert lead.index("Exercise 1") < lead.index("Exercise 2"), "the first blank exercise comes first"


@pytest.mark.unit
def test_the_first_real_symptom_leads_the_page():
    """Exercise 1 written but wrong (a check failed), the rest blank: the page leads with Exercise 1's symptom."""
    source = json.loads(COURSE.source_notebook(CHAPTER).read_text())
    errors = {gid: {"ename": "NotImplementedError", "evalue": ""} for gid, _ in _graded(source)
              if "masked_softmax" not in gid}
    for gid in ("test_masked_softmax_visible", "test_masked_softmax_hidden"):
        errors[gid] = {"ename": "CheckFailed", "evalue": "rows-sum-to-1: ..."}
    page = _page(errors)
    assert "Fix first: Exercise 1: masked_softmax:" in page and page.index("Fix first") < page.index("test_")
    assert page.count("did not run") == 2, "the checks an error stopped are counted once per cell"
    blank = page.split("Not implemented yet", 1)[1].split("\n", 1)[0]
    assert "Exercise 2: the four scores" in blank and "Exercise 1" not in blank
