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

The pipeline, one way: ``discovery`` (intake: the submissions, their digests, arrivals and resume keys) ->
``backends`` (local or Dask workers, one warm engine each) -> ``results.GradingResult`` -> the sinks: the
gradebook (``gradebook``), the executed notebook, feedback page, exchange files and CSVs (``outputs``), the
similarity check (``similarity``) and the class report (``report``). This module is the command that runs it;
``run_summary`` counts what it did.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from . import arrivals, learner_files
from .atomic_files import write_atomic
from .backends import DaskBackend, LocalBackend
from .course import Course
from .discovery import (ENGINE_MODULE, Task, attach_arrivals, discover, engine_module_name, grading_code_hash,
                        missing_result, recorded_keys, submission_digest, submission_key)
from .output_files import OUTPUTS_STATE, outputs_current, outputs_digest
from .results import GradingResult, Late
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

    course_files = learner_files.course_inodes([course.solutions, course.chapters_dir])
    tasks = discover(submitted, chapters, course_files, warn=log)
    summary = Summary(submissions=len(tasks))
    # The engine's defaults are part of its code (hashed); only overrides need to enter the key.
    code_hash = grading_code_hash()
    limits_repr = json.dumps(limits, sort_keys=True)
    sources = {ch: course.source_notebook(ch).read_bytes() for ch in chapters}
    # One notebook's bytes at a time (up to intake.MAX_NOTEBOOK_BYTES each, for a whole class): digests are kept.
    digests = {id(task): submission_digest(task) for task in tasks}
    # The submission time is the arrival the instructor's side recorded for this very notebook (autograder/
    # arrivals.py), never the learner's timestamp.txt; it enters the key (a time recorded later regrades).
    attach_arrivals(tasks, arrivals.Ledger.read(arrivals.ledger_path(course)), digests)
    for task in tasks:
        task.key = submission_key(task, sources[task.chapter], code_hash, limits_repr, digests[id(task)])
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
        # The sinks load nbgrader, SQLAlchemy, nbformat and (the report) matplotlib: imported only once there is
        # something to grade, so that a run with nothing to do loads none of them (tests/test_batch.py checks).
        # They import nothing of this module (tests/test_import_graph.py: no cycle).
        from .gradebook import GradebookWriter
        from .late_policy import Policy
        from .outputs import write_csv
        from .report import write_report
        from .similarity import run as find_similar

        with GradebookWriter(db_url, policy=Policy.for_course(course)) as writer:
            rows = _grade_into(writer, course, tasks, sources, backend, summary, force, progress, log, started)
        summary.workers_started = getattr(backend, "started", 0)
        t0 = time.perf_counter()
        write_csv(course, rows)  # while the workers shut down
        summary.add_stage("csv", time.perf_counter() - t0)
        similar = None
        if similarity:  # submissions that look copied (autograder/similarity.py), in the CSV and the report
            t0 = time.perf_counter()
            # In a child with CPU, memory and wall budgets (autograder/similarity_stage.py): a check that does
            # not finish is a line here, in similarity.csv and in the report, and grading goes on.
            stage = find_similar(course, chapters, submitted)
            similar = stage.sections
            summary.add_stage("similarity", time.perf_counter() - t0)
            log(stage.line())
        if report:
            t0 = time.perf_counter()
            path = write_report(course, rows, failures=summary.failures, similarity=similar)
            summary.add_stage("report", time.perf_counter() - t0)
            log(f"class report: {path}")
        if not summary.failures:  # a run with failures must write its report again next time
            write_atomic(course.grading / OUTPUTS_STATE, json.dumps(
                {"digest": outputs_digest({(r.student, r.chapter): r.key for r in rows}),
                 "report": report}))
    finally:
        backend.stop()
    summary.seconds = time.perf_counter() - started
    log(summary.line())
    return summary


def _grade_into(writer, course: Course, tasks: list[Task], sources: dict, backend, summary: Summary, force: bool,
                progress: bool, log, started: float) -> list[GradingResult]:
    # Heavy, and needed only once something is graded (see grade): nbformat, tqdm and the sinks.
    import nbformat
    from tqdm import tqdm

    from attention_course.cells import graded_cells

    from .late_policy import how_late
    from .outputs import copy_exchange_files, write_outputs

    max_scores = {}
    for ch in sorted({t.chapter for t in tasks}):
        nb = nbformat.reads(sources[ch].decode(), as_version=4)
        writer.register_chapter(ch, nb)
        max_scores[ch] = sum(pts for _, pts in graded_cells(nb))
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
        for stage, seconds in result.timings:
            summary.add_stage(stage, seconds)
        if not result.recorded:
            summary.failed += 1
            summary.failures.append({"student": task.student, "chapter": task.chapter, "reason": result.reason})
            bar.write(f"FAILED {task.student}/{task.chapter}: {result.reason[-600:]}")
        else:
            # the task's ids (the worker saw the same) and what discovery found wrong with the folder
            result = result.replace(student=task.student, chapter=task.chapter, flags=(*task.flags, *result.flags))
            t0 = time.perf_counter()
            timestamp = task.arrival.arrived if task.arrival else None  # the recorded arrival, or none
            unsure_until = task.arrival.unsure_until if task.arrival else None  # a ctime's lag (arrivals.py)
            late = writer.lateness_of(task.student, task.chapter, timestamp, result.score, unsure_until)
            # shown on the feedback page (autograder/deadlines.py owns the policy): how late, or held, with the
            # recorded arrival and, beside it, the learner's claim
            result = result.replace(late=Late(
                seconds=late.seconds_late, penalty=late.points,
                text=how_late(late.seconds_late) if late.seconds_late > 0 else "", policy=writer.policy.describe(),
                held=late.held, arrived=task.arrival.describe() if task.arrival else "",
                claimed=task.claimed_time or ""))
            write_outputs(course, result, summary)
            copy_exchange_files(course, task)
            t1 = time.perf_counter()
            writer.write_result(result, task.key, timestamp, unsure_until)
            summary.add_stage("gradebook write", time.perf_counter() - t1)
            summary.graded += result.status == "graded"
            summary.zero += result.status == "zero"
            summary.scored_zero += result.score <= 0
            summary.flagged += bool(result.flags)
            if summary.first_result_seconds is None and not task.refusal:
                summary.first_result_seconds = t0 - started
        bar.update(1)
        bar.set_postfix(zero=summary.zero, flagged=summary.flagged, failed=summary.failed, refresh=False)

    with tqdm(total=len(todo), unit="nb", desc="grading", disable=not progress, file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5) as bar:
        if runnable:
            for task, result in backend.run(runnable):
                record(task, result, bar)
        for task in missing:  # after the workers: their feedback is rendered here
            record(task, missing_result(task, max_scores[task.chapter]), bar)
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
