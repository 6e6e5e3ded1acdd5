"""Every stored output is the same on any CPU: a learner's self-check of a completed notebook
(``python -m attention_course check``, nbval against the release's reference outputs; tests/test_selfcheck.py and
tests/test_kit.py test that command) passes on their machine.

The release stores the outputs of a run with the machine's best CPU kernels and all its threads; tests/test_release.py
regenerates it (best kernels, two threads) and compares every text output (naming the cell that differs). Here the completed release
(the learner's notebook with the reference answers) runs under nbval on torch's generic kernels
(``ATEN_CPU_CAPABILITY=default``, as an older CPU would) with one thread, and nbval compares every stored output
(naming the cell that differs). Together: two kernel paths, one and two threads. A probe cell proves the kernel
really ran that way. Only outputs tagged ``nbval-ignore-output`` (random values, timings) are exempt.
"""
from __future__ import annotations

import os
import subprocess
import sys
from xml.etree import ElementTree

import nbformat
import pytest

from autograder import submissions
from autograder.course import Course

pytestmark = pytest.mark.notebooks

COURSE = Course()
CHAPTERS = COURSE.chapters()
GENERIC_ONE_THREAD = {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _nbval(paths, cwd, extra_env, report) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTENTION_COURSE_DEVICE="cpu", ATTENTION_COURSE_ROOT=str(COURSE.root), **extra_env)
    env.pop("ATTENTION_COURSE_GRADING", None)
    env.pop("MPLBACKEND", None)  # notebooks draw inline, as they do for a learner
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:cacheprovider",
                           "--nbval-cell-timeout=300", f"--junitxml={report}", *map(str, paths)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)


def _probe_cell():
    """A cell whose stored output nbval checks: the kernel runs torch's generic kernels on one thread."""
    cell = nbformat.v4.new_code_cell("import torch\nprint(torch.get_num_threads(), torch.backends.cpu.get_cpu_capability())")
    cell.execution_count = 1  # nbval checks only cells that have run
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1 DEFAULT\n")]
    return cell


@pytest.fixture(scope="module")
def nbval_cells(tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    """Every chapter's completed release through one ``pytest --nbval`` run (a pytest start per chapter cost as
    much as a small chapter's cells): ``{chapter: [(cell, failure text or ""), ...]}``, nbval's own verdicts."""
    tmp = tmp_path_factory.mktemp("nbval")
    paths = []
    for chapter in CHAPTERS:
        completed = submissions.reference(COURSE, chapter)
        completed.cells.insert(1, _probe_cell())
        paths.append(tmp / f"{chapter}.ipynb")
        nbformat.write(completed, paths[-1])
    done = _nbval(paths, tmp, GENERIC_ONE_THREAD, tmp / "nbval.xml")
    if not (tmp / "nbval.xml").is_file():
        pytest.fail(f"nbval did not run (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    cells: dict[str, list[tuple[str, str]]] = {}
    for case in ElementTree.parse(tmp / "nbval.xml").iter("testcase"):
        problems = [f"{p.get('message', '')}\n{p.text or ''}" for p in case if p.tag in ("failure", "error")]
        cells.setdefault(case.get("classname").removesuffix(".ipynb"), []).append((case.get("name"),
                                                                                  "\n".join(problems)))
    return cells


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_completed_release_matches_stored_outputs_on_generic_kernels_one_thread(nbval_cells, chapter):
    cells = nbval_cells.get(chapter, [])
    assert cells, f"nbval checked no cell of {chapter}"
    failed = [f"{cell}: {text[-3000:]}" for cell, text in cells if text]
    assert not failed, "\n---\n".join(failed)
