"""Grading the hostile corpus: one Engine, every case, then the reference again (is the engine healthy?).

Used in-process by tests/test_isolation.py (as root, at each level) and, as a throwaway unprivileged account,
by tests/test_unprivileged.py: ``python -m tests.hostile.run COURSE LEVEL OUT.json`` grades the cases
already written under COURSE/grading/submitted/hostile/ and writes the results and the level reached.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat

from autograder import submissions
from autograder.course import Course
from autograder.isolation import Engine, Limits
from autograder.results import GradingResult

from .cases import CASES, CHAPTER, LIMITS, Ctx, Special


def write_cases(ctx: Ctx, names=None) -> dict[str, Path]:
    """Every case's file (or those in ``names``) under grading/submitted/hostile/<case>/, and the reference as
    "__after__"."""
    base = ctx.course.grading / "submitted" / "hostile"
    paths = {}
    for case in CASES:
        if names is not None and case.name not in names:
            continue
        built = case.build(ctx)
        path = base / case.name / case.file_name
        path.parent.mkdir(parents=True)
        if isinstance(built, Special):
            {"symlink": lambda: os.symlink(built.target, path), "hardlink": lambda: os.link(built.target, path),
             "fifo": lambda: os.mkfifo(path)}[built.kind]()
        elif isinstance(built, bytes):
            path.write_bytes(built)
        else:  # written as JSON, not nbformat.write: hostile notebooks may be invalid on purpose
            path.write_text(json.dumps(built))
        paths[case.name] = path
    path = base / "__after__" / f"{CHAPTER}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(submissions.reference(ctx.course, CHAPTER), path)
    paths["__after__"] = path
    return paths


def sysv_ipc_objects() -> set[tuple[str, str]]:
    """The System V IPC objects of this IPC namespace (the host's, seen from the test): ``(kind, id)``."""
    out = set()
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        out |= {(kind, line.split()[1]) for line in lines if len(line.split()) > 1}
    return out


def grade_cases(engine: Engine, paths: dict[str, Path]) -> dict[str, GradingResult]:
    """Each case graded under its student id (its name unless it names one), keyed by the case's name."""
    students = {c.name: c.student or c.name for c in CASES}
    return {name: engine.grade(CHAPTER, path, students.get(name, name)) for name, path in paths.items()}


def main(argv: list[str]) -> int:
    course, level, out = Course(Path(argv[0])), argv[1], Path(argv[2])
    base = course.grading / "submitted" / "hostile"
    names = [c.name for c in CASES] + ["__after__"]  # the reference last: is the engine still healthy?
    names = [n for n in names if not argv[3:] or n in argv[3:]]
    paths = {name: next((base / name).iterdir()) for name in names}
    with Engine(course.root, Limits(**LIMITS, isolation=level)) as engine:
        engine.profile(CHAPTER)
        results = grade_cases(engine, paths)
        out.write_text(json.dumps({"isolation": engine.isolation,
                                   "results": {name: r.to_json() for name, r in results.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
