"""The grader's trust core (autograder/TRUST.md): what a learner's process says is a claim, and each decision
rests on data the trusted side can check.

Unit tests: the record wire format (dtype and shape proved by the bytes; names and notes of our own only),
the encoder reading tensors through accessors captured before learner code, the registry of check kinds,
yes/no questions rewritten so their answer never reaches the kernel, feedback with no learner text, and the
intake of hostile files and outputs. One sandbox test grades a synthetic yes/no chapter with cheats that
read the test line, answer yes to everything, or rewrite the recorder.
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
import zlib
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from attention_course import encoding, kinds
from attention_course.checks import Checks
from attention_course.encoding import MISMATCH, OWN_CLASS, DecodedTensor, decode, make_encoder, validate
from autograder import intake, trusted
from autograder.course import Course
from autograder.results import GradingResult

from .synthetic import write_chapter

ROOT = Path(__file__).resolve().parent.parent


def _record(value):
    return json.loads(json.dumps(make_encoder()(value)))


# -- the wire format --------------------------------------------------------------------------------------


@pytest.mark.unit
def test_a_bent_dtype_property_does_not_change_what_is_recorded():
    enc = make_encoder()  # captured before the "learner" patches anything, as in the kernel
    real = torch._C.TensorBase.dtype
    torch.Tensor.dtype = property(lambda self: torch.float32 if real.__get__(self) == torch.float64
                                  else real.__get__(self))
    torch.Tensor.shape = property(lambda self: torch.Size([1]))
    saved = encoding.base64, encoding.np
    encoding.base64, encoding.np = None, None  # module globals rebound: the encoder does not read them
    try:
        x = torch.arange(6, dtype=torch.float64).reshape(2, 3)
        assert x.dtype == torch.float32  # the lie works for everyone else
        rec = enc(x)
    finally:
        del torch.Tensor.dtype, torch.Tensor.shape
        encoding.base64, encoding.np = saved
    got = decode(validate(json.loads(json.dumps(rec))))
    assert isinstance(got, DecodedTensor) and got.dtype == "float64" and got.shape == (2, 3)
    assert np.array_equal(got.values, np.arange(6.0).reshape(2, 3))


@pytest.mark.unit
def test_forged_tensor_records_are_rejected_by_their_bytes():
    rec = _record(torch.arange(4, dtype=torch.float64))
    claims_float32 = json.loads(json.dumps(rec))
    claims_float32["tensor"].update(dtype="float32")  # float64 bytes claiming float32
    assert validate(claims_float32) == {"unsupported": MISMATCH}
    both_claim = json.loads(json.dumps(claims_float32))
    both_claim["tensor"]["np_dtype"] = "float32"  # 32 bytes cannot be 4 float32 values
    assert validate(both_claim) == {"unsupported": MISMATCH}
    wrong_shape = json.loads(json.dumps(rec))
    wrong_shape["tensor"]["shape"] = [2, 3]
    assert validate(wrong_shape) == {"unsupported": MISMATCH}
    odd = json.loads(json.dumps(rec))
    odd["tensor"]["dtype"] = "eJzLSM3JyQcABiwCFQ=="  # free text where a dtype name goes
    assert validate(odd) == {"unsupported": encoding.MALFORMED}
    assert validate(rec) == rec
    verdict = kinds.decide("close", decode(validate(claims_float32)), {"want": rec}, None)
    assert not verdict.passed and "eJz" not in verdict.message


@pytest.mark.unit
def test_names_in_records_are_ours_or_pythons():
    class eJzLSM3JyQcABiwCFQ(Exception):  # a class named with an encoded blob
        pass

    assert validate(_record(eJzLSM3JyQcABiwCFQ())) == {"unsupported": OWN_CLASS}
    assert validate({"unsupported": "tensor subclass"}) == {"unsupported": encoding.SUBCLASS}
    assert validate({"tensor": {"type": "Sneaky", "dtype": "float32"}}) == {"unsupported": encoding.SUBCLASS}
    outcome = decode(validate(_record(kinds.call_outcome(lambda: (_ for _ in ()).throw(eJzLSM3JyQcABiwCFQ("x"))))))
    verdict = kinds.decide("raises", outcome, {"types": ["ValueError"], "match": None}, None)
    assert not verdict.passed and "eJz" not in verdict.message and "its own class" in verdict.message


@pytest.mark.unit
def test_zero_dim_and_strided_tensors_keep_shape_and_values():
    for x in (torch.tensor(2.5), torch.randn(3, 4).T, torch.tensor(True), torch.ones(2, dtype=torch.bfloat16)):
        got = decode(validate(_record(x)))
        assert got.shape == tuple(x.shape)
        assert np.array_equal(got.values, x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy())


# -- the registry -----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_every_check_method_is_a_registered_kind():
    methods = {n for n in vars(Checks) if not n.startswith("_") and callable(getattr(Checks, n))}
    assert methods == set(kinds.REGISTRY)
    for spec in kinds.REGISTRY.values():
        assert spec.expected is None or spec.expected in spec.args


@pytest.mark.unit
def test_the_trusted_decision_does_not_import_torch():
    code = "import sys, autograder.trusted; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.unit
def test_equals_is_strict_and_says_nothing_of_the_answer():
    assert kinds.decide("equals", True, {"want": True}).passed
    assert kinds.decide("equals", 3, {"want": 3.0}).passed
    for got in (False, 1, "True", None, decode(validate(_record(torch.tensor(True))))):
        verdict = kinds.decide("equals", got, {"want": True})
        assert not verdict.passed and "True" not in verdict.message.replace("plain Python bool", "")


# -- yes/no answers leave the kernel ----------------------------------------------------------------------

YES_NO_TEST = '''from attention_course.checks import Checks
check = Checks("test_even")
### BEGIN HIDDEN TESTS
check.true("three", is_even(3) is False, hint="3 is odd")
check.true("eight", is_even(8) is True)
check.true("count", len([n for n in range(10) if is_even(n)]) == 5)
check.true("plain", isinstance(is_even(4), bool))
### END HIDDEN TESTS
'''


@pytest.mark.unit
def test_yes_no_questions_keep_their_answer_out_of_the_kernel():
    graded, sites = trusted.rewrite_test_cell(YES_NO_TEST, "grade")
    profile, sites2 = trusted.rewrite_test_cell(YES_NO_TEST, "profile")
    assert sites == sites2 == {1: "equals", 2: "equals", 3: "equals", 4: "true"}
    assert "is False" not in graded and "is True" not in graded and "== 5" not in graded
    assert "__ac_record__(1, 'equals', 'three', is_even(3))" in graded
    assert ".equals('three', is_even(3), False, hint='3 is odd')" in profile
    assert graded.count("\n") == YES_NO_TEST.count("\n")  # lines stay where they were


@pytest.mark.unit
def test_a_remembered_rewrite_is_the_same_and_each_caller_owns_its_sites():
    """Rewrites are memoised per text (every notebook of a class carries the same test cells): a caller that
    changes the sites it got cannot change what the next notebook gets, and an edited cell is rewritten anew."""
    first, sites = trusted.rewrite_test_cell(YES_NO_TEST, "grade", {2})
    sites[1] = "forged"
    again, sites_again = trusted.rewrite_test_cell(YES_NO_TEST, "grade", frozenset({2}))
    assert again == first and sites_again == {1: "equals", 2: "equals", 3: "equals", 4: "true"}
    assert trusted.rewrite_test_cell(YES_NO_TEST, "grade")[0] != first  # keep_want is part of the key
    edited, _ = trusted.rewrite_test_cell(YES_NO_TEST.replace("is_even(3)", "is_even(7)"), "grade", {2})
    assert "is_even(7)" in edited


# -- feedback carries trusted text only -------------------------------------------------------------------


@pytest.mark.unit
def test_feedback_never_quotes_the_learners_process():
    blob = base64.b64encode(zlib.compress(b"check.close('secret', f(x), torch.tensor([1.5]))")).decode()
    spec = {"hidden": False, "checks": []}
    passed, messages = trusted.decide_cell(spec, [], {"ename": "ValueError", "evalue": "EXFIL:" + blob}, "t")
    assert not passed and messages == ["the cell stopped with ValueError (run this test in your notebook to see "
                                       "its message)"]
    result = {"chapter": "c", "score": 0, "max_score": 1, "status": "zero", "flags": [],
              "reason": f"kernel died (the notebook broke the Python it runs in: ValueError: {blob})",
              "cells": {"t": {"score": 0, "max_score": 1, "passed": False,
                              "messages": [f"not graded: kernel died (the notebook broke the Python it runs in: "
                                           f"{blob})"]}}}
    page = trusted.feedback_html(GradingResult.of(result))
    assert blob[:12] not in page and "broke the Python it runs in" in page


# -- intake -----------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_intake_cleans_what_json_and_utf8_cannot_carry():
    deep = "x"
    for _ in range(5000):  # deeper than Python's recursion limit: the cleaner is iterative
        deep = [deep]
    value, problems = intake.clean_json({"a": deep, "b": "\ud800!", "c": float("nan")})
    assert problems == {intake.TOO_DEEP, intake.NOT_UNICODE}
    assert value["b"] == "\ufffd!" and value["c"] is None
    json.dumps(value, ensure_ascii=False).encode("utf-8")
    depth, node = 0, value["a"]
    while isinstance(node, list):
        depth, node = depth + 1, node[0]
    assert node == intake.CUT and depth == intake.MAX_DEPTH - 1


@pytest.mark.unit
def test_submissions_that_cannot_be_read_are_rejected_with_a_reason(tmp_path):
    chapter = "03_scoring_functions"
    path = tmp_path / f"{chapter}.ipynb"
    for data, reason in ((b"[" * 100_000 + b"]" * 100_000, "nested 100000 levels deep, deeper than the 64"),
                         ("{}".encode("utf-16"), "not UTF-8"), (b'{"cells": 3}', "not a notebook")):
        path.write_bytes(data)
        with pytest.raises(intake.Unusable, match=reason):
            intake.read_submission(path, chapter)
    cell = {"cell_type": "code", "source": "x = '\ud800'", "metadata": {"deep": [[[[["x"]]]]], "tags": ["\ud800"]},
            "outputs": []}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}}))
    nb, flags = intake.read_submission(path, chapter)
    assert nb.cells[0].source == "x = '\ufffd'" and dict(nb.cells[0].metadata) == {"tags": ["\ufffd"]}
    assert flags == [f"in the submitted file: {intake.NOT_UNICODE}"]


# -- a synthetic yes/no chapter through the isolated engine ----------------------------------------------

SYNTHETIC = "97_yes_no"
SETUP = "import torch\nfrom attention_course.runtime import start_chapter\ndevice = start_chapter('97_yes_no')"
SOLUTION = "def is_even(n):\n    ### BEGIN SOLUTION\n    return n % 2 == 0\n    ### END SOLUTION"
CHEATS = {
    "always-yes": "def is_even(n):\n    return True",
    # reads the calling test line and answers what it asks for
    "reads-the-test-line": ("import sys, linecache\ndef is_even(n):\n    f = sys._getframe(1)\n"
                            "    line = linecache.getline(f.f_code.co_filename, f.f_lineno)\n"
                            "    if 'is False' in line or '== False' in line:\n        return False\n"
                            "    if 'is True' in line:\n        return True\n    return n % 2 == 0 if n != 3 else True"),
    # detects the grader, then replaces the recorder so every yes/no answer recorded is True
    "rewrites-the-recorder": ("import os, sys\ndef is_even(n):\n    if os.environ.get('ATTENTION_COURSE_GRADING'):\n"
                              "        ns = sys._getframe(1).f_globals\n        real = ns.get('__ac_record__')\n"
                              "        if real is not None and not getattr(real, 'bent', False):\n"
                              "            def bent(site, kind, cid, got, *want):\n"
                              "                return real(site, kind, cid, True if kind in ('equals', 'true') else got, *want)\n"
                              "            bent.bent = True\n            ns['__ac_record__'] = bent\n"
                              "    return n % 2 == 0 if n != 3 else True"),
}


def _yes_no_course(root: Path) -> Course:
    return write_chapter(root, SYNTHETIC, [("setup", SETUP, "setup"), ("solution", SOLUTION, "is_even"),
                                           ("test", YES_NO_TEST, "test_even", 2)])


@pytest.mark.sandbox
@pytest.mark.timeout(300)
def test_yes_no_cheats_lose_the_points_the_reference_keeps(tmp_path):
    from autograder.isolation import Engine, Limits

    course = _yes_no_course(tmp_path)
    source = nbformat.read(course.source_notebook(SYNTHETIC), as_version=4)
    with Engine(course.root, Limits(cell_timeout_s=20, notebook_timeout_s=60)) as engine:
        missing = engine.missing_capabilities()
        if missing:
            pytest.fail(f"isolated grading is not available on this machine: missing {', '.join(missing)}")
        results = {}
        for name, code in {"reference": None, **CHEATS}.items():
            nb = json.loads(json.dumps(source))
            if code is not None:
                nb["cells"][1]["source"] = code
            path = tmp_path / name / f"{SYNTHETIC}.ipynb"
            path.parent.mkdir()
            path.write_text(json.dumps(nb))
            results[name] = engine.grade(SYNTHETIC, path, name)
    assert results["reference"]["score"] == 2, results["reference"]["cells"]
    for name in CHEATS:
        r = results[name]
        assert r["status"] == "graded" and r["score"] == 0, (name, r["cells"])
    for name in ("always-yes", "reads-the-test-line"):  # "3 is odd" was asked, and the answer never showed
        assert "hidden check 1: the answer is wrong. 3 is odd" in results[name]["cells"]["test_even"]["messages"]
    # rebinding the recorder during the first check is caught at once: every record of the cell is refused
    assert results["rewrites-the-recorder"]["cells"]["test_even"]["messages"] == [
        "hidden checks 1, 2, 3, 4: no result recorded by the test itself (the notebook replaced the grader's "
        "recorder?)"]


@pytest.mark.unit
def test_check_calls_must_be_top_level_code_of_the_test_cell():
    # the kernel's recorder refuses calls from anything but the cell's own top-level code (a wrapper a
    # learner swapped in), so the rewriter refuses to put a check where that would refuse it
    for body in ("def helper():\n    check.close('a', f(), 1)\nhelper()",
                 "[check.close(f'a{i}', f(), 1) for i in range(2)]",
                 "run = lambda: check.true('a', f())\nrun()"):
        with pytest.raises(trusted.TestCellNotSupported, match="inside a function"):
            trusted.rewrite_test_cell("check = Checks('x')\n" + body, "grade")
    code, _ = trusted.rewrite_test_cell("check = Checks('x')\nfor i in range(2):\n    check.close(f'a{i}', f(), 1)",
                                        "grade")
    assert "__ac_record__(1, 'close', f'a{i}', f())" in code
