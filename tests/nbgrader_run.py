"""Grade submissions through the real nbgrader CLI in a throwaway copy of the course (test helper)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from attention_course.cells import grade_id, is_graded_test
from autograder.course import Course


def copy_course(tmp: Path) -> Course:
    """A throwaway copy of the course with the cached reference profiles (nbgrader's kernels look reference
    values up in them instead of re-running the reference) and an empty gradebook, as nbgrader would make it
    (autograder/new_gradebook.py: nbgrader's own takes an `alembic` process of 2 CPU seconds per copy)."""
    from autograder import new_gradebook

    from .conftest import copy_reference_cache

    course = Course().copy_to(tmp)
    course.grading.mkdir(exist_ok=True)
    copy_reference_cache(course.root)
    new_gradebook.create(course.db_url)
    return course


def generate_assignment(course: Course, chapter: str) -> list[str]:
    """The nbgrader command that registers ``chapter`` in the copy's fresh gradebook, as a release would."""
    return ["generate_assignment", chapter, "--force",
            f"--CourseDirectory.release_directory={course.root / 'release_scratch'}"]


def run_nbgrader_batches(batches: list[list[tuple[Course, list[str]]]], processes: int = 2) -> None:
    """Run every batch of (course, nbgrader arguments) jobs, in order within a batch, in ``processes``
    long-lived nbgrader processes (tests/nbgrader_many.py): each process takes the next batch as soon as it
    is free, so give the longest batches first."""
    import json
    import queue
    import threading

    todo: queue.Queue = queue.Queue()
    for batch in batches:
        todo.put(batch)
    errors: list[str] = []

    def serve() -> None:
        with subprocess.Popen([sys.executable, "-m", "tests.nbgrader_many"], cwd=Course().root, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
            while not errors:
                try:
                    batch = todo.get_nowait()
                except queue.Empty:
                    break
                proc.stdin.write(json.dumps([[str(c.root), args] for c, args in batch]) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                answer = (json.loads(line) if line else
                          {"ok": False, "error": f"the nbgrader process died (exit {proc.wait()})"})
                if not answer["ok"]:
                    errors.append(answer["error"])
            proc.stdin.close()

    threads = [threading.Thread(target=serve) for _ in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError("\n".join(errors))


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
