"""Every stored output is the same on any CPU, so a learner's nbval self-check of a correct notebook passes on
their machine.

Each solution notebook is executed the way a learner runs it (hidden checks decided in the kernel) on torch's
generic CPU kernels (``ATEN_CPU_CAPABILITY=default``, as an older CPU would) with one thread, and every text
output of the cells the release shows is compared with what the release stores. The release itself is
regenerated with the machine's best kernels and all its threads by tests/test_release.py, which makes the same
comparison; together the two runs cover two kernel paths and one and two threads. Only outputs tagged
``nbval-ignore-output`` (random values, timings) are exempt; nbval skips them too.
"""
from __future__ import annotations

import nbformat
import pytest

from attention_course.cells import is_graded_test, is_solution
from attention_course.expected import execute_notebook
from autograder.course import Course

from .notebook_format import output_texts

pytestmark = pytest.mark.notebooks

COURSE = Course()
CHAPTERS = COURSE.chapters()
GENERIC_ONE_THREAD = {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                      "ATTENTION_COURSE_DEVICE": "cpu", "ATTENTION_COURSE_GRADING": "",
                      "MPLBACKEND": "module://matplotlib_inline.backend_inline"}


def _shown_outputs(nb) -> dict[str, list[str]]:
    """{cell id: output texts} for the code cells whose outputs the release stores (not solutions or tests)."""
    return {c.id: texts for c in nb.cells
            if not (is_solution(c) or is_graded_test(c)) and (texts := output_texts(c)) is not None}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_source_runs_clean_with_generic_kernels_and_one_thread(chapter):
    nb = nbformat.read(COURSE.source_notebook(chapter), as_version=4)
    probe = nbformat.v4.new_code_cell("import torch\nprint(torch.get_num_threads(), torch.backends.cpu.get_cpu_capability())")
    nb.cells.append(probe)  # proves the kernel really ran on the generic path with one thread
    env = dict(GENERIC_ONE_THREAD, ATTENTION_COURSE_ROOT=str(COURSE.root))
    execute_notebook(nb, env, timeout=300)  # raises, naming the cell, if any cell fails (hidden tests too)
    assert probe.outputs[0].text.split() == ["1", "DEFAULT"], probe.outputs
    nb.cells.pop()
    now = _shown_outputs(nb)
    stored = _shown_outputs(nbformat.read(COURSE.release_notebook(chapter), as_version=4))
    assert set(now) <= set(stored), f"cells missing from the release: {sorted(set(now) - set(stored))}"
    sources = {c.id: c.source for c in nb.cells}
    differing = [cid for cid in now if now[cid] != stored[cid]]
    assert not differing, "\n".join(
        f"cell {cid!r} (starts {sources[cid].strip()[:60]!r}) prints\n  here:   {now[cid]}\n  stored: {stored[cid]}"
        for cid in differing) + "\n(an output that depends on the CPU: round it or print a tolerance comparison)"
