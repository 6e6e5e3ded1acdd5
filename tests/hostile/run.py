"""Grading the hostile corpus: one Engine, every case, then the reference again (is the engine healthy?); the
cases that only wait for the wall clock go to a second engine beside it (grade_cases). Each case is graded under
its own limits where it has some (grade_case: the cases that test a clock).

Used in-process by tests/test_isolation.py (as root, at each level) and, as a throwaway unprivileged account,
by tests/test_unprivileged.py: ``python -m tests.hostile.run COURSE LEVEL OUT.json`` grades the cases
already written under COURSE/grading/submitted/hostile/ and writes the results and the level reached.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
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


def ipc_left_by_grading(before: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The System V IPC objects made since ``before`` and left behind by the grading: once a batch's engine is
    closed none of its processes is alive, so a shared-memory segment whose creator still runs is another
    program's on this shared host (a PostgreSQL server another test started makes one at start-up; an xdist
    worker beside this one may start it mid-batch). Semaphores and message queues name no creator: all count."""
    creators = {}
    try:
        with open("/proc/sysvipc/shm") as fh:
            for line in fh.read().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 4:
                    creators[fields[1]] = fields[4]  # shmid, cpid
    except OSError:
        pass
    left = sysv_ipc_objects() - before
    return sorted(o for o in left if not (o[0] == "shm" and o[1] in creators
                                          and os.path.exists(f"/proc/{creators[o[1]]}")))


AFTER_WAITING = "__after_waiting__"  # the reference graded by the second engine after the cases that wait


def grade_case(engine: Engine, name: str, path: Path, student: str) -> GradingResult:
    """One notebook graded by ``engine``; a case with limits of its own (Case.limits) under those, over the
    engine's. The engine reads its limits at each grade (the zygote was started with the level only, which no case
    changes), so they are set for this one grade and put back."""
    own = next((c.limits for c in CASES if c.name == name), {})
    if not own:
        return engine.grade(CHAPTER, path, student)
    base = engine.limits
    engine.limits = dataclasses.replace(base, **own)
    try:
        return engine.grade(CHAPTER, path, student)
    finally:
        engine.limits = base


def _grade_waiting(course_root: Path, limits: Limits, paths: dict[str, Path], students: dict[str, str],
                   after: Path) -> dict[str, GradingResult]:
    with Engine(course_root, limits) as side:
        side.profile(CHAPTER)
        results = {name: grade_case(side, name, path, students[name]) for name, path in paths.items()}
        results[AFTER_WAITING] = side.grade(CHAPTER, after, AFTER_WAITING)  # is this engine healthy too?
    return results


def grade_cases(engine: Engine, paths: dict[str, Path]) -> dict[str, GradingResult]:
    """Each case graded under its student id (its name unless it names one), keyed by the case's name; the
    reference ("__after__") last.

    The cases that only wait for the notebook's wall clock (Case.waits) are graded by a second engine of the
    same course, limits and level, beside the others; it then grades the reference too (AFTER_WAITING). The
    cases marked Case.alone are graded once it is done. At each level the corpus waited about 8 s with one core
    idle, and the suite grades it at five levels. Every case under its own limits, if it has some (grade_case)."""
    by_name = {c.name: c for c in CASES}
    students = {name: (by_name[name].student or name) if name in by_name else name for name in paths}
    waiting = {n: p for n, p in paths.items() if n in by_name and by_name[n].waits}
    last = [n for n in paths if n in by_name and by_name[n].alone] + ["__after__"]
    first = [n for n in paths if n not in waiting and n not in last]
    results: dict[str, GradingResult] = {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        side = pool.submit(_grade_waiting, engine.course.root, engine.limits, waiting, students,
                           paths["__after__"]) if waiting else None
        results.update({name: grade_case(engine, name, paths[name], students[name]) for name in first})
        if side is not None:
            results.update(side.result())
    results.update({name: grade_case(engine, name, paths[name], students[name]) for name in last if name in paths})
    return results


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
