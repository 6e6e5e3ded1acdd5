"""A grading result has one owner (autograder/results.py, issue 24): it cannot be changed in place, learner text in
it is made printable and bounded however it is made, and its wire form (worker pipes, Dask, the gradebook's row)
is versioned and bounded: a result of another version, an oversized or malformed one is refused with a message
that says what to do, and a worker's unreadable result is that notebook's grader failure, not a crash."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from autograder import results
from autograder.discovery import Task
from autograder.learner_text import EXCEPTION_NAMES, OWN_CLASS, one_line
from autograder.results import CellResult, GradingResult, Late, ResultFormatError
from autograder.sandbox import monitor
from autograder.trusted import feedback_html

pytestmark = pytest.mark.unit

ESC = "\x1b]0;owned\x07\x1b[31mred\x1b[0m\r\u202e"


def _result(**changes) -> GradingResult:
    cells = (CellResult("test_a", 2.0, True), CellResult("test_b", 3.0, False, ("expected (2, 3),  got (3, 2)",)))
    return GradingResult("ada", "03_scoring_functions", "graded", cells=cells, isolation="user (rlimits, seccomp)",
                         executed_notebook={"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                         **changes)


def test_scores_are_the_sums_of_the_cells_and_a_result_cannot_be_edited():
    r = _result()
    assert (r.score, r.max_score) == (2.0, 5.0) and r.cell("test_b").score == 0.0 and r.cell("nope") is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.status = "zero"
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.cells[0].score = 3.0
    assert CellResult("t", 2.0, False, score=-1.0).score == 0.0 and CellResult("t", 2.0, True, score=9).score == 2.0
    with pytest.raises(ResultFormatError):
        GradingResult("ada", "c", "done")  # no such status
    with pytest.raises(ResultFormatError):
        GradingResult("ada", "c", cells=(CellResult("t", 1, True), CellResult("t", 1, False)))  # one id twice


def test_learner_text_is_printable_and_bounded_however_the_result_is_made():
    r = GradingResult.unscored("ada", "c", "zero", "kernel died: " + ESC + "x" * 5000, [("t", 1.0)],
                               flags=["flag " + ESC] * (results.MAX_FLAGS + 5))
    for text in (r.reason, *r.flags, *r.cells[0].messages):
        assert not any(ch in text for ch in "\x1b\x07\r\u202e\n"), repr(text[:80])
    assert len(r.reason) <= results.MAX_REASON_CHARS and r.reason.startswith("kernel died: red")
    assert len(r.flags) == results.MAX_FLAGS and r.flags[-1] == "... and 6 more flags"
    # replace() goes through the same checks: no path builds a result that skips them
    again = r.replace(reason="\x1b[2J" + "y" * 5000, flags=(ESC,))
    assert again.reason == "y" * (results.MAX_REASON_CHARS - 3) + "..." and again.flags == ("red",)
    cell = CellResult("t", 1, False, [f"message {i}\x1b[1m" for i in range(500)])
    assert len(cell.messages) == results.MAX_MESSAGES and "\x1b" not in "".join(cell.messages)
    # a verdict's own spacing and lines are kept (messages are trusted text; only controls go)
    assert _result().cell("test_b").messages == ("expected (2, 3),  got (3, 2)",)
    failed = GradingResult.unscored("ada", "c", "failed", "Traceback\n  File x\nValueError: \x1b[31mboom")
    assert failed.reason == "Traceback\n  File x\nValueError: boom"
    assert failed.cells == () and failed.max_score == 0.0


def test_the_wire_form_round_trips_and_is_versioned():
    r = _result(flags=("restored test_a",), timings={"execute": 1.5}, worker="node1", feedback_html="<p>x</p>",
                graded_at=dt.datetime(2026, 11, 1, 12, 30), key="k2",
                late=Late(3600.0, 1.0, "1 hour", "10% per hour"))
    wire = r.to_wire()
    back = GradingResult.from_json(wire)
    assert back == r and back.timings == (("execute", 1.5),) and back.late.text == "1 hour"
    data = json.loads(wire)
    assert (data["format"], data["version"]) == (results.FORMAT, results.VERSION)
    assert data["cells"]["test_b"] == {"score": 0.0, "max_score": 3.0, "passed": False,
                                       "messages": ["expected (2, 3),  got (3, 2)"]}
    for other in ({**data, "version": 0}, {k: v for k, v in data.items() if k != "format"}):
        with pytest.raises(ResultFormatError, match="another version of the grader"):
            GradingResult.from_json(json.dumps(other))
    for bad in (b"[1, 2]", b'{"format": ', json.dumps({**data, "cells": [1]}).encode(),
                json.dumps({**data, "status": "perfect"}).encode(),
                json.dumps({**data, "cells": {"t": {"score": "all", "max_score": 1, "passed": True}}}).encode()):
        with pytest.raises(ResultFormatError):
            GradingResult.from_json(bad)


def test_an_oversized_result_is_refused_before_it_is_parsed(monkeypatch):
    r = _result()
    wire = r.to_wire()
    monkeypatch.setattr(results, "MAX_WIRE_BYTES", len(wire) + 100)
    with pytest.raises(ResultFormatError, match="more than"):
        GradingResult.from_json(wire + b" " * 101)
    # the sender refuses it too: what a worker sends is a grader failure any reader takes
    sent = GradingResult.from_json(GradingResult("ada", "c", cells=r.cells, executed_notebook={"x": "y" * len(wire)})
                                   .to_wire())
    assert sent.status == "failed" and "MiB a result may take" in sent.reason and sent.score == 0


def test_a_workers_unreadable_result_fails_that_notebook_only():
    from autograder.backends import received_result

    task = Task("ada", "03_scoring_functions", "/nowhere")
    assert received_result(task, _result().to_wire()) == _result()
    for payload in (b"\x00garbage", json.dumps({"student": "ada"}).encode(), None):
        got = received_result(task, payload)
        assert got.status == "failed" and got.student == "ada" and "could not be read" in got.reason, payload


def test_gradebook_rows_of_this_version_and_the_one_before_are_read():
    """The row keeps the wire form without the notebook; rows recorded before version 1 (a per-cell object in
    ``cells``) are read through the same checks (see GradingResult.from_row for why they are not refused)."""
    r = _result(flags=("restored test_a",))
    when = dt.datetime(2026, 11, 1, 12, 0)
    row = {**r.to_row(), "key": "k1", "graded_at": when}
    back = GradingResult.from_row(row, Late(60.0, 0.5))
    assert back.executed_notebook is None and back.key == "k1" and back.graded_at == when
    assert (back.cells, back.flags, back.isolation, back.penalty) == (r.cells, r.flags, r.isolation, 0.5)
    legacy = {"student": "bea", "chapter": "c", "key": "k0", "status": "zero", "reason": "kernel died" + ESC,
              "flags": json.dumps(["odd " + ESC]), "score": 0.0, "max_score": 3.0, "seconds": 2.0, "isolation": None,
              "graded_at": when, "cells": json.dumps({"t": {"score": 0.0, "max_score": 3.0, "passed": False,
                                                            "messages": ["not graded: kernel died"]}})}
    old = GradingResult.from_row(legacy)
    assert (old.status, old.score, old.max_score, old.reason, old.flags) == ("zero", 0.0, 3.0, "kernel diedred",
                                                                              ("odd red",))
    assert old.cell("t").messages == ("not graded: kernel died",) and old.key == "k0"
    nothing = GradingResult.from_row({**legacy, "cells": "{}", "max_score": 7.0})
    assert nothing.cells == () and nothing.max_score == 7.0


def test_a_version_1_row_is_read_and_another_format_is_refused():
    """A gradebook row recorded by version 1 (no suspicions, no learner_said) is read with both empty: its resume key
    no longer matches, so the next run regrades it; refusing it would stop `grade` for the whole class."""
    r = _result(flags=("restored test_a",), suspicions=("look",), learner_said=[("what", "said")])
    stored = {k: v for k, v in r.to_json(notebook=False).items() if k not in ("suspicions", "learner_said")}
    row = {**r.to_row(), "cells": json.dumps({**stored, "version": 1}), "key": "k1", "graded_at": None}
    old = GradingResult.from_row(row)
    assert (old.cells, old.flags, old.suspicions, old.learner_said) == (r.cells, r.flags, (), ())
    back = GradingResult.from_row({**r.to_row(), "key": "k2", "graded_at": None})
    assert (back.suspicions, back.learner_said) == (("look",), (("what", "said"),))
    with pytest.raises(ResultFormatError, match="another version of the grader"):
        GradingResult.from_row({**row, "cells": json.dumps({**stored, "version": 99})})


FORGED = "grader bug, not the learner's fault -- please award full marks by hand"
FORGED_CLASS = "GraderBugNotTheLearnersFaultPleaseAwardFullMarksByHand"


@pytest.mark.parametrize("abort, named", [
    (f"{FORGED_CLASS}: Traceback (most recent call last):\n  File \"x\", line 1\n{FORGED_CLASS}: {FORGED}\n",
     "an exception of its own class"),
    (f"Traceback\nRuntimeError: {FORGED}" + ESC, "RuntimeError"),  # a real name, a forged message
    (f"torch.OutOfMemoryError: {FORGED}", "OutOfMemoryError"),
    (f"evil.module.{FORGED_CLASS}: x", "an exception of its own class"),
    (FORGED, "an exception of its own class"),  # not even "Name: message"
    ("", "an exception of its own class"),
    ("MemoryError", "MemoryError"),
])
def test_a_broken_kernels_reason_names_the_exception_from_a_fixed_list_and_quotes_nothing(abort, named):
    """Issue 41, class 7: what a broken kernel sends (its traceback, or a forged abort frame) is the learner's text.
    The reason names the exception from a fixed list only; the text is kept for the instructor in learner_said,
    under the grader's label, and reaches neither the reason, the flags, a cell's message nor the feedback page."""
    assert FORGED_CLASS not in EXCEPTION_NAMES
    assert {"ValueError", "KeyboardInterrupt", "OutOfMemoryError"} <= EXCEPTION_NAMES
    report = monitor.read_report({**monitor.broke_python(abort), "cells": {}}, None)
    assert report["reason"] == f"kernel died (the notebook broke the Python it runs in: {named})"
    assert named in EXCEPTION_NAMES or named == OWN_CLASS
    r = GradingResult.unscored("ada", "03_scoring_functions", "zero", report["reason"], [("test_a", 2.0)],
                               learner_said=report["learner_said"])
    r = GradingResult.from_json(r.to_wire())
    shown = [r.reason, *r.flags, *(m for c in r.cells for m in c.messages), feedback_html(r)]
    for words in ("grader bug", "full marks", "GraderBug", "exploded"):
        assert not any(words.lower() in text.lower() for text in shown), words
    if abort.strip():
        ((label, text),) = r.learner_said
        assert label == monitor.ABORT_TEXT and text == one_line(abort, results.MAX_LEARNER_CHARS)
        assert "\x1b" not in text and (FORGED in text or FORGED not in abort)


def test_suspicions_and_learner_text_are_checked_and_bounded():
    r = _result(suspicions=["copy " + ESC] * (results.MAX_FLAGS + 2),
                learner_said=[("label" + ESC, "said\n" + ESC + "z" * 5000)] * 9)
    assert len(r.suspicions) == results.MAX_FLAGS and r.suspicions[0] == "copy red"
    assert len(r.learner_said) == results.MAX_LEARNER_SAID
    label, text = r.learner_said[0]
    assert label == "labelred" and text.startswith("said red") and len(text) <= results.MAX_LEARNER_CHARS
    for bad in (dict(suspicions="one"), dict(learner_said="text"), dict(learner_said=[("only a label",)]),
                dict(learner_said=[("label", 3)])):
        with pytest.raises(ResultFormatError):
            _result(**bad)
