"""Grading on submission, measured: ``python benchmarks/bench_serve.py [--latency N] [--burst N] [--smoke]``.

Runs ``python -m autograder serve`` (autograder/serve.py) warm on a throwaway course copy and a throwaway exchange,
with throwaway learner accounts (run as root), and prints:

- **latency**: for ``--latency`` submissions of ``--chapter`` (chapter 3) one after another by one learner
  through nbgrader's own ``submit`` (under the learner's uid), the seconds from ``submit`` returning to that
  submission's feedback page being fetchable in the exchange (the file ``fetch_feedback`` looks for), median and 95th percentile;
- **burst**: ``--burst`` submissions by as many learners arriving at once (inbox entries written as nbgrader's
  submit writes them), the seconds until every page is released, against ``python -m autograder grade`` on the
  same notebooks in another copy of the course, in the same run, with the same number of workers, and the ratio
  of their throughputs.

The service runs with ``--no-budget`` (one learner submits many times) and ``--workers 2`` (this machine's cores;
``--workers`` changes it). It is warm when the clocks start: its engines have started and graded one submission
(the chapter's reference profile is loaded). ``grade`` is timed from its command line, start-up included, as an
instructor runs it. ``--smoke``: 1 latency submission and a burst of 2 of chapter 1 (the cheapest real chapter to
grade) with one worker (tests/test_benchmarks.py runs it): every step above still runs once (a warm-up, a timed
submission through nbgrader, a burst, the ``grade`` comparison); its figures say nothing about speed.

    .venv/bin/python benchmarks/bench_serve.py               # 20 submissions, a burst of 100
    .venv/bin/python benchmarks/bench_serve.py --smoke
"""
from __future__ import annotations

import argparse
import os
import pwd
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import nbformat  # noqa: E402

from autograder import feedback_budget, submissions  # noqa: E402
from autograder.course import Course  # noqa: E402
from autograder.feedback_release import page_name  # noqa: E402
from tests import inbox  # noqa: E402
from tests.conftest import copy_reference_cache  # noqa: E402
from tests.test_exchange import AS_LEARNER  # noqa: E402

CHAPTER = "03_scoring_functions"
COURSE_ID = inbox.COURSE_ID
SMOKE = {"latency": 1, "burst": 2, "workers": 1, "chapter": "01_cognitive_attention"}


def env() -> dict:
    e = dict(os.environ)
    e.pop("ATTENTION_COURSE_ROOT", None)
    e["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), e.get("PYTHONPATH", "")] if p)
    return e


def run(cmd: list[str], **kw) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:5]} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def as_learner(name: str, exchange: Path, *args: str) -> None:
    run([sys.executable, "-c", AS_LEARNER, name, *args, f"--course={COURSE_ID}", f"--Exchange.root={exchange}",
         "--log-level=WARN"], env=dict(env(), JUPYTER_CONFIG_PATH=""), cwd="/")


def released(course: Course) -> int:
    path = feedback_budget.journal_path(course)
    try:
        return sum(1 for line in path.read_bytes().split(b"\n") if line.strip())
    except FileNotFoundError:
        return 0


def wait(condition, what: str, proc: subprocess.Popen, log: Path, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"serve: no {what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.02)


def latest_secret(name: str, chapter: str) -> str:
    cache = Path(pwd.getpwnam(name).pw_dir) / ".local/share/jupyter/nbgrader_cache" / COURSE_ID
    latest = sorted(cache.glob(f"{name}+{chapter}+*"), key=lambda p: p.name.split("+")[2])[-1]
    return (latest / "submission_secret.txt").read_text()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=int, default=20, help="submissions timed one after another (20)")
    parser.add_argument("--burst", type=int, default=100, help="submissions arriving at once (100)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes for serve and grade (2)")
    parser.add_argument("--chapter", default=CHAPTER, help=f"the chapter submitted ({CHAPTER})")
    parser.add_argument("--smoke", action="store_true", help="the smallest size: " + str(SMOKE))
    args = parser.parse_args()
    if args.smoke:
        args.latency, args.burst, args.workers, args.chapter = (SMOKE[k] for k in ("latency", "burst", "workers",
                                                                                  "chapter"))
    chapter = args.chapter
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark makes throwaway learner accounts")
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    course = Course().copy_to(tmp / "served")
    copy_reference_cache(course.root)
    reference = submissions.reference(course, chapter)
    with inbox.accounts(args.burst + 1, "b") as names, inbox.exchange() as exchange:
        learner, crowd = names[0], names[1:]
        ex = [f"--Exchange.root={exchange}", "--log-level=WARN"]
        run([sys.executable, "-m", "nbgrader", "db", "assignment", "add", chapter, *ex], env=course.nbgrader_env(),
            cwd=course.root)
        run([sys.executable, "-m", "nbgrader", "release_assignment", chapter, *ex], env=course.nbgrader_env(),
            cwd=course.root)
        as_learner(learner, exchange, "fetch_assignment", chapter)
        pw = pwd.getpwnam(learner)
        path = Path(pw.pw_dir) / chapter / f"{chapter}.ipynb"
        nbformat.write(reference, path)
        os.chown(path, pw.pw_uid, pw.pw_gid)
        log = tmp / "serve.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "autograder", "serve", "--course", str(course.root),
                                     "--exchange", str(exchange), "--chapters", chapter, "--no-budget",
                                     "--no-similarity", "--poll", "0.05", "--refresh", "600",
                                     "--workers", str(args.workers)],
                                    stdout=out, stderr=subprocess.STDOUT, cwd=course.root, env=env(),
                                    start_new_session=True)
        try:
            # warm: the service's engines up and the chapter prepared by one graded submission (not timed)
            as_learner(learner, exchange, "submit", chapter)
            wait(lambda: released(course) >= 1, "warm-up release", proc, log)
            latencies = []
            for _ in range(args.latency):
                as_learner(learner, exchange, "submit", chapter)
                returned = time.perf_counter()
                page = exchange / COURSE_ID / "feedback" / page_name(
                    {"submission_secret.txt": latest_secret(learner, chapter).encode()}, chapter)
                wait(page.is_file, "feedback page", proc, log)
                latencies.append(time.perf_counter() - returned)
            before = released(course)
            started = time.perf_counter()
            for i, name in enumerate(crowd):
                nb = nbformat.from_dict(reference)
                nb.cells.append(nbformat.v4.new_markdown_cell(f"learner {i}"))
                inbox.submit(exchange, name, chapter, nb)
            wait(lambda: released(course) >= before + len(crowd), "burst releases", proc, log)
            served_s = time.perf_counter() - started
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        # the same notebooks, graded by the instructor's command in a course of their own
        other = Course().copy_to(tmp / "graded")
        copy_reference_cache(other.root)
        for student in crowd:
            folder = course.grading / "submitted" / student / chapter
            submissions.write_submission(other, student, chapter,
                                         nbformat.read(folder / f"{chapter}.ipynb", as_version=4))
        started = time.perf_counter()
        run([sys.executable, "-m", "autograder", "grade", chapter, "--course", str(other.root), "--no-progress",
             "--no-similarity", "--workers", str(args.workers)], env=env(), cwd=other.root)
        graded_s = time.perf_counter() - started
    n, timed = len(crowd), f"{len(latencies)} submission" + "s" * (len(latencies) != 1)
    print(f"latency, submit returned -> feedback fetchable (s): median {statistics.median(latencies):.2f}  "
          f"p95 {percentile(latencies, 0.95):.2f}  ({timed}, one learner)")
    print(f"burst of {n}, serve (warm) (s): {served_s:.1f}  {n / served_s:.2f} notebooks/s")
    print(f"burst of {n}, grade (s): {graded_s:.1f}  {n / graded_s:.2f} notebooks/s")
    print(f"serve throughput / grade throughput: {graded_s / served_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
