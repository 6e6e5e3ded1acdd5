"""The in-process nbval verdict (tests/notebook_format.py ``nbval_failures``) fails what nbval would fail and
passes what nbval would pass.

tests/test_release.py executes every chapter once (its regeneration, on torch's generic kernels with one thread) and
asks nbval's own comparison whether those outputs match the committed release's, instead of a second execution
under ``pytest --nbval``. These tests hold that comparison to nbval's rules on small notebooks: a changed printed
digit fails it (and the release's text comparison), an output tagged ``nbval-ignore-output`` may change (and the text
comparison leaves it out too), a cell that raised fails it unless tagged ``raises-exception``, a cell the stored
release never ran is not compared, and the failure names the cell. One test runs real ``pytest --nbval`` on a
small notebook and asks the in-process verdict to fail exactly the cells nbval failed.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from xml.etree import ElementTree

import nbformat
import pytest
from nbclient import NotebookClient

from .notebook_format import comparable, nbval_failures


out = nbformat.v4.new_output


def _release(tmp_path):
    """A small stored release: a printed number, a timing tagged nbval-ignore-output, a figure's text, a cell that
    was never run (a solution cell) and an exercise's check cell."""
    cells = [nbformat.v4.new_code_cell("print(round(w.sum().item(), 4))", id="weights"),
             nbformat.v4.new_code_cell("print(f'{elapsed:.2f} s')", id="timing"),
             nbformat.v4.new_code_cell("plt.plot(x, y)", id="figure"),
             nbformat.v4.new_code_cell("def kernel(x):\n    ...", id="solution"),
             nbformat.v4.new_code_cell("check_kernel(kernel)", id="check")]
    cells[0].outputs = [out("stream", name="stdout", text="0.8123\n")]
    cells[1].outputs = [out("stream", name="stdout", text="0.31 s\n")]
    cells[1].metadata["tags"] = ["nbval-ignore-output"]
    cells[2].outputs = [out("display_data", data={"text/plain": "<Figure size 640x480 with 1 Axes>",
                                                   "image/png": "iVBORw0KGgoAAAANSUhEUgAAAAE="})]
    cells[4].outputs = [out("stream", name="stdout", text="ok\n")]
    for n, cell in enumerate(cells, 1):
        cell.execution_count = None if cell.id == "solution" else n
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / "release.ipynb"
    nbformat.write(nb, path)
    return nb, path


def _cell(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


@pytest.mark.unit
def test_the_same_outputs_pass(tmp_path, request):
    stored, path = _release(tmp_path)
    fresh = copy.deepcopy(stored)
    _cell(fresh, "figure").outputs[0].data["image/png"] = "AAAA"  # another matplotlib build: same text
    # one print delivered in two chunks
    _cell(fresh, "weights").outputs = [out("stream", name="stdout", text=t) for t in ("0.81", "23\n")]
    assert nbval_failures(fresh, path, request.session) == []
    assert comparable(fresh) == comparable(stored)
    # nbval compares no cell the stored release never ran (comparable does: the release stores none of their outputs)
    _cell(fresh, "solution").outputs = [out("stream", name="stdout", text="anything\n")]
    assert nbval_failures(fresh, path, request.session) == []


@pytest.mark.unit
def test_a_changed_digit_fails_both_comparisons_naming_the_cell(tmp_path, request):
    stored, path = _release(tmp_path)
    fresh = copy.deepcopy(stored)
    _cell(fresh, "weights").outputs[0].text = "0.8124\n"
    failures = nbval_failures(fresh, path, request.session)
    assert len(failures) == 1 and failures[0].startswith("Cell 0 (id 'weights', starts 'print(round(w.sum()")
    assert "Cell outputs differ" in failures[0] and "0.8124" in failures[0] and "0.8123" in failures[0]
    assert comparable(fresh) != comparable(stored)


@pytest.mark.unit
def test_an_output_tagged_nbval_ignore_output_may_change(tmp_path, request):
    stored, path = _release(tmp_path)
    fresh = copy.deepcopy(stored)
    _cell(fresh, "timing").outputs[0].text = "7.02 s\n"
    assert nbval_failures(fresh, path, request.session) == []
    assert comparable(fresh) == comparable(stored)


@pytest.mark.unit
def test_a_figure_that_lost_its_output_or_gained_one_fails(tmp_path, request):
    stored, path = _release(tmp_path)
    fresh = copy.deepcopy(stored)
    _cell(fresh, "figure").outputs = []
    _cell(fresh, "check").outputs.append(out("stream", name="stderr", text="UserWarning: ...\n"))
    failures = nbval_failures(fresh, path, request.session)
    assert [f.split(":", 1)[0] for f in failures] == ["Cell 2 (id 'figure', starts 'plt.plot(x, y)')",
                                                      "Cell 4 (id 'check', starts 'check_kernel(kernel)')"]
    assert "Missing output fields" in failures[0] and "Unexpected output fields" in failures[1]


@pytest.mark.unit
def test_a_cell_that_raised_fails_unless_tagged_raises_exception(tmp_path, request):
    stored, path = _release(tmp_path)
    fresh = copy.deepcopy(stored)
    _cell(fresh, "check").outputs = [out("error", ename="CheckFailed", evalue="rows should sum to 1", traceback=[])]
    assert nbval_failures(fresh, path, request.session) == [
        "Cell 4 (id 'check', starts 'check_kernel(kernel)'): Cell execution caused an exception: "
        "CheckFailed: rows should sum to 1"]
    _cell(stored, "check").metadata["tags"] = ["raises-exception"]
    _cell(stored, "check").outputs = copy.deepcopy(_cell(fresh, "check").outputs)
    nbformat.write(stored, path)
    assert nbval_failures(fresh, path, request.session) == []


@pytest.mark.unit
def test_a_cell_missing_from_the_fresh_run_fails(tmp_path, request):
    stored, path = _release(tmp_path)
    fresh = copy.deepcopy(stored)
    fresh.cells = [c for c in fresh.cells if c.get("id") != "weights"]
    assert nbval_failures(fresh, path, request.session) == [
        "Cell 0 (id 'weights', starts 'print(round(w.sum().item(), 4))'): not in the fresh run"]


def _stored(source, text=None, tags=(), ran=True, error=None):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = list(tags)
    cell.execution_count = 1 if ran else None
    if text is not None:
        cell.outputs = [out("stream", name="stdout", text=text)]
    if error:
        cell.outputs = [out("error", ename=error[0], evalue=error[1], traceback=[])]
    return cell


@pytest.mark.notebooks
def test_the_verdict_fails_the_cells_real_nbval_fails(tmp_path, request):
    cells = [_stored("print(0.8123)", "0.8123\n"),                                   # same: passes
             _stored("print(0.8124)", "0.8123\n"),                                   # a digit: fails
             _stored("import random\nprint(random.random())", "0.5\n", ["nbval-ignore-output"]),  # passes
             _stored("x = 1", ran=False),                                            # unrun: not compared
             _stored("print('a')\nprint('b', flush=True)\nprint('c')", "a\nb\nc\n"),  # chunks: passes
             _stored("print(1 / 0)"),                                                # raises: fails
             _stored("1 / 0", tags=["raises-exception"], error=("ZeroDivisionError", "division by zero")),
             _stored("1 / 0", tags=["raises-exception"], error=("ZeroDivisionError", "another message")),  # fails
             _stored("print('more')", "")]                                           # more output: fails
    stored = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                            "display_name": "Python 3"}})
    path = tmp_path / "stored.ipynb"
    nbformat.write(stored, path)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-p", "no:cacheprovider", "-q", "-c",
                    str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), f"--junitxml={tmp_path / 'nbval.xml'}",
                    str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    cases = list(ElementTree.parse(tmp_path / "nbval.xml").iter("testcase"))
    assert len(cases) == len(cells), "nbval did not check every cell"
    nbval_failed = [case.get("name") for case in cases if any(p.tag in ("failure", "error") for p in case)]
    assert nbval_failed == ["Cell 1", "Cell 5", "Cell 7", "Cell 8"]  # nbval's rules as this test states them

    fresh = copy.deepcopy(stored)
    NotebookClient(fresh, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    ours = [f.split(" (", 1)[0] for f in nbval_failures(fresh, path, request.session)]
    assert ours == nbval_failed
