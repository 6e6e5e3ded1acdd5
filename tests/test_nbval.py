"""Every notebook runs clean under nbval: the solution sources, and a completed learner notebook checked
against the reference outputs stored in the release (the learner's self-check)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.notebooks

from autograder import submissions
from autograder.course import Course

COURSE = Course()
CHAPTERS = COURSE.chapters()


def _nbval(path, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTENTION_COURSE_DEVICE="cpu", ATTENTION_COURSE_ROOT=str(COURSE.root))
    env.pop("ATTENTION_COURSE_GRADING", None)
    env.pop("MPLBACKEND", None)  # notebooks draw inline, as they do for a learner
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:cacheprovider",
                           "--nbval-cell-timeout=300", str(path)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_notebook_runs_clean(chapter):
    done = _nbval(COURSE.source_notebook(chapter), COURSE.root)
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_completed_release_matches_stored_reference_outputs(chapter, tmp_path):
    completed = tmp_path / f"{chapter}.ipynb"
    import nbformat

    nbformat.write(submissions.reference(COURSE, chapter), completed)
    done = _nbval(completed, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:]
