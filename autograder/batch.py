"""Grade a whole class: ``python -m autograder grade [CHAPTER ...] [options]``.

Reads nbgrader's ``submitted/`` layout (``grading/submitted/<student>/<chapter>/<chapter>.ipynb``) and, for
every submission, runs the isolated grading engine (``autograder.isolation.Engine``: a warm process that
has imported torch once and forks a sandboxed child per notebook), then writes

- the nbgrader gradebook (``--db``; SQLite ``grading/gradebook.db`` by default, PostgreSQL through a
  ``postgresql+psycopg2://USER@HOST:PORT/DB`` URL), one transaction per notebook as soon as it is graded;
- the executed notebook (``grading/autograded/<student>/<chapter>/<chapter>.ipynb``, for formgrader);
- per-learner feedback (``grading/feedback/<student>/<chapter>/<chapter>.html``);
- ``grading/grades.csv`` (one row per learner and chapter), ``grading/grades_by_exercise.csv`` (one row
  per graded cell) and the class report ``grading/reports/class_report.html``.

Parallelism: ``--workers N`` local worker processes (default: one per CPU), each holding one warm engine;
results come back to this process, the only gradebook writer. ``--scheduler tcp://HOST:PORT`` grades on a
Dask distributed cluster instead: the submission bytes and the course files grading needs (source
notebooks, reference profiles) are shipped to the workers, so they need this repository's code and
Python environment but no shared filesystem (start them with ``dask worker tcp://HOST:PORT --nthreads 1``).

Resuming: each recorded notebook carries a key (hash of the submission, its chapter's source notebook and
the grading code). A run grades only submissions without a matching key, so a run killed at any point
and started again finishes the job; ``--force`` regrades everything.

The pipeline, one way (autograder/pipeline.py, which ``serve`` walks too): intake (the submissions, their
digests, arrivals and resume keys) -> ``backends`` (local or Dask workers, one warm engine each) ->
``results.GradingResult`` -> the sinks: the executed notebook, feedback page and exchange files (``outputs``), the
gradebook (``gradebook``), then for the class the CSVs, the similarity check (``similarity``) and the class report
(``report``). This module is the command that runs it once; ``run_summary`` counts what it did.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from .atomic_files import write_atomic
from .backends import DaskBackend, LocalBackend
from .course import Course
from .discovery import ENGINE_MODULE, Task, engine_module_name, recorded_keys
from .output_files import outputs_current
from .pipeline import Recorder, chapter_maxima, intake, write_class_outputs
from .results import GradingResult
from .run_summary import Summary


def grade(course: Course, chapters: list[str] | None = None, *, workers: int | None = None,
          scheduler: str | None = None, db_url: str | None = None, force: bool = False,
          submitted: Path | None = None, limits: dict | None = None, progress: bool = True,
          report: bool = True, similarity: bool = True, log=print) -> Summary:
    """Grade what needs grading. The decision comes first and is cheap: every submission's key (a hash of
    its bytes, its chapter's source, the grading code and the limits) against the keys recorded in the
    gradebook. Only when something is left are workers started (they import torch and start a sandbox
    zygote) and nbgrader imported; with nothing left and the CSVs and report written from exactly the
    recorded results, the run ends there."""
    started = time.perf_counter()
    all_chapters = course.chapters()
    chapters = list(chapters or all_chapters)
    unknown = [c for c in chapters if c not in all_chapters]
    if unknown:
        raise SystemExit(f"unknown chapter(s) {unknown}; the course has {all_chapters}")
    submitted = Path(submitted) if submitted else course.grading / "submitted"
    db_url = db_url or course.db_url
    limits = dict(limits or {})
    module_name = engine_module_name()

    stage, tasks = intake(course, chapters, submitted, limits, warn=log)
    summary = Summary(submissions=len(tasks))
    done = recorded_keys(db_url)  # None: not SQLite, the writer answers below
    todo = tasks
    if done is not None and not force:
        todo = [t for t in tasks if done.get((t.student, t.chapter)) != t.key]
        if not todo and outputs_current(course, done, report):
            summary.up_to_date = len(tasks)
            summary.seconds = time.perf_counter() - started
            log(f"{len(tasks)} submissions: {len(tasks)} up to date, nothing to grade (grades.csv and the class "
                f"report are current)")
            log(summary.line())
            return summary
    expected_runnable = sum(1 for t in todo if not t.refusal)

    if scheduler:
        backend = DaskBackend(scheduler, course, chapters, module_name, limits)
    else:
        backend = LocalBackend(workers or os.cpu_count() or 1, course.root, module_name, limits)
    try:
        backend.start(expected_runnable)  # workers warm up (torch import) while this process opens the gradebook
        # The gradebook loads nbgrader and SQLAlchemy: imported only once there is something to grade, so that a
        # run with nothing to do loads neither (tests/test_batch.py checks). It imports nothing of this module.
        from .gradebook import GradebookWriter
        from .late_policy import Policy

        with GradebookWriter(db_url, policy=Policy.for_course(course)) as writer:
            rows = _grade_into(writer, Recorder(course, writer, summary, started), tasks, stage.sources, backend,
                               summary, force, progress, log)
        summary.workers_started = getattr(backend, "started", 0)
        write_class_outputs(course, chapters, submitted, rows, summary, report=report, similarity=similarity,
                            log=log)
    finally:
        backend.stop()
    summary.seconds = time.perf_counter() - started
    log(summary.line())
    return summary


def _grade_into(writer, recorder: Recorder, tasks: list[Task], sources: dict, backend, summary: Summary,
                force: bool, progress: bool, log) -> list[GradingResult]:
    from tqdm import tqdm  # a progress bar only where something is graded

    max_scores = chapter_maxima(writer, sources, {t.chapter for t in tasks})
    done = {} if force else writer.done_keys()
    todo = [t for t in tasks if done.get((t.student, t.chapter)) != t.key]
    summary.up_to_date = len(tasks) - len(todo)
    missing = [t for t in todo if t.refusal]
    runnable = [t for t in todo if not t.refusal]
    log(f"{len(tasks)} submissions: {summary.up_to_date} up to date, {len(todo)} to grade "
        + backend.describe(len(runnable)))
    if not runnable:
        backend.stop()
    else:
        # Once per chapter, before anyone grades it (the engine's reference profile; cached on disk).
        t0 = time.perf_counter()
        backend.prepare(sorted({t.chapter for t in runnable}))
        summary.profile_seconds = time.perf_counter() - t0

    def record(task: Task, result: GradingResult, bar) -> None:
        if recorder.record(task, result) is None:
            bar.write(f"FAILED {task.student}/{task.chapter}: {result.reason[-600:]}")
        bar.update(1)
        bar.set_postfix(zero=summary.zero, flagged=summary.flagged, failed=summary.failed, refresh=False)

    with tqdm(total=len(todo), unit="nb", desc="grading", disable=not progress, file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5) as bar:
        if runnable:
            for task, result in backend.run(runnable):
                record(task, result, bar)
        for task in missing:  # after the workers: their feedback is rendered here
            if recorder.record_missing(task, max_scores[task.chapter]) is None:
                bar.write(f"FAILED {task.student}/{task.chapter}")
            bar.update(1)
    return writer.results()


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder grade",
                                     description="Grade every submission of one or all chapters, in parallel "
                                                 "and resumably, into the nbgrader gradebook.")
    parser.add_argument("chapters", nargs="*", metavar="CHAPTER", help="chapter ids (default: all)")
    parser.add_argument("--workers", type=int, default=None,
                        help="local worker processes, one warm engine each (default: one per CPU)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="grade on this Dask distributed cluster")
    parser.add_argument("--db", metavar="URL", help="gradebook URL (default: sqlite grading/gradebook.db; "
                                                    "postgresql+psycopg2://USER@HOST:PORT/DB for PostgreSQL)")
    parser.add_argument("--force", action="store_true", help="regrade submissions already graded")
    parser.add_argument("--submitted", type=Path, metavar="DIR",
                        help="submissions folder, DIR/<student>/<chapter>/<chapter>.ipynb "
                             "(default: grading/submitted)")
    parser.add_argument("--course", type=Path, metavar="DIR", help="course root (default: this repository)")
    parser.add_argument("--cell-timeout", type=float, help="seconds per cell (engine default otherwise)")
    parser.add_argument("--notebook-timeout", type=float, help="seconds per notebook (engine default otherwise)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-similarity", action="store_true",
                        help="skip the check for submissions that look copied (autograder/similarity.py)")
    parser.add_argument("--stats", type=Path, metavar="FILE.json",
                        help="write the run's numbers here (counts, per-stage seconds, profile time, first result)")
    # The engine's module (nbformat, the sandbox, the kit builder): the command needs its options and preflight;
    # grade() itself, run in-process by tests and benchmarks with another engine, does not load it.
    from .isolation import IsolationUnavailable, add_isolation_arguments, preflight

    add_isolation_arguments(parser)
    args = parser.parse_args(argv)
    limits = {k: v for k, v in (("isolation", args.isolation), ("require", args.require)) if v and v != "auto"}
    if not args.scheduler and engine_module_name() == ENGINE_MODULE:  # Dask workers report their own level
        try:
            print(preflight(args.isolation, args.require), flush=True)
        except IsolationUnavailable as err:
            print(f"grading stopped: {err}", file=sys.stderr)
            return 2
    if args.cell_timeout:
        limits["cell_timeout_s"] = args.cell_timeout
    if args.notebook_timeout:
        limits["notebook_timeout_s"] = args.notebook_timeout
    signal.signal(signal.SIGTERM, _sigterm)
    course = Course(args.course) if args.course else Course()
    try:
        summary = grade(course, args.chapters, workers=args.workers, scheduler=args.scheduler, db_url=args.db,
                        force=args.force, submitted=args.submitted, limits=limits,
                        progress=not args.no_progress, similarity=not args.no_similarity)
    except KeyboardInterrupt:
        print("interrupted: what was graded is recorded; run the same command again to finish", file=sys.stderr)
        return 130
    except RuntimeError as err:
        print(f"grading stopped: {err}", file=sys.stderr)
        return 2
    if args.stats:
        stats = summary.to_json()
        # what this process had to load: a run with nothing to grade loads neither
        stats["imported"] = {m: m in sys.modules for m in ("torch", "nbgrader", "sqlalchemy", "matplotlib")}
        write_atomic(args.stats, json.dumps(stats, indent=1))
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
