"""Shared helpers for the batch-grading tests: a small class of submissions in a throwaway course copy, the
grading command run as instructors run it, and gradebook snapshots to compare runs.

The class (``baseline``, test_batch, test_dask, test_postgres) is chapter 1's: what those tests prove (parallel
equals sequential, resume after a kill, the stores, the exports) is the batch driver's and the gradebook's, not a
chapter's, and chapter 1's graded cells are the cheapest real ones (about a third of chapter 3's time per notebook
in a warm engine). ``CHAPTER`` stays chapter 3 for the tests that need its exercises (test_class_language's
masked_softmax hints); every helper takes ``chapter=``."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from attention_course.cells import graded_cells, is_graded_test
from autograder import submissions
from autograder.course import Course
from autograder.gradebook import snapshot

CHAPTER = "03_scoring_functions"
CLASS_CHAPTER = "01_cognitive_attention"  # the baseline class's chapter (see the module docstring)
# catalogued mistakes in the class: enough to see verdicts, symptoms and the report's failed checks go through the
# driver (every mistake's own verdict is test_catalogues'); each one more is graded six times a suite run
MISTAKES = 3
REPO = Course()


def class_members(course: Course, chapter: str = CHAPTER) -> dict:
    """{student: what they handed in}: reference, blank, ``MISTAKES`` catalogued mistakes, a learner who edited a
    test cell (flagged), an unreadable file, a notebook under another name and an empty folder (three zeros)."""
    members: dict = {
        "reference": submissions.reference(course, chapter),
        "blank": submissions.blank(course, chapter),
    }
    for m in submissions.load_mistakes(course, chapter)[:MISTAKES]:
        members[f"mistake-{m.id}"] = submissions.with_mistake(course, chapter, m)
    tampered = submissions.reference(course, chapter)
    for cell in tampered.cells:
        if is_graded_test(cell):
            cell.source = "pass  # nothing to check here\n"
            break
    members["tampered"] = tampered
    members["broken"] = b'{"cells": [ this is not json'
    members["renamed"] = ("Copy of " + f"{chapter}.ipynb", submissions.reference(course, chapter))
    members["nothing"] = None
    return members


def make_course(dest: Path, expected_from: Course | None = None, members=None, chapter: str = CHAPTER) -> Course:
    """A course copy with the class's submissions in grading/submitted/ (and the cached reference profile)."""
    course = REPO.copy_to(dest)
    (course.grading / "expected").mkdir(parents=True, exist_ok=True)
    if expected_from is None and "run" in _BASELINE:
        expected_from = _BASELINE["run"][0]
    # the baseline's copy holds the profile its run built (a fresh clone's grading/ has none), for its chapter only
    sources = [c.grading / "expected" for c in (expected_from, REPO) if c is not None]
    source = next((s for s in sources if any(s.glob(f"*{chapter}-*.json"))), sources[-1])
    for table in source.glob(f"*{chapter}-*.json"):  # the reference profile
        shutil.copy(table, course.grading / "expected" / table.name)
    for student, nb in (members or class_members(course, chapter)).items():
        write(course, student, nb, chapter)
    return course


_BASELINE: dict = {}


def baseline(tmp_path_factory) -> tuple[Course, dict, str]:
    """The class (chapter ``CLASS_CHAPTER``) graded sequentially (one worker): (course, snapshot, output); once per
    test session."""
    if "run" not in _BASELINE:
        course = make_course(tmp_path_factory.mktemp("sequential"), chapter=CLASS_CHAPTER)
        out = run_grade(course, "--workers", "1", chapter=CLASS_CHAPTER)
        _BASELINE["run"] = (course, comparable(snapshot(course.db_url)), out)
    return _BASELINE["run"]


def write(course: Course, student: str, nb, chapter: str = CHAPTER) -> Path:
    """nb: a notebook, raw bytes, (file name, notebook), or None (an empty submission folder)."""
    folder = course.grading / "submitted" / student / chapter
    folder.mkdir(parents=True, exist_ok=True)
    if nb is None:
        return folder
    if isinstance(nb, bytes):
        (folder / f"{chapter}.ipynb").write_bytes(nb)
        return folder / f"{chapter}.ipynb"
    if isinstance(nb, tuple):
        nbformat.write(nb[1], folder / nb[0])
        return folder / nb[0]
    return submissions.write_submission(course, student, chapter, nb)


def grade_cmd(course: Course, *args: str, chapter: str = CHAPTER) -> list[str]:
    return [sys.executable, "-m", "autograder", "grade", chapter, "--course", str(course.root), "--no-progress",
            *args]


def run_grade(course: Course, *args: str, timeout: float = 240, check: bool = True, chapter: str = CHAPTER) -> str:
    """Run the grading command; returns its output (stdout + stderr)."""
    done = subprocess.run(grade_cmd(course, *args, chapter=chapter), capture_output=True, text=True, timeout=timeout,
                          cwd=course.root, env=child_env())
    out = done.stdout + done.stderr
    if check and done.returncode != 0:
        raise AssertionError(f"grade {' '.join(args)} exited {done.returncode}:\n{out[-5000:]}")
    return out


def child_env() -> dict:
    env = dict(os.environ)
    env.pop("ATTENTION_COURSE_ROOT", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO.root), env.get("PYTHONPATH", "")] if p)
    return env


def summary_counts(output: str) -> dict[str, int]:
    """Parse the final summary line: {'graded': n, 'zero': n, 'flagged': n, 'failed': n, 'up to date': n}."""
    import re

    line = [ln for ln in output.splitlines() if " submissions: " in ln and " graded, " in ln][-1]
    # "not gradable" is the status "zero" (autograder/batch.py Summary.zero)
    counts = {("zero" if k == "not gradable" else k): int(v)
              for v, k in re.findall(r"(\d+) (graded|not gradable|flagged|failed)", line)}
    counts["up to date"] = int(re.search(r"(\d+) already up to date", line).group(1))
    return counts


def db_url(course: Course) -> str:
    return course.db_url


def comparable(snap: dict) -> dict:
    """A snapshot as plain JSON, without the resume keys (they change with the grading code, which others may
    be editing while a test session runs; equal inputs give equal keys anyway)."""
    snap = json.loads(json.dumps(snap, sort_keys=True, default=str))
    for r in snap["results"].values():
        r.pop("key", None)
    return snap


def cell_max(course: Course, chapter: str = CHAPTER) -> dict[str, float]:
    nb = nbformat.read(course.source_notebook(chapter), as_version=4)
    return dict(graded_cells(nb))


__all__ = ["baseline", "CHAPTER", "CLASS_CHAPTER", "MISTAKES", "class_members", "make_course", "write", "run_grade",
           "grade_cmd", "child_env", "summary_counts", "snapshot", "comparable", "cell_max", "db_url"]


def nbgrader_export(course: Course, db_url: str, out: Path) -> dict[tuple[str, str], float]:
    """Run stock `nbgrader export` on a gradebook; {(chapter, student): raw score} from its CSV."""
    done = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--db={db_url}", f"--to={out}",
                           "--log-level=WARN"], env=course.nbgrader_env(), cwd=course.root, capture_output=True,
                          text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out, newline="") as f:
        return {(r["assignment"], r["student_id"]): float(r["raw_score"]) for r in csv.DictReader(f)}
