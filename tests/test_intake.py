"""The intake of a submitted file within budgets (issue 41, class 5; autograder/bounded_json.py, autograder/intake.py).

A hostile file is refused with a reason, never parsed past a budget, and the trusted side spends a small multiple of
the file's size on it; an honest notebook of every chapter comes through with exactly what grading reads; the
metadata is cut to safe_output's allow-list before anything copies it, and structure.repair copies no learner cell
deeply.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from attention_course.cells import grade_id
from autograder import bounded_json, intake, safe_output, structure
from autograder.course import Course

from .peak_memory import VMHWM, peak

ROOT = Path(__file__).resolve().parent.parent
COURSE = Course(ROOT)
CHAPTER = "03_scoring_functions"
MB = 1 << 20


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / f"{CHAPTER}.ipynb"
    path.write_bytes(data)
    return path


def _reference_json() -> dict:
    return json.loads(COURSE.release_notebook(CHAPTER).read_text())


def _with_metadata(value_json: bytes) -> bytes:
    """The release of chapter 3 with ``value_json`` (raw JSON text) as its notebook metadata's ``x``."""
    data = _reference_json()
    data["metadata"]["x"] = "@@X@@"
    return json.dumps(data).encode().replace(b'"@@X@@"', value_json)


def _refusal(path: Path, **budget) -> str:
    with pytest.raises(intake.Unusable) as exc:
        intake.read_submission(path, CHAPTER, **({"budget": replace(intake.BUDGET, **budget)} if budget else {}))
    return str(exc.value)


# -- budgets ----------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_a_file_past_the_value_budget_is_refused_before_it_is_parsed(tmp_path):
    bomb = b"[" + b"[]," * (5 * MB // 3) + b"[]]"  # 5 MB, 1.7 million empty lists
    reason = _refusal(_write(tmp_path, _with_metadata(bomb)))
    assert "JSON values, more than the 500000 a notebook may hold" in reason
    # the same values as short strings (each one counted before any is built), and as a flat object
    strings = b"[" + b'"",' * (2 * MB) + b'""]'
    assert "JSON values" in _refusal(_write(tmp_path, _with_metadata(strings)))
    pairs = b"{" + b",".join(b'"%d":0' % i for i in range(300_000)) + b"}"
    assert "JSON values" in _refusal(_write(tmp_path, _with_metadata(pairs)))


@pytest.mark.unit
def test_a_file_past_the_depth_budget_is_refused_with_its_depth(tmp_path):
    deep = "bottom"
    for _ in range(600):
        deep = {"down": deep}
    data = _reference_json()
    data["metadata"]["deep"] = deep
    reason = _refusal(_write(tmp_path, json.dumps(data).encode()))
    assert reason == "the file's JSON is nested 602 levels deep, deeper than the 64 a notebook may be"
    # deeper than any JSON reader goes: the same reason, measured without a parse
    assert "nested 200000 levels deep" in _refusal(_write(tmp_path, b"[" * 200_000 + b"]" * 200_000))


@pytest.mark.unit
def test_cells_and_their_text_have_budgets(tmp_path):
    data = _reference_json()
    data["cells"][0]["source"] = "x" * (intake.BUDGET.max_cell_chars + 1)
    assert "a cell's text is 1048577 characters long" in _refusal(_write(tmp_path, json.dumps(data).encode()))
    data = _reference_json()
    data["cells"] = data["cells"] * 30  # over 1,000 cells
    assert "cells, more than the 1000 a notebook may have" in _refusal(_write(tmp_path, json.dumps(data).encode()))
    data = _reference_json()
    data["cells"][0]["metadata"]["tags"] = [""] * 20_000  # 60 KB of file, 20,000 values the trusted side builds
    assert "metadata holds 20" in _refusal(_write(tmp_path, json.dumps(data).encode()))


@pytest.mark.unit
def test_a_file_whose_parse_needs_more_than_the_childs_memory_is_refused(tmp_path):
    # within every budget but memory: 40 MB of strings, each 2 MB, in a code cell's outputs
    data = _reference_json()
    data["cells"][0].setdefault("outputs", []).append(
        {"output_type": "stream", "name": "stdout", "text": ["y" * (2 * MB) for _ in range(20)]})
    path = _write(tmp_path, json.dumps(data).encode())
    reason = _refusal(path, memory_bytes=24 * MB)
    assert reason == "the file could not be read within the grader's memory limit (24 MiB)"
    nb, flags = intake.read_submission(path, CHAPTER)  # the course's budget reads it, outputs dropped
    assert flags == [] and all(not c.get("outputs") for c in nb.cells)


@pytest.mark.unit
def test_a_reader_past_its_wall_clock_is_a_refusal(tmp_path):
    """A child the parent stops waiting for (here a clock already run out, so no race) is killed: a refusal."""
    path = _write(tmp_path, COURSE.release_notebook(CHAPTER).read_bytes())
    assert _refusal(path, wall_s=0) == "the file could not be read within the grader's time limit (0 s)"


@pytest.mark.unit
def test_the_scan_counts_what_the_parse_would_build():
    """bounded_json.scan measures values, depth and the longest string of the raw bytes as a parse sees them:
    escaped quotes and backslashes, strings that look like brackets, empty containers, whitespace, keys."""
    def walk(value, depth=1):
        if isinstance(value, dict):
            inner = [walk(v, depth + 1) for v in value.values()]
            return 1 + len(value) + sum(n for n, _ in inner), max([depth] + [d for _, d in inner])
        if isinstance(value, list):
            inner = [walk(v, depth + 1) for v in value]
            return 1 + sum(n for n, _ in inner), max([depth] + [d for _, d in inner])
        return 1, depth - 1

    docs = ['[]', '{}', '[[]]', '[""]', '["[{"]', '{"a\\"]": [1, 2.5e3, true, null]}', '["\\\\", "\\\\\\"", "a\\\\"]',
            '{"k": {"k": {"k": []}}, "l": [{}, {}, [[], [""]]]}', ' [ 1 , { "x" : "}" } ] ', '"just a string"', '7',
            json.dumps({"cells": [{"source": ["a\n", "\\\"b\"\n"], "metadata": {"tags": ["x", "y"]}}]}, indent=1)]
    docs += [p.read_text() for p in (COURSE.release_notebook(CHAPTER), COURSE.source_notebook("10_language_model"))]
    for doc in docs:
        shape = bounded_json.scan(doc.encode(), intake.BUDGET)
        values, depth = walk(json.loads(doc))
        assert (shape.values, shape.depth) == (values, depth), doc[:80]
    assert bounded_json.scan(b'["ab\\"c", "\\u00e9"]', intake.BUDGET).longest_string == 6


# -- what the intake keeps --------------------------------------------------------------------------------------


def _what_grading_reads(cell) -> tuple:
    meta = cell.get("metadata", {})
    return (cell["cell_type"], cell.get("id"), "".join(cell["source"]) if isinstance(cell["source"], list)
            else cell["source"], meta.get("nbgrader"), meta.get("tags"), meta.get("editable"), meta.get("deletable"))


@pytest.mark.unit
@pytest.mark.parametrize("chapter", COURSE.chapters())
def test_honest_notebooks_come_through_with_exactly_what_grading_reads(tmp_path, chapter):
    """The release (with its outputs) and the solution notebook of every chapter, as a learner hands them in:
    accepted, no flag, every cell's type, id, text and allow-listed metadata unchanged, nothing else kept."""
    for original in (COURSE.release_notebook(chapter), COURSE.source_notebook(chapter)):
        path = tmp_path / original.parent.parent.name / f"{chapter}.ipynb"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(original.read_bytes())
        want = json.loads(original.read_text())
        nb, flags = intake.read_submission(path, chapter)
        assert flags == []
        assert [_what_grading_reads(c) for c in nb.cells] == [_what_grading_reads(c) for c in want["cells"]]
        assert dict(nb.metadata) == {k: want["metadata"][k] for k in safe_output.NOTEBOOK_METADATA}
        for cell in nb.cells:
            assert set(cell.metadata) <= set(safe_output.CELL_METADATA)
            assert cell.get("outputs", []) == [] and "attachments" not in cell


@pytest.mark.unit
def test_metadata_is_cut_to_the_allow_list_at_intake(tmp_path):
    data = _reference_json()
    widgets = {"application/vnd.jupyter.widget-state+json": {"state": {str(i): {"x": [i] * 50} for i in range(50)}}}
    data["metadata"].update(widgets=widgets, signature="sha256:forged", kernelspec={"name": "python3"})
    cell = data["cells"][0]
    cell["metadata"].update(widgets=widgets, raw_mimetype="text/html", trusted=True, jupyter={"source_hidden": True,
                                                                                          "evil": [1] * 100})
    cell["attachments"] = {"a.png": {"image/png": "iVBORw0KGgo="}}
    data["cells"][1]["metadata"]["nbgrader"] = {"grade_id": "<script>", "grade": True, "points": 99}
    nb, flags = intake.read_submission(_write(tmp_path, json.dumps(data).encode()), CHAPTER)
    assert dict(nb.metadata) == {"kernelspec": {"name": "python3"}, "language_info": data["metadata"]["language_info"]}
    assert dict(nb.cells[0].metadata) == safe_output.cell_metadata(cell["metadata"])
    assert set(nb.cells[0].metadata) <= set(safe_output.CELL_METADATA) and nb.cells[0].metadata["jupyter"] == {
        "source_hidden": True}
    assert "attachments" not in nb.cells[0] and "nbgrader" not in nb.cells[1].metadata
    assert flags == [intake.NBGRADER_REMOVED]


@pytest.mark.unit
def test_repair_copies_no_learner_cell_deeply(monkeypatch):
    """structure.repair builds new cells around the submission's values; it deep-copies only the course's own
    (small, trusted) metadata. A deep copy of a learner's cell (or of anything in one) fails this test."""
    source = nbformat.read(COURSE.source_notebook(CHAPTER), as_version=4)
    release = nbformat.read(COURSE.release_notebook(CHAPTER), as_version=4)
    sub = nbformat.read(COURSE.release_notebook(CHAPTER), as_version=4)
    sub.cells.append(copy.deepcopy(sub.cells[next(i for i, c in enumerate(sub.cells) if grade_id(c) == "scores")]))
    sub.cells.append(nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["mine"]}))
    learner = set()
    for cell in sub.cells:
        stack = [cell]
        while stack:
            v = stack.pop()
            if isinstance(v, (dict, list)):
                learner.add(id(v))
                stack.extend(v.values() if isinstance(v, dict) else v)
    copied = []
    real = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda v, *a, **k: (copied.append(id(v)), real(v, *a, **k))[1])
    fixed = structure.repair(sub, source, release)
    assert not learner & set(copied)
    assert fixed.flags == ["duplicated grade_id scores: the extra copy runs as an ordinary cell"]
    mine = next(c for c in fixed.nb.cells if c.source == "x = 1")
    assert mine.metadata["tags"] == ["mine"] and mine is not sub.cells[-1]
    mine.metadata["tags"] = ["changed"]  # the result's cells are its own
    assert sub.cells[-1].metadata["tags"] == ["mine"]


# -- the trusted side's memory ----------------------------------------------------------------------------------

MEASURE = f"""
import json, sys
import nbformat
from autograder import intake, structure
from autograder.course import Course
course = Course(sys.argv[1])
source = nbformat.read(course.source_notebook(sys.argv[3]), as_version=4)
release = nbformat.read(course.release_notebook(sys.argv[3]), as_version=4)
try:
    nb, _ = intake.read_submission(sys.argv[2], sys.argv[3])
    structure.repair(nb, source, release)
    outcome = "graded"
except intake.Unusable as exc:
    outcome = str(exc)
print(json.dumps({{"outcome": outcome, "peak": {VMHWM}}}))
"""


def _peaks(path: Path) -> tuple[str, int, int]:
    """(what the intake said, the peak resident memory in bytes of a fresh process that reads ``path`` and repairs
    the notebook, that of the reader's child on the same file)."""
    out, _ = peak([sys.executable, "-c", MEASURE, str(ROOT), str(path), CHAPTER], cwd=ROOT)
    found = json.loads(out.decode().strip().splitlines()[-1])
    _, child = peak(bounded_json.child_command(path, intake.BUDGET, safe_output.CELL_METADATA,
                                               safe_output.NOTEBOOK_METADATA))
    return found["outcome"], found["peak"], child


def _peak(path: Path) -> tuple[str, int]:
    """(what the intake said, the peak resident memory in bytes of the trusted side reading ``path``): the process's
    peak plus the reader child's."""
    said, process, child = _peaks(path)
    return said, process + child


@pytest.mark.unit
@pytest.mark.timeout(300)
def test_the_trusted_side_spends_a_small_multiple_of_a_large_files_size(tmp_path):
    """Peak memory of intake and repair, above the same-run peak for the chapter's reference, as a multiple of
    the file's size: at most 10 (the goal), for a 12 MB file of small values in metadata (refused) and one of
    long outputs (graded). Before the budget: about 100."""
    control = tmp_path / "control" / f"{CHAPTER}.ipynb"
    control.parent.mkdir()
    control.write_bytes(COURSE.release_notebook(CHAPTER).read_bytes())
    _, base = _peak(control)
    bomb = tmp_path / "bomb" / f"{CHAPTER}.ipynb"
    bomb.parent.mkdir()
    bomb.write_bytes(_with_metadata(b"[" + b"[]," * (12 * MB // 3) + b"[]]"))
    data = _reference_json()
    data["cells"][0].setdefault("outputs", []).append(
        {"output_type": "stream", "name": "stdout", "text": ["z" * 999 + "\n" for _ in range(12_000)]})
    long_outputs = tmp_path / "outputs" / f"{CHAPTER}.ipynb"
    long_outputs.parent.mkdir()
    long_outputs.write_bytes(json.dumps(data).encode())
    for path, outcome in ((bomb, "JSON values"), (long_outputs, "graded")):
        said, peak = _peak(path)
        ratio = (peak - base) / path.stat().st_size
        assert ratio < 10, f"{path.parent.name}: {ratio:.1f}x the file's size"
        assert outcome in said


# TRUST.md: what the grading process spends on a file is at most 10 times its size plus this fixed part, the cost
# of the most cells and kept metadata values the budget lets through (each costs the same however short) ...
FIXED_PART = 4 * MB
# ... and the reader child (which exits once the file is read, and never grows past 1 GiB) at most 10 times plus
# this: the parse of the most JSON values the scan lets through (490,000 `[],` in 1.6 MB: 37 MB, measured).
CHILD_FIXED_PART = 40 * MB


def _tiny_cells(count: int, tags: int, reference: bool = True) -> bytes:
    data = _reference_json() if reference else {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    data["cells"] += [{"cell_type": "raw", "source": "", "metadata": {"tags": [f"{i:x}{j}" for j in range(tags)]}}
                      for i in range(count - len(data["cells"]))]
    return json.dumps(data, separators=(",", ":")).encode()


@pytest.mark.unit
@pytest.mark.timeout(300)
def test_many_tiny_cells_cost_at_most_ten_times_the_file_plus_a_fixed_part(tmp_path):
    """Issue 41's red team: a cell and a metadata value cost the trusted side a fixed amount however few bytes they
    take in the file. 5,000 empty raw cells (0.4 MB) cost 12.9 MB, 32x; with 18 short tags each (1.1 MB), 23.1 MB.
    Now both are refused (the cell budget), and the most cells and tags the budgets accept stay within the stated
    bound, 10 times the file plus :data:`FIXED_PART`."""
    control = tmp_path / "control" / f"{CHAPTER}.ipynb"
    control.parent.mkdir()
    control.write_bytes(COURSE.release_notebook(CHAPTER).read_bytes())
    _, base, child_base = _peaks(control)
    most = intake.BUDGET.max_cells
    per_cell = 16  # a cell's {"tags": [...]} is 3 values and a tag each: 19,000 of the 20,000 kept values allowed
    cases = (("cells", _tiny_cells(5000, 0), "5000 cells"),
             ("tagged", _tiny_cells(5000, 18), "5000 cells"),
             ("most", _tiny_cells(most, per_cell, reference=False), "graded"),
             ("most-with-reference", _tiny_cells(most, per_cell - 1), "graded"))
    for name, data, outcome in cases:
        path = tmp_path / name / f"{CHAPTER}.ipynb"
        path.parent.mkdir()
        path.write_bytes(data)
        said, spent, child = _peaks(path)
        size = path.stat().st_size
        assert spent - base <= 10 * size + FIXED_PART, \
            f"{name}: {(spent - base) / MB:.1f} MiB for {size / MB:.2f} MiB ({(spent - base) / size:.1f}x)"
        assert child - child_base <= 10 * size + CHILD_FIXED_PART, \
            f"{name}: the child, {(child - child_base) / MB:.1f} MiB"
        assert outcome in said, (name, said)
