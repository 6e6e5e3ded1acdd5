"""Speed of grading a whole class: stock sequential ``nbgrader autograde`` against ``python -m autograder grade``.

Builds a synthetic class (default: 40 learners x every chapter that has a source and a release notebook)
from ``autograder.submissions``, mixing reference, blank and catalogued-mistake submissions; grades it
with both, in two throwaway copies of the course, and

- checks that both give every learner the same total per chapter (the run fails if not);
- prints both wall times (each includes its command-line start-up: one ``nbgrader autograde`` call per
  chapter, one ``grade`` call in all), the ratio, and the per-notebook marginal cost, measured as
  (time(full class) - time(small class)) / (notebooks(full) - notebooks(small)) where the small class is
  the first ``--small`` learners.

One-time, per-chapter preparation that both paths cache on disk (the reference profile: our engine decides
from it, stock grading's kernels look reference values up in it) and registering the chapters in the
gradebooks are done before the clocks start, and reported apart ("cold profile"). Also printed, from the
same run:

- the no-op time: ``grade`` again with nothing to grade (it must start no worker);
- the first-result latency: seconds from the start of ``grade`` (warm profile cache) to the first notebook
  recorded, and the (warm) profile time inside that run;
- the per-stage breakdown of a notebook's time (``benchmarks/timed_engine.py`` times the engine's stages,
  the grading command the gradebook, feedback and report writes; ``--plain-engine`` skips it);
- with ``--dask``, the same class graded on a local Dask cluster (scheduler and 2 workers on 127.0.0.1)
  against the local backend, with a check that the scores are identical;
- with ``--repeat N``, every timed run N times, minimum and median.

    .venv/bin/python benchmarks/bench_grading.py                      # 40 learners, all chapters
    .venv/bin/python benchmarks/bench_grading.py --learners 6 --chapters 03_scoring_functions --repeat 3
    .venv/bin/python benchmarks/bench_grading.py --smoke     # the smallest size (tests/test_benchmarks.py runs it)

``--smoke``: our command only, with one worker (a second one only adds an engine start), on 2 learners (the reference
and the blank release) of chapter 9, whose memory-budget cells take the engine's second kind of sandbox job; no
small class, no stock nbgrader (one stock ``nbgrader autograde`` of the cheapest chapter costs 30 CPU seconds here,
more than the rest of the smoke run).
Its figures say nothing about speed: it checks that the benchmark's grading, no-op and per-stage paths still run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder import submissions  # noqa: E402
from autograder.course import Course  # noqa: E402


SMOKE = {"learners": 2, "chapters": ["09_efficient_attention"], "small": 0, "skip_stock": True, "workers": 1}


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


CPU = {"last": 0.0}  # CPU seconds (user + system) of the last run() and the processes it waited for


def run(cmd: list[str], env: dict, cwd: Path, what: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return elapsed


def nbgrader(course: Course, args: list[str], db: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args, f"--db={db}", "--log-level=WARN"]


def stock_prepare(course: Course, chapters: list[str], db: str, profiles: bool = True) -> float:
    """Register the chapters in ``db``; with ``profiles``, also build the reference profiles whose reference
    values stock nbgrader's kernels look up (they would build them on first use, inside the timed run)."""
    started = time.perf_counter()
    for ch in chapters:
        run(nbgrader(course, ["generate_assignment", ch, "--force",
                              f"--CourseDirectory.release_directory={course.root / 'release_scratch'}"], db),
            course.nbgrader_env(), course.root, f"nbgrader generate_assignment {ch}")
    if profiles:
        run([sys.executable, "-m", "autograder", "profile", *chapters, "--course", str(course.root)],
            dict(os.environ), course.root, "python -m autograder profile")
    return time.perf_counter() - started


def stock_grade(course: Course, chapters: list[str], db: str, submitted: str = "submitted") -> float:
    total, cpu = 0.0, 0.0
    for ch in chapters:
        total += run(nbgrader(course, ["autograde", ch, "--force",
                                       f"--CourseDirectory.submitted_directory=grading/{submitted}"], db),
                     course.nbgrader_env(), course.root, f"nbgrader autograde {ch}")
        cpu += CPU["last"]
    CPU["last"] = cpu
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
    """Build the engine's per-chapter reference profiles (cached on disk, like stock's expectations), with the
    public command (an engine starts only when one is missing)."""
    started = time.perf_counter()
    run([sys.executable, "-m", "autograder", "profile", *chapters, "--course", str(course.root)],
        dict(os.environ), course.root, "python -m autograder profile")
    return time.perf_counter() - started


def ours_grade(course: Course, chapters: list[str], db: str, workers: int | None, submitted: Path | None = None,
               force: bool = True, timed: bool = True, scheduler: str | None = None) -> tuple[float, dict]:
    """One ``python -m autograder grade`` run: (wall seconds, its --stats numbers)."""
    stats = course.root / f"stats-{time.monotonic_ns()}.json"
    cmd = [sys.executable, "-m", "autograder", "grade", *chapters, "--course", str(course.root), "--db", db,
           "--no-progress", "--stats", str(stats)]
    if force:
        cmd.append("--force")
    if workers:
        cmd += ["--workers", str(workers)]
    if submitted:
        cmd += ["--submitted", str(submitted)]
    if scheduler:
        cmd += ["--scheduler", scheduler]
    env = dict(os.environ)
    env.pop("ATTENTION_COURSE_ROOT", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    if timed:
        env["AUTOGRADER_ENGINE"] = "benchmarks.timed_engine"
    elapsed = run(cmd, env, course.root, "python -m autograder grade")
    numbers = json.loads(stats.read_text())
    numbers["cpu_s"] = CPU["last"]
    return elapsed, numbers


class DaskCluster:
    """A scheduler and two single-threaded workers on 127.0.0.1 (the README's commands)."""

    def __init__(self, work: Path, workers: int = 2):
        self.work, self.n, self.procs = work, workers, []

    def __enter__(self) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{port}"
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.work.mkdir(parents=True, exist_ok=True)
        log = open(self.work / "dask.log", "w")
        self.procs.append(subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1",
                                            "--port", str(port), "--no-dashboard"], cwd=self.work, env=env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        for i in range(self.n):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "dask", "worker", self.address, "--host", "127.0.0.1", "--nthreads", "1",
                 "--no-dashboard", "--name", f"bench-{i}", "--local-directory", str(self.work / f"w{i}")],
                cwd=self.work, env=dict(env, TMPDIR=str(self.work)), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))
        from distributed import Client

        with Client(self.address, timeout="120s") as client:
            client.wait_for_workers(self.n, timeout=300)
        return self.address

    def __exit__(self, *exc) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"min {min(values):.2f}, median {statistics.median(values):.2f} (n={len(values)})"


# The stages of one notebook, in the order they happen: the engine's (autograder.isolation.STAGES, through its
# on_stage hook), the worker's (feedback html), then the grading command's. A stage not listed here is printed after
# them, so a new one is never dropped.
STAGES = ["read + repair", "fork + job transfer", "sandbox setup + kernel start + teardown", "cell execution",
          "decision", "reference profile", "engine other", "feedback html", "executed notebook write",
          "feedback write", "gradebook write"]
ONCE = ("csv", "report")  # once per run, not per notebook


def print_breakdown(stats: dict, wall: float, workers: int) -> None:
    n = max(1, stats["processed"])
    stages = stats["stages"]
    print(f"\nwhere a notebook's time goes ({n} notebooks, seconds per notebook; worker-side stages run "
          f"{workers} at a time):")
    for name in STAGES + sorted(set(stages) - set(STAGES) - set(ONCE)):
        if name in stages:
            print(f"    {name:<42} {stages[name] / n:7.3f}")
    for name in ONCE:
        if name in stages:
            print(f"    {name + ' (once per run)':<42} {stages[name]:7.3f}  (whole run)")
    print(f"    {'reference profiles, cached (once per run)':<42} {stats['profile_seconds']:7.3f}  (whole run)")
    print(f"    {'wall time x workers / notebooks':<42} {wall * workers / n:7.3f}  (everything included)")


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
    parser.add_argument("--repeat", type=int, default=1, help="time every run this many times (min and median)")
    parser.add_argument("--stock-repeat", type=int, default=None,
                        help="time stock nbgrader this many times (default: --repeat); on the whole default class one "
                             "stock run takes about half an hour on 2 cores")
    parser.add_argument("--dask", action="store_true", help="also grade on a local Dask cluster (2 workers)")
    parser.add_argument("--cold", action="store_true",
                        help="build our reference profiles from scratch (not from the repository's cache)")
    parser.add_argument("--plain-engine", action="store_true",
                        help="grade with the plain engine (no per-stage timings)")
    parser.add_argument("--smoke", action="store_true", help="the smallest size: our command on 2 learners of "
                                                             "chapter 9 (sets --learners, --chapters, --small 0, "
                                                             "--skip-stock, --workers 1)")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)

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
                shutil.copytree(repo.grading / "expected", c.grading / "expected",
                                ignore=shutil.ignore_patterns("isolation-*") if args.cold and c is ours else None)
        cached = sorted(ch for ch in chapters if any((ours.grading / "expected").glob(f"isolation-{ch}-*.json")))
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
        workers = args.workers or os.cpu_count() or 1
        timed = not args.plain_engine
        ours_db = "sqlite:///" + str(ours.grading / "gradebook.db")
        numbers["ours_prepare_s"] = ours_prepare(ours, chapters)
        numbers["profiles_cold"] = [ch for ch in chapters if ch not in cached]
        print(f"ours:  one-time reference profiles {numbers['ours_prepare_s']:.1f} s (python -m autograder profile, "
              f"engine start included; built: {', '.join(numbers['profiles_cold']) or 'none, all were cached'}); "
              f"cached on disk", flush=True)
        runs = {"ours_s": [], "ours_small_s": [], "stock_s": [], "stock_small_s": [], "noop_s": [], "first_s": [],
                "ours_cpu_s": [], "stock_cpu_s": [], "noop_cpu_s": []}
        last_stats = None
        for rep in range(args.repeat):
            if args.small:
                small_db = "sqlite:///" + str(ours.grading / f"gradebook-small-{rep}.db")
                runs["ours_small_s"].append(ours_grade(ours, chapters, small_db, args.workers,
                                                       ours.grading / "submitted_small", timed=timed)[0])
            wall, last_stats = ours_grade(ours, chapters, ours_db, args.workers, timed=timed)
            runs["ours_s"].append(wall)
            runs["ours_cpu_s"].append(last_stats["cpu_s"])
            runs["first_s"].append(last_stats["first_result_seconds"])
            noop_wall, noop_stats = ours_grade(ours, chapters, ours_db, args.workers, force=False, timed=timed)
            if noop_stats["processed"] or noop_stats["workers_started"]:
                raise SystemExit(f"the no-op run graded {noop_stats['processed']} notebooks and started "
                                 f"{noop_stats['workers_started']} workers")
            runs["noop_s"].append(noop_wall)
            runs["noop_cpu_s"].append(noop_stats["cpu_s"])
            loaded = sorted(m for m, yes in noop_stats["imported"].items() if yes)
            print(f"ours:  run {rep + 1}: {wall:.1f} s for {n} notebooks; first notebook graded "
                  f"{last_stats['first_result_seconds']:.1f} s after the start (warm profiles: "
                  f"{last_stats['profile_seconds']:.1f} s); nothing-to-grade run {noop_wall:.2f} s, no worker started, "
                  f"loaded {', '.join(loaded) or 'neither torch, nbgrader, sqlalchemy nor matplotlib'}",
                  flush=True)
        numbers["ours_s"] = statistics.median(runs["ours_s"])
        numbers["ours_runs_s"] = runs["ours_s"]
        numbers["ours_cpu_runs_s"] = runs["ours_cpu_s"]
        numbers["noop_cpu_runs_s"] = runs["noop_cpu_s"]
        numbers["noop_runs_s"] = runs["noop_s"]
        numbers["first_result_runs_s"] = runs["first_s"]
        numbers["stages"] = last_stats["stages"]
        if args.small:
            numbers["ours_small_s"] = statistics.median(runs["ours_small_s"])
            marginals = [(a - b) / max(1, n - small_n) for a, b in zip(runs["ours_s"], runs["ours_small_s"])]
            numbers["ours_marginal_runs_s"] = marginals
            numbers["ours_marginal_s"] = statistics.median(marginals)
        ours_result = ours_scores(ours_db)

        if args.dask:
            dask_db = "sqlite:///" + str(ours.grading / "gradebook-dask.db")
            with DaskCluster(work / "dask") as address:
                numbers["dask_s"], _ = ours_grade(ours, chapters, dask_db, None, scheduler=address, timed=False)
            dask_result = ours_scores(dask_db)
            numbers["dask_disagreements"] = sorted(f"{s}/{c}" for s, c in set(dask_result) | set(ours_result)
                                                   if dask_result.get((s, c)) != ours_result.get((s, c)))

        if not args.skip_stock:
            stock_db = "sqlite:///" + str(stock.grading / "gradebook.db")
            numbers["stock_prepare_s"] = stock_prepare(stock, chapters, stock_db)
            print(f"stock: one-time generate_assignment + reference profiles {numbers['stock_prepare_s']:.1f} s",
                  flush=True)
            if args.small:
                small_db = "sqlite:///" + str(stock.grading / "gradebook-small.db")
                stock_prepare(stock, chapters, small_db, profiles=False)
            for rep in range(args.repeat if args.stock_repeat is None else args.stock_repeat):
                if args.small:
                    runs["stock_small_s"].append(stock_grade(stock, chapters, small_db, "submitted_small"))
                runs["stock_s"].append(stock_grade(stock, chapters, stock_db))
                runs["stock_cpu_s"].append(CPU["last"])
                print(f"stock: run {rep + 1}: {runs['stock_s'][-1]:.1f} s for {n} notebooks", flush=True)
            numbers["stock_s"] = statistics.median(runs["stock_s"])
            numbers["stock_runs_s"] = runs["stock_s"]
            numbers["stock_cpu_runs_s"] = runs["stock_cpu_s"]
            if args.small:
                marginals = [(a - b) / max(1, n - small_n) for a, b in zip(runs["stock_s"], runs["stock_small_s"])]
                numbers["stock_marginal_runs_s"] = marginals
                numbers["stock_marginal_s"] = statistics.median(marginals)
            stock_result = stock_scores(stock_db)
            disagree = sorted(k for k in set(stock_result) | set(ours_result)
                              if stock_result.get(k) != ours_result.get(k))
            numbers["disagreements"] = [[s, c, kinds.get((s, c)), stock_result.get((s, c)), ours_result.get((s, c))]
                                        for s, c in disagree]
            # Ratios run by run (same repetition: the machine's load is closest), then min and median. When stock
            # was timed fewer times than ours, each of our runs is set against the median stock run.
            paired = (runs["stock_s"] if len(runs["stock_s"]) == len(runs["ours_s"])
                      else [statistics.median(runs["stock_s"])] * len(runs["ours_s"]))
            numbers["ratio_runs"] = [a / b for a, b in zip(paired, runs["ours_s"])]
            numbers["ratio"] = statistics.median(numbers["ratio_runs"])

        print(f"\n=== {args.learners} learners x {len(chapters)} chapters = {n} notebooks, {os.cpu_count()} CPUs, "
              f"{workers} workers ===")
        print(f"ours, whole class (s):             {spread(runs['ours_s'])}   CPU {spread(runs['ours_cpu_s'])}")
        if not args.skip_stock:
            print(f"stock nbgrader autograde (s):      {spread(runs['stock_s'])}   CPU {spread(runs['stock_cpu_s'])}")
            against = ("" if len(runs["stock_s"]) == len(runs["ours_s"]) else
                       f"; stock timed {len(runs['stock_s'])}x, each of our runs against its median")
            print(f"ratio stock / ours:                {spread(numbers['ratio_runs'])}   (target: at least 5x{against})")
            paired_cpu = (runs["stock_cpu_s"] if len(runs["stock_cpu_s"]) == len(runs["ours_cpu_s"])
                          else [statistics.median(runs["stock_cpu_s"])] * len(runs["ours_cpu_s"]))
            cpu_ratio = [a / b for a, b in zip(paired_cpu, runs["ours_cpu_s"])]
            numbers["cpu_ratio_runs"] = cpu_ratio
            print(f"CPU-time ratio stock / ours:       {spread(cpu_ratio)}   (less sensitive to a loaded machine)")
        if args.small:
            print(f"ours marginal cost (s/notebook):   {spread(numbers['ours_marginal_runs_s'])}   "
                  f"(target: under 0.5 s)")
            if not args.skip_stock:
                print(f"stock marginal cost (s/notebook):  {spread(numbers['stock_marginal_runs_s'])}")
        print(f"nothing to grade (s):              {spread(runs['noop_s'])}   CPU {spread(runs['noop_cpu_s'])}   "
              f"(target: under 3 s; no worker started)")
        print(f"first notebook graded after (s):   {spread(runs['first_s'])}   (target: within 5 s, warm cache)")
        print(f"reference profiles, one-time (s):  {numbers['ours_prepare_s']:.1f}   (built cold for "
              f"{len(numbers['profiles_cold'])} of {len(chapters)} chapters, engine start included; then cached: "
              f"{last_stats['profile_seconds']:.2f} s inside a run)")
        if args.dask:
            verdict = ("identical scores" if not numbers["dask_disagreements"]
                       else f"SCORES DIFFER for {numbers['dask_disagreements']}")
            print(f"Dask, scheduler + 2 workers (s):   {numbers['dask_s']:.1f} vs local {runs['ours_s'][-1]:.1f}; "
                  f"{verdict}")
        if timed:
            print_breakdown(last_stats, runs["ours_s"][-1], min(workers, n))
        if not args.skip_stock:
            if numbers["disagreements"]:
                print(f"SCORES DISAGREE for {len(numbers['disagreements'])} of {n} notebooks (student, chapter, kind, "
                      f"stock, ours):")
                for row in numbers["disagreements"]:
                    print("   ", *row)
            else:
                print(f"scores agree: {n} of {n} notebooks (total per learner per chapter)")
        if args.json:
            args.json.write_text(json.dumps(numbers, indent=1))
        return 1 if numbers.get("disagreements") or numbers.get("dask_disagreements") else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
