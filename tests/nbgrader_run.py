"""Grade submissions through the real nbgrader CLI in a throwaway copy of the course (test helper)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from attention_course.cells import grade_id, is_graded_test
from autograder.course import Course


def prepare_course(tmp: Path, chapter: str) -> Course:
    """Copy the course and register ``chapter`` in a fresh gradebook, as an instructor's release would."""
    from .conftest import copy_reference_cache

    course = Course().copy_to(tmp)
    course.grading.mkdir(exist_ok=True)
    copy_reference_cache(course.root)  # the kernels look expected values up instead of re-running the reference
    run_nbgrader(course, ["generate_assignment", chapter, "--force",
                          f"--CourseDirectory.release_directory={tmp / 'release_scratch'}"])
    return course


def run_nbgrader(course: Course, args: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
                          env=course.nbgrader_env(), cwd=course.root, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def cell_scores(course: Course, chapter: str, student: str) -> dict[str, tuple[float, float]]:
    """{grade_id: (score, max_score)} for one autograded submission."""
    with Gradebook(course.db_url) as gb:
        sub = gb.find_submission_notebook(chapter, chapter, student)
        return {g.name: (g.score, g.max_score) for g in sub.grades}


def failure_text(course: Course, chapter: str, student: str, cell: str) -> str:
    """Everything a graded cell printed as an error in the autograded notebook."""
    path = course.grading / "autograded" / student / chapter / f"{chapter}.ipynb"
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if is_graded_test(c) and grade_id(c) == cell:
            parts = []
            for out in c.get("outputs", []):
                if out.output_type == "error":
                    parts.append(f"{out.ename}: {out.evalue}")
                elif out.output_type == "stream":
                    parts.append(out.text)
            return "\n".join(parts)
    raise KeyError(cell)
