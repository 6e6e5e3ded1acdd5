"""Speed of grading a whole class: stock sequential ``nbgrader autograde`` against ``python -m autograder grade``.

Builds a synthetic class (default: 40 learners x every chapter that has a source and a release notebook)
from ``autograder.submissions``, mixing reference, blank and catalogued-mistake submissions; grades it
with both, in two throwaway copies of the course, and

- checks that both give every learner the same total per chapter (the run fails if not);
- prints both wall times (each includes its command-line start-up: one ``nbgrader autograde`` call per
  chapter, one ``grade`` call in all), the ratio, and the per-notebook marginal cost, measured as
  (time(full class) - time(small class)) / (notebooks(full) - notebooks(small)) where the small class is
  the first ``--small`` learners.

One-time, per-chapter preparation that both paths cache on disk (the reference expectations stock grading
reads, our engine's reference profile) and registering the chapters in the gradebooks are done before the
clocks start, and reported.

    .venv/bin/python benchmarks/bench_grading.py                      # 40 learners, all chapters
    .venv/bin/python benchmarks/bench_grading.py --learners 6 --chapters 03_scoring_functions
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder import submissions  # noqa: E402
from autograder.course import Course  # noqa: E402


def chapters_present(course: Course) -> list[str]:
    return [ch for ch in course.chapters() if course.release_notebook(ch).is_file()]


def build_class(course: Course, chapters: list[str], learners: int) -> dict[tuple[str, str], str]:
    """Write the class into course's grading/submitted; returns {(student, chapter): kind}."""
    kinds = {}
    for chapter in chapters:
        mistakes = submissions.load_mistakes(course, chapter)
        reference = submissions.reference(course, chapter)
        blank = submissions.blank(course, chapter)
        for i in range(learners):
            student = f"learner{i:03d}"
            slot = i % (2 + len(mistakes)) if i >= 2 else i
            # learner000: reference, learner001: blank, then every catalogued mistake in turn, and again.
            if slot == 0:
                nb, kind = reference, "reference"
            elif slot == 1:
                nb, kind = blank, "blank"
            else:
                m = mistakes[(slot - 2) % len(mistakes)]
                nb, kind = submissions.with_mistake(course, chapter, m), f"mistake {m.id}"
            submissions.write_submission(course, student, chapter, nb)
            kinds[(student, chapter)] = kind
    return kinds


def run(cmd: list[str], env: dict, cwd: Path, what: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return elapsed


def nbgrader(course: Course, args: list[str], db: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args, f"--db={db}", "--log-level=WARN"]


def stock_prepare(course: Course, chapters: list[str], db: str) -> float:
    from attention_course.expected import build_expected

    started = time.perf_counter()
    for ch in chapters:
        run(nbgrader(course, ["generate_assignment", ch, "--force",
                              f"--CourseDirectory.release_directory={course.root / 'release_scratch'}"], db),
            course.nbgrader_env(), course.root, f"nbgrader generate_assignment {ch}")
        build_expected(course.root, ch)
    return time.perf_counter() - started


def stock_grade(course: Course, chapters: list[str], db: str, submitted: str = "submitted") -> float:
    total = 0.0
    for ch in chapters:
        total += run(nbgrader(course, ["autograde", ch, "--force",
                                       f"--CourseDirectory.submitted_directory=grading/{submitted}"], db),
                     course.nbgrader_env(), course.root, f"nbgrader autograde {ch}")
    return total


def stock_scores(db: str) -> dict[tuple[str, str], float]:
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(db, course_id="attention-from-scratch") as gb:
        for assignment in gb.assignments:
            for sub in gb.assignment_submissions(assignment.name):
                scores[(sub.student.id, assignment.name)] = float(sub.score)
    return scores


def ours_prepare(course: Course, chapters: list[str]) -> float:
    """Build the engine's per-chapter reference profiles (cached on disk, like stock's expectations)."""
    from autograder.batch import _make_engine, _prepare_with, _close_engine, engine_module_name

    started = time.perf_counter()
    engine = _make_engine(course.root, engine_module_name(), {})
    try:
        for ch in chapters:
            error = _prepare_with(engine, ch)
            if error:
                raise SystemExit(f"preparing {ch} failed:\n{error}")
    finally:
        _close_engine(engine)
    return time.perf_counter() - started


def ours_grade(course: Course, chapters: list[str], db: str, workers: int | None, submitted: Path | None = None) -> float:
    cmd = [sys.executable, "-m", "autograder", "grade", *chapters, "--course", str(course.root), "--db", db,
           "--force", "--no-progress"]
    if workers:
        cmd += ["--workers", str(workers)]
    if submitted:
        cmd += ["--submitted", str(submitted)]
    env = dict(os.environ)
    env.pop("ATTENTION_COURSE_ROOT", None)
    return run(cmd, env, course.root, "python -m autograder grade")


def ours_scores(db: str) -> dict[tuple[str, str], float]:
    from autograder.gradebook import GradebookWriter

    with GradebookWriter(db) as w:
        return {(r["student"], r["chapter"]): float(r["score"]) for r in w.results()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=40)
    parser.add_argument("--chapters", nargs="*", help="chapter ids (default: every chapter with a release)")
    parser.add_argument("--workers", type=int, default=None, help="our worker processes (default: one per CPU)")
    parser.add_argument("--small", type=int, default=2, help="learners in the small class for the marginal cost "
                                                            "(0: skip the small runs)")
    parser.add_argument("--skip-stock", action="store_true", help="time only our command")
    parser.add_argument("--keep", type=Path, help="keep the course copies in this folder")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)

    repo = Course()
    chapters = args.chapters or chapters_present(repo)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-grading-"))
    if args.keep and work.exists():
        shutil.rmtree(work)
    try:
        stock = repo.copy_to(work / "stock")
        ours = repo.copy_to(work / "ours")
        for c in (stock, ours):
            c.grading.mkdir(parents=True, exist_ok=True)
            if (repo.grading / "expected").is_dir():
                shutil.copytree(repo.grading / "expected", c.grading / "expected")
        kinds = build_class(stock, chapters, args.learners)
        build_class(ours, chapters, args.learners)
        n = len(kinds)
        small_n = min(args.small, args.learners) * len(chapters)
        if args.small:  # the small class: the first learners, in a folder of their own
            for c in (stock, ours):
                for i in range(min(args.small, args.learners)):
                    student = f"learner{i:03d}"
                    shutil.copytree(c.grading / "submitted" / student, c.grading / "submitted_small" / student)
        print(f"class: {args.learners} learners x {len(chapters)} chapters = {n} notebooks "
              f"({', '.join(chapters)}); {os.cpu_count()} CPUs; work folder {work}", flush=True)

        numbers: dict = {"learners": args.learners, "chapters": chapters, "notebooks": n, "cpus": os.cpu_count()}
        ours_db = "sqlite:///" + str(ours.grading / "gradebook.db")
        numbers["ours_prepare_s"] = ours_prepare(ours, chapters)
        print(f"ours:  one-time reference profiles {numbers['ours_prepare_s']:.1f} s (cached on disk)", flush=True)
        if args.small:
            small_db = "sqlite:///" + str(ours.grading / "gradebook-small.db")
            numbers["ours_small_s"] = ours_grade(ours, chapters, small_db, args.workers,
                                                 ours.grading / "submitted_small")
        numbers["ours_s"] = ours_grade(ours, chapters, ours_db, args.workers)
        print(f"ours:  {numbers['ours_s']:.1f} s for {n} notebooks ({numbers['ours_s'] / n:.2f} s per notebook)",
              flush=True)
        if args.small:
            numbers["ours_marginal_s"] = (numbers["ours_s"] - numbers["ours_small_s"]) / max(1, n - small_n)
            print(f"ours:  {numbers['ours_small_s']:.1f} s for the small class of {small_n}; marginal cost "
                  f"{numbers['ours_marginal_s']:.2f} s per notebook", flush=True)
        ours_result = ours_scores(ours_db)

        if not args.skip_stock:
            stock_db = "sqlite:///" + str(stock.grading / "gradebook.db")
            numbers["stock_prepare_s"] = stock_prepare(stock, chapters, stock_db)
            print(f"stock: one-time generate_assignment + reference expectations {numbers['stock_prepare_s']:.1f} s",
                  flush=True)
            if args.small:
                small_db = "sqlite:///" + str(stock.grading / "gradebook-small.db")
                stock_prepare(stock, chapters, small_db)
                numbers["stock_small_s"] = stock_grade(stock, chapters, small_db, "submitted_small")
            numbers["stock_s"] = stock_grade(stock, chapters, stock_db)
            print(f"stock: {numbers['stock_s']:.1f} s for {n} notebooks ({numbers['stock_s'] / n:.2f} s per notebook)",
                  flush=True)
            if args.small:
                numbers["stock_marginal_s"] = (numbers["stock_s"] - numbers["stock_small_s"]) / max(1, n - small_n)
                print(f"stock: {numbers['stock_small_s']:.1f} s for the small class of {small_n}; marginal cost "
                      f"{numbers['stock_marginal_s']:.2f} s per notebook", flush=True)
            stock_result = stock_scores(stock_db)
            disagree = sorted(k for k in set(stock_result) | set(ours_result)
                              if stock_result.get(k) != ours_result.get(k))
            numbers["disagreements"] = [[s, c, kinds.get((s, c)), stock_result.get((s, c)), ours_result.get((s, c))]
                                        for s, c in disagree]
            numbers["ratio"] = numbers["stock_s"] / numbers["ours_s"]
            print(f"\nstock nbgrader autograde {numbers['stock_s']:.1f} s, ours {numbers['ours_s']:.1f} s: "
                  f"{numbers['ratio']:.2f}x faster", flush=True)
            if args.small:
                print(f"marginal per notebook: stock {numbers['stock_marginal_s']:.2f} s, "
                      f"ours {numbers['ours_marginal_s']:.2f} s")
            if disagree:
                print(f"SCORES DISAGREE for {len(disagree)} of {n} notebooks (student, chapter, kind, stock, ours):")
                for row in numbers["disagreements"]:
                    print("   ", *row)
            else:
                print(f"scores agree: {n} of {n} notebooks (total per learner per chapter)")
        if args.json:
            args.json.write_text(json.dumps(numbers, indent=1))
        return 1 if numbers.get("disagreements") else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
