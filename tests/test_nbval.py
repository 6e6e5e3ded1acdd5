"""A learner's self-check: a completed release passes ``pytest --nbval`` against the reference outputs stored
in it. (That the solution sources run clean, on another CPU kernel path too, is tests/test_machine_independence.py.)"""
from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from autograder import submissions
from autograder.course import Course

pytestmark = pytest.mark.notebooks

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
def test_completed_release_matches_stored_reference_outputs(chapter, tmp_path):
    completed = tmp_path / f"{chapter}.ipynb"
    nbformat.write(submissions.reference(COURSE, chapter), completed)
    done = _nbval(completed, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:]
