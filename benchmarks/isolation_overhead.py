"""Time per notebook: the isolated engine (autograder.isolation) against stock ``nbgrader autograde``.

Both grade the same submissions of one chapter (the reference, the blank release and catalogued mistakes)
in a throwaway copy of the course, one notebook at a time:

- stock: one ``nbgrader autograde CHAPTER`` over all of them (a fresh kernel per notebook, nbgrader's own
  start-up paid once);
- isolated: one Engine per isolation level (root, user namespace, process: docs/isolation.md); its start
  (the zygote importing torch) and the chapter's reference profile (built once per chapter and cached) are
  reported separately from the per-notebook time. Run it as an ordinary account to time the levels it
  reaches without root.

    .venv/bin/python benchmarks/isolation_overhead.py [--chapter 03_scoring_functions] [-n 10] [--warm-profiles]
    .venv/bin/python benchmarks/isolation_overhead.py --smoke   # the smallest size (tests/test_benchmarks.py runs it)

``--warm-profiles`` copies the repository's cached reference profiles (grading/expected) into the throwaway course,
so the profile time is a cache read. ``--smoke``: 1 submission (the reference) of chapter 1 (the cheapest real
chapter: every step still runs once, and the smoke run's figures say nothing about speed), one engine at the level
this account reaches (``auto``), warm profiles.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder import submissions  # noqa: E402
from autograder.course import Course  # noqa: E402
from autograder.isolation import Engine, GraderError, Limits  # noqa: E402

SMOKE = {"n": 1, "levels": ["auto"], "warm_profiles": True, "chapter": "01_cognitive_attention"}


def nbgrader(course: Course, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR"], env=course.nbgrader_env(),
                          cwd=course.root, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nbgrader {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="03_scoring_functions")
    parser.add_argument("-n", type=int, default=10, help="number of submissions (default 10)")
    parser.add_argument("--levels", nargs="+", default=["root", "user", "process"],
                        help="isolation levels to time (those this account cannot reach are reported and skipped; "
                             "auto: the strongest it reaches)")
    parser.add_argument("--warm-profiles", action="store_true",
                        help="start from the repository's cached reference profiles instead of building them")
    parser.add_argument("--smoke", action="store_true", help="the smallest size: 1 submission of chapter 1, "
                                                             "level auto, warm profiles")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    chapter = args.chapter
    with tempfile.TemporaryDirectory() as tmp:
        course = Course().copy_to(Path(tmp) / "course")
        course.grading.mkdir(exist_ok=True)
        if args.warm_profiles and (ROOT / "grading" / "expected").is_dir():
            shutil.copytree(ROOT / "grading" / "expected", course.grading / "expected", dirs_exist_ok=True)
        nbgrader(course, "generate_assignment", chapter, "--force",
                 f"--CourseDirectory.release_directory={Path(tmp) / 'release_scratch'}")
        notebooks = [("reference", submissions.reference(course, chapter)), ("blank", submissions.blank(course, chapter))]
        notebooks += [(f"mistake-{m.id}", submissions.with_mistake(course, chapter, m))
                      for m in submissions.load_mistakes(course, chapter)]
        notebooks = notebooks[:args.n]
        paths = {student: submissions.write_submission(course, student, chapter, nb) for student, nb in notebooks}
        n = len(paths)

        t = time.perf_counter()
        nbgrader(course, "autograde", chapter, "--force")
        stock = (time.perf_counter() - t) / n

        print(f"chapter {chapter}, {n} submissions, one notebook at a time")
        print(f"stock nbgrader autograde : {stock:6.2f} s per notebook")
        per_level = {}
        for level in args.levels:
            t = time.perf_counter()
            try:
                engine = Engine(course.root, Limits(isolation=level)).start()
            except GraderError as exc:
                print(f"{level:8s}: not reachable here ({exc})")
                continue
            with engine:
                start = time.perf_counter() - t
                t = time.perf_counter()
                engine.profile(chapter)
                profile = time.perf_counter() - t
                t = time.perf_counter()
                results = [engine.grade(chapter, path, student) for student, path in paths.items()]
                per_level[level] = isolated = (time.perf_counter() - t) / n
                failed = [r["student"] for r in results if r["status"] == "failed"]
                if failed:
                    raise SystemExit(f"the engine failed on {failed} at {level}")
                print(f"{engine.isolation['label']:40s}: {isolated:6.2f} s per notebook, ratio to stock "
                      f"{isolated / stock:5.2f} (+ {start:.1f} s engine start, + {profile:.1f} s profile)")
        if "root" in per_level:
            for level, value in per_level.items():
                print(f"{level} / root: {value / per_level['root']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
