"""Isolated, tamper-proof grading of one notebook at a time: the engine behind batch grading.

``Engine(course_root, limits)`` keeps a warm zygote (:mod:`autograder.sandbox`) and grades one submission
per :meth:`Engine.grade` call:

1. **Read** the file (:func:`autograder.structure.load_submission`): a wrong file name, an empty file,
   malformed JSON or something that is not a notebook gives status ``zero`` with that reason.
2. **Repair** the structure against ``solutions/<chapter>/<chapter>.ipynb``
   (:func:`autograder.structure.repair`): test and read-only cells come from the source (hidden tests
   included), edits, deletions and duplicated ``grade_id``\\ s are flagged.
3. **Execute** every code cell in a fresh sandbox forked from the zygote, at the strongest isolation level
   this account reaches (``Limits.isolation``; docs/isolation.md): no network, no view of the course tree
   (solutions, gradebook, other learners), a private scratch folder, memory/process/output limits, a
   per-cell timeout and a per-notebook wall clock (see :mod:`autograder.sandbox` for how). Graded test cells run rewritten so that no expected value exists in
   the learner's process (see :mod:`autograder.trusted`), and are seeded before they run.
4. **Decide** each graded test cell here, outside the learner's process, from the values the kernel
   recorded and a *reference profile* of the chapter (:meth:`Engine.profile`): the reference solution run
   through the same sandbox twice with different seeds and once more with every module re-initialised
   (:mod:`autograder.reinitialise`), which gives each check's kind, parameters and reference value and
   tells reproducible expected values from self-consistency ones. A kernel that dies
   (exit, segfault, out of memory, process limit, wall clock) gives the notebook zero with the reason.

   The reference is also graded like a learner's notebook before the profile is used: it must score
   full marks (a cell that needs it switches to the conservative rewrite; otherwise a grader error).

The profile is cached under ``grading/expected/isolation-<chapter>-<hash>.json`` (the hash covers the
source notebook and this engine's version) and never enters a learner's sandbox.

Semantics worth knowing: a cell that runs past ``cell_timeout_s`` is interrupted and the notebook goes on
(like nbclient's interrupt-on-timeout); a notebook that ignores the interrupt runs into
``notebook_timeout_s`` and scores zero. ``sys.exit()`` in a cell is an error in that cell, as in Jupyter;
``os._exit``, a crash, the memory limit (OOM kill), or hitting the process limit (a fork bomb) give zero.
Printed output beyond ``max_output_mb`` is dropped with a note; check records are kept apart from it, so a
noisy correct notebook keeps its points. ``executed_notebook`` (the repaired notebook with the kernel's
outputs, hidden tests included, as nbgrader's autograded notebooks) is for instructors; learners get
:func:`feedback_html`.

Result: a :class:`autograder.results.GradingResult` (its one owner: fields, the checks that make learner text
safe, the wire format), with per-cell results (:class:`~autograder.results.CellResult`), the flags, the reason, the
executed notebook (nbformat JSON) and the isolation level it ran at.

``status`` is ``zero`` for an unusable or killed notebook and ``failed`` for a grader problem (never the
learner's fault: report it). stderr output never costs points. Command line:
``python -m autograder grade-one CHAPTER NOTEBOOK [--student NAME] [--json OUT] [--html OUT]
[--isolation auto|root|user|process] [--require LEVEL]``.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import nbformat

from attention_course.cells import (GRADING_SEED_BASE, RECORD_MIME, cell_seed, grade_id, graded_cells, is_graded_run,
                                    is_graded_test, is_solution, records_in)
from attention_course.expected import (drawn_seeds, profile_digest, read_profile,  # noqa: F401 - the format's owner
                                       reference_table)
from attention_course.kinds import REGISTRY
from attention_course.language import speaking

from . import cell_reach, intake, kit, learner_files, memory_budget, sandbox, structure, trusted
from .class_language import class_language, grading
from .course import Course
from .reinitialise import reinitialised
from .results import CellResult, GradingResult
from .sandbox.runner import WARM_UPS
from .trusted import feedback_html  # noqa: F401 - part of this module's interface

ENGINE_VERSION = "isolation-8"  # 8: expected values that move with the parameters stay in the kernel
SEED_BASES = (GRADING_SEED_BASE, 2_000_029)  # the grading seed (Checks' too), and the one the reference is re-run with
# The stages Engine(on_stage=...) reports for each notebook (see Engine).
STAGES = ("read + repair", "fork + job transfer", "sandbox setup + kernel start + teardown", "cell execution",
          "decision", "reference profile", "engine other")


@dataclass
class Limits:
    cell_timeout_s: float = 60
    notebook_timeout_s: float = 300
    memory_mb: int = 2048
    max_procs: int = 64
    max_output_mb: float = 5
    scratch_mb: int = 64  # the kernel's private /scratch (a tmpfs, counted in memory_mb)
    cpus: float = 1.0  # CPU quota per sandbox (cgroup cpu controller, where present)
    # may the kernel start processes and programs? A memory budget's job may not (memory_budget.limits_for):
    # seccomp refuses fork, exec and clone without CLONE_THREAD there (autograder/sandbox/policy.py)
    processes: bool = True
    # does freed memory go back to the operating system at once? A memory budget's job: yes (memory_budget.limits_for,
    # autograder/sandbox/policy.py allocator_options), so its cgroup counts what the notebook holds, not what
    # glibc's heap kept after the notebook freed it
    release_freed_memory: bool = False
    # how, not how much, but it travels the same way (local workers, Dask workers, the resume key)
    isolation: str = "auto"  # auto (strongest reachable) | root | user | process: see docs/isolation.md
    require: str = ""  # refuse to grade below this level


class GraderError(Exception):
    """Something is wrong on the grader's side (not the learner's): the result's status is ``failed``."""


class IsolationUnavailable(GraderError):
    """The isolation level asked for (``--isolation``) or required (``--require``) cannot be reached here."""


def profile_path(course: Course, chapter: str) -> Path:
    """Where the chapter's reference profile is cached: named by a hash of its source and this engine's version."""
    src_path = course.source_notebook(chapter)
    if not src_path.is_file():
        raise GraderError(f"unknown chapter {chapter!r}: no {src_path}")
    digest = hashlib.sha256(src_path.read_bytes() + ENGINE_VERSION.encode()).hexdigest()[:16]
    return course.grading / "expected" / f"isolation-{chapter}-{digest}.json"


def _digest(path: Path) -> str:
    """The digest a profile file is named by (and must carry inside): read as the file format's owner reads it."""
    return profile_digest(path)


def cached_profile(course: Course, chapter: str, path: Path | None = None) -> dict | None:
    """The chapter's cached reference profile, or None when there is none for this source and engine."""
    return read_profile(path or profile_path(course, chapter))


def build_profiles(course_root: Path, chapters: list[str], limits: "Limits | None" = None,
                   engines: int = 1) -> list[Path]:
    """Build (or reuse) the reference profiles of ``chapters`` with warm engines; returns their cache files.

    With ``engines`` > 1, that many engines (one thread each) take the next chapter still to build, in the order
    given, as each becomes free: a chapter that trains a model takes ten times as long as one that does not, so
    a fixed split leaves engines idle. When every profile is cached no engine starts: stock nbgrader's kernels
    ask for the path of a profile through ``python -m autograder profile`` (attention_course.expected.load_expected),
    once per notebook."""
    course = Course(course_root)
    paths = [profile_path(course, chapter) for chapter in chapters]
    todo = [chapter for chapter, path in dict(zip(chapters, paths)).items()  # each chapter once
            if cached_profile(course, chapter, path) is None]
    if not todo:
        return paths
    lock, failed = threading.Lock(), threading.Event()

    def build() -> None:
        try:
            with Engine(course_root, limits or Limits()) as engine:
                missing = engine.missing_capabilities()
                if missing:
                    raise GraderError(f"isolated grading is not available on this machine: missing {', '.join(missing)}")
                while not failed.is_set():  # one engine's error stops the others at their next chapter
                    with lock:
                        if not todo:
                            return
                        chapter = todo.pop(0)
                    engine.profile(chapter)
        except BaseException:
            failed.set()
            raise

    count = max(1, min(engines, len(todo)))
    if count == 1:
        build()  # in the caller's thread: Ctrl-C stops it at once
        return paths
    with ThreadPoolExecutor(max_workers=count) as pool:
        try:
            for done in as_completed([pool.submit(build) for _ in range(count)]):
                done.result()  # the first engine's error to happen (a missing capability, a failing reference)
        except BaseException:
            failed.set()  # that error, or Ctrl-C here: the other engines stop at their next chapter
            raise
    return paths


class Engine:
    """A warm zygote plus the trusted decision. Use as a context manager; one grade() at a time.

    ``on_stage(name, seconds)``, if given, is called at the end of every :meth:`grade`, once per stage of that
    notebook, in the order the stages first ran (how ``benchmarks/timed_engine.py`` times grading; no stage is
    timed without it). The stages (:data:`STAGES`), summed over the notebook's sandbox jobs:

    - ``read + repair``: reading the submission (intake) and rebuilding its structure from the source;
    - ``fork + job transfer``: the round trip to the zygote minus what the sandbox's monitor measured itself;
    - ``sandbox setup + kernel start + teardown``: the monitor's time minus its cells';
    - ``cell execution``: the cells, as the kernel timed them (the learner's process: a figure that is not a
      duration counts as 0, and the sum is capped at the monitor's time);
    - ``decision``: the trusted decision of every graded cell;
    - ``reference profile``: building the chapter's profile, only when :meth:`grade` had to (not cached);
    - ``engine other``: the rest of :meth:`grade` (profile lookup, merging outputs, JSON conversion).
    """

    def __init__(self, course_root: Path, limits: Limits = Limits(),
                 on_stage: Callable[[str, float], None] | None = None):
        self.course = Course(course_root)
        # Every check is decided and every message written in the class's language (course configuration), never
        # in one a learner's kernel claims: see autograder/class_language.py.
        self.language = class_language(self.course)
        self.limits = limits
        self.on_stage = on_stage
        self._clock: dict[str, float] | None = None  # seconds per stage of the grade() under way, with on_stage
        self.isolation: dict = {}  # the level the zygote reached: {"level", "label", "lacks", ...}
        self.reachable: list[str] = []
        self._proc: subprocess.Popen | None = None
        self._lock = threading.RLock()
        self._profiles: dict[str, dict] = {}
        self._hidden: dict[str, tuple[bytes, learner_files.HiddenRuns]] = {}  # per chapter, keyed by its files' hash
        self._test_reach: dict[str, tuple[bytes, dict[str, set[str]]]] = {}  # per chapter, keyed by its source's hash
        self._log = None
        self._warm: set[str] = set()  # lazy imports the running zygote has been asked to make (runner.WARM_UPS)

    # -- zygote lifecycle -------------------------------------------------------------------------------

    def start(self) -> "Engine":
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self
            repo = Path(__file__).resolve().parent.parent
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            env.pop("ATTENTION_COURSE_ROOT", None)
            self._log = tempfile.TemporaryFile()
            self._warm = set()
            argv = [sys.executable, "-m", "autograder.sandbox", "--isolation", self.limits.isolation or "auto"]
            if self.limits.require:
                argv += ["--require", self.limits.require]
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=self._log, cwd="/", env=env,
                                          start_new_session=True, bufsize=0)
            try:
                ready = sandbox.read_frame(self._proc.stdout.fileno(), 1 << 20, time.monotonic() + 180)
            except (TimeoutError, sandbox.ProtocolError) as exc:
                self._kill()
                raise GraderError(f"the sandbox zygote did not start ({type(exc).__name__}): {self._log_tail()}")
            if isinstance(ready, dict) and ready.get("error"):
                self._kill()
                raise IsolationUnavailable(str(ready["error"]))
            if not isinstance(ready, dict) or not ready.get("ready"):
                self._kill()
                raise GraderError(f"the sandbox zygote did not start: {self._log_tail()}")
            self.isolation = ready.get("isolation", {})
            self.reachable = list(ready.get("reachable", []))
            return self

    def missing_capabilities(self) -> list[str]:
        """Empty once the zygote runs at a level (every level is complete in itself; see :meth:`isolation_line`)."""
        return [] if self.isolation.get("level") else ["a running sandbox zygote"]

    def isolation_line(self) -> str:
        """One line for instructors: the level reached and what it lacks."""
        return isolation_line(self.isolation)

    def _log_tail(self) -> str:
        try:
            self._log.seek(0)
            return self._log.read().decode("utf-8", "replace")[-3000:]
        except Exception:  # noqa: BLE001
            return ""

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            try:
                proc.stdin.write(b"q")
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._kill()

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self._kill()
        except Exception:  # noqa: BLE001
            pass

    # -- running a job ----------------------------------------------------------------------------------

    def _run(self, job: dict, warm_first: bool = False) -> dict:
        """Send one job to the zygote (a fresh monitor + kernel); the monitor's report. ``warm_first``: the zygote
        makes every lazy import first, so that none is charged to the job (a memory budget's)."""
        round_trip = time.perf_counter()
        with self._lock:
            self.start()
            proc = self._proc
            if warm_first:
                self._make_warm(proc, WARM_UPS)
            backstop = time.monotonic() + float(job["limits"]["notebook_timeout_s"]) + 60
            try:
                proc.stdin.write(b"j")
                sandbox.write_frame(proc.stdin.fileno(), job)
                # the monitor's own report (small), then the kernel's result as the raw bytes it sent (capped
                # on those bytes, never re-encoded on the way: autograder/sandbox/monitor.py)
                report = sandbox.read_frame(proc.stdout.fileno(), 1 << 20, backstop)
                raw = None
                if isinstance(report, dict) and isinstance(report.get("result_bytes"), int):
                    raw = sandbox.read_raw_frame(proc.stdout.fileno(), sandbox.result_cap(job["limits"]), backstop)
            except (OSError, TimeoutError, sandbox.ProtocolError) as exc:
                tail = self._log_tail()
                self._kill()
                raise GraderError(f"the sandbox did not answer ({type(exc).__name__}); zygote log: {tail}")
            if report is None:
                tail = self._log_tail()
                self._kill()
                raise GraderError(f"the sandbox zygote exited; log: {tail}")
            out = sandbox.read_report(report, raw)
            self._make_warm(proc, out.pop("warm", ()))  # what this kernel imported lazily, made once for the next
            if self._clock is not None:
                self._time_job(out, time.perf_counter() - round_trip)
            return out

    def _time_job(self, report: dict, round_trip: float) -> None:
        """Split one job's round trip into the sandbox stages (on_stage): the monitor's own seconds are the trusted
        side's; the cells' are the kernel's, so they are read as numbers only and capped at the monitor's."""
        inside = min(_duration(report.get("seconds")), round_trip)
        cells = report.get("cells") if isinstance(report.get("cells"), dict) else {}
        executing = min(inside, sum(_duration(c.get("seconds")) for c in cells.values() if isinstance(c, dict)))
        self._add_stage("fork + job transfer", round_trip - inside)
        self._add_stage("sandbox setup + kernel start + teardown", inside - executing)
        self._add_stage("cell execution", executing)

    def _add_stage(self, name: str, seconds: float) -> None:
        if self._clock is not None:
            self._clock[name] = self._clock.get(name, 0.0) + seconds

    def _make_warm(self, proc: subprocess.Popen, names) -> None:
        """Ask the zygote to make those of ``names`` that are lazy imports it knows (runner.WARM_UPS) and has not
        been asked for yet. ``names`` may come from a kernel's result (the learner's): anything else is dropped
        here, so the zygote's stdin only ever carries a short list of the names WARM_UPS owns."""
        wanted = sorted((set(names) & set(WARM_UPS)) - self._warm)
        if not wanted:
            return
        try:
            proc.stdin.write(b"w")
            sandbox.write_frame(proc.stdin.fileno(), wanted)
            self._warm.update(wanted)
        except OSError:
            pass  # the zygote is gone: the next job starts a new one

    def _job(self, cells: list[dict], mode: str, limits: Limits) -> dict:
        lim = asdict(limits)
        lim["max_record_mb"] = 64
        return {"cells": cells, "limits": lim, "grading_mode": "reference" if mode == "profile" else "sandbox"}

    # -- the reference profile --------------------------------------------------------------------------

    def profile(self, chapter: str) -> dict:
        """The chapter's reference profile (built on first use, cached on disk and in memory)."""
        path = profile_path(self.course, chapter)
        digest = _digest(path)
        cached = self._profiles.get(chapter)
        if cached and cached["digest"] == digest:
            return cached
        prof = cached_profile(self.course, chapter, path)
        if prof is not None:
            self._profiles[chapter] = prof
            return prof
        clock, self._clock = self._clock, None  # its sandbox jobs are the profile's, not the notebook's stages
        started = time.perf_counter()
        try:
            prof = self._build_profile(chapter, digest)
        finally:
            self._clock = clock
        self._add_stage("reference profile", time.perf_counter() - started)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(prof))
        tmp.replace(path)
        for stale in path.parent.glob(f"isolation-{chapter}-*.json"):  # profiles of older sources or engines
            if stale != path:
                stale.unlink(missing_ok=True)
        self._profiles[chapter] = prof
        return prof

    def _reference_run(self, chapter: str, source: nbformat.NotebookNode, seed_base: int,
                       reinit: str | None = None, drawn: dict[str, int] | None = None) -> dict:
        """One reference run: each graded test cell seeded from ``seed_base``, or with its ``drawn`` seed."""
        cells = []
        for index, c in enumerate(source.cells):
            if not is_graded_run(c):
                continue
            entry = {"index": index, "code": reinitialised(c.source, reinit) if reinit and is_solution(c) else c.source}
            if is_graded_test(c):
                gid = grade_id(c)
                try:
                    code, _ = trusted.rewrite_test_cell(c.source, "profile")
                except trusted.TestCellNotSupported as exc:
                    raise GraderError(f"test cell {gid} of {chapter}: {exc}") from None
                entry.update(code=code, test=True, grade_id=gid, seed=(drawn or {}).get(gid, cell_seed(gid, seed_base)))
            cells.append(entry)
        report = self._run(self._job(cells, "profile", self._reference_limits()))
        if report.get("status") != "ok":
            raise GraderError(f"the reference run of {chapter} did not finish: {report.get('reason')}")
        return report

    def _build_profile(self, chapter: str, digest: str) -> dict:
        source = nbformat.read(self.course.source_notebook(chapter), as_version=4)
        # A memory budget's cell runs at sizes drawn now, from a seed only this profile records (memory_budget.draw):
        # no notebook can know them, so a switch at the sizes the cell once ran at does not pass. The second run
        # draws others, as every cell gets another seed there.
        drawn = [memory_budget.draw(memory_budget.budgets(source)) for _ in SEED_BASES]
        runs = [self._reference_run(chapter, source, base, drawn=seeds) for base, seeds in zip(SEED_BASES, drawn)]
        # The grading seed once more with every module re-initialised: an expected value that moves is
        # computed from the module's own parameters, which the learner's code chooses (autograder/reinitialise.py).
        reinit_run = self._reference_run(chapter, source, SEED_BASES[0], reinit="normal", drawn=drawn[0])
        cells = {}
        for index, c in enumerate(source.cells):
            if not is_graded_test(c):
                continue
            gid = grade_id(c)
            _, sites = trusted.rewrite_test_cell(c.source, "profile")
            per_run = []
            for report in runs:
                out = report["cells"].get(str(index), {}).get("outputs", [])
                errors = [o for o in out if o.get("output_type") == "error"]
                if errors:
                    e = errors[0]
                    raise GraderError(f"the reference solution fails test cell {gid} of {chapter}: "
                                      f"{e.get('ename')}: {e.get('evalue')}")
                per_run.append(records_in({"outputs": out}))
            # (an error in the re-initialised run says nothing about expected values: its records are enough)
            moved = {f"{r['cell']}/{r['check']}": r
                     for r in records_in(reinit_run["cells"].get(str(index), {}))}
            checks, keep_want, by_key2 = [], set(), {}
            for rec in per_run[1]:
                by_key2[f"{rec['cell']}/{rec['check']}"] = rec
            for rec in per_run[0]:
                if rec.get("cell") != gid:
                    raise GraderError(f"test cell {gid} of {chapter} records checks as {rec.get('cell')!r}: "
                                      "Checks(...) must be given the cell's grade_id")
                key = f"{gid}/{rec['check']}"
                if "site" not in rec:
                    raise GraderError(f"check {key} of {chapter} was not made through a Checks object the "
                                      "grader can see")
                other = by_key2.get(key)
                if other is None:
                    raise GraderError(f"check {key} of {chapter} ran in one reference run but not the other")
                expected = REGISTRY[rec["kind"]].expected if rec.get("kind") in REGISTRY else None
                want = rec["params"].get(expected) if expected else None
                if expected and any(r is not None and r["params"].get(expected) != want
                                    for r in (other, moved.get(key))):
                    keep_want.add(rec["site"])
                checks.append({"key": key, "check": rec["check"], "kind": rec["kind"], "site": rec["site"],
                               "params": rec["params"], "ref_got": rec["got"]})
            if len({c2["key"] for c2 in checks}) != len(checks):
                raise GraderError(f"test cell {gid} of {chapter} records a check id twice")
            cells[gid] = {"checks": checks, "keep_want_sites": sorted(keep_want), "sites": sites,
                          "hidden": trusted.is_hidden(c.source), "index": index, "conservative": False}
            if gid in drawn[0]:
                cells[gid]["seed"] = drawn[0][gid]  # read back by drawn_seeds (attention_course/expected.py)
        prof = {"digest": digest, "chapter": chapter, "engine": ENGINE_VERSION, "cells": cells}
        self._validate_profile(chapter, source, prof)
        return prof

    def _validate_profile(self, chapter: str, source: nbformat.NotebookNode, prof: dict) -> None:
        """Grade the reference itself as a learner's notebook would be graded: every test cell must pass.

        A cell that fails only because the rewrite left out something the test needed (an expected value
        that also advanced a random generator, say) is switched to the conservative rewrite, which keeps
        every expected value in the kernel, and checked again; one that still fails is a grader error.
        """
        keep = [c for c in source.cells if is_graded_run(c)]
        nb = structure.unvalidated_notebook(keep, source.metadata)
        tests = {grade_id(c): i for i, c in enumerate(nb.cells) if is_graded_test(c)}
        points = [(gid, 1.0) for gid in tests]
        for attempt in range(2):
            report, notes = self._run_graded(nb, self._cells_to_run(nb, tests, prof), source,
                                             self._reference_limits())
            if report.get("status") != "ok":
                raise GraderError(f"the reference solution of {chapter} does not run in the sandbox: "
                                  f"{report.get('reason')}")
            executed = _merge_outputs(nb, report)
            failing = [c for c in _add_budget_notes(_decide(prof, executed, tests, points), notes) if not c.passed]
            if not failing:
                return
            if attempt == 1:
                raise GraderError(f"the reference solution of {chapter} fails its own tests under the isolated "
                                  f"grader: " + "; ".join(f"{c.grade_id}: {list(c.messages[:2])}" for c in failing))
            for gid in (c.grade_id for c in failing):
                spec = prof["cells"][gid]
                spec["conservative"] = True
                spec["keep_want_sites"] = sorted(c["site"] for c in spec["checks"] if REGISTRY[c["kind"]].expected)

    def _reference_limits(self) -> Limits:
        return Limits(cell_timeout_s=max(self.limits.cell_timeout_s, 120),
                      notebook_timeout_s=max(self.limits.notebook_timeout_s, 900),
                      memory_mb=max(self.limits.memory_mb, 4096), max_procs=max(self.limits.max_procs, 64),
                      max_output_mb=max(self.limits.max_output_mb, 50), scratch_mb=self.limits.scratch_mb,
                      cpus=max(self.limits.cpus, 1.0))

    def _run_graded(self, nb: nbformat.NotebookNode, cells: list[dict], source: nbformat.NotebookNode,
                    limits: Limits) -> tuple[dict, dict[str, dict]]:
        """Run a notebook's job cells: every test cell with a memory budget in the chapter's ``source`` runs in a
        job of its own under that budget (:mod:`autograder.memory_budget`), the rest in one job. Returns the
        notebook's report with the budget cells' outputs folded in, and ``{grade_id: {"budget", "note"}}``."""
        budgets = memory_budget.budgets(source)
        main, jobs = memory_budget.plan(nb, cells, budgets)
        report = self._run(self._job(main, "grade", limits))
        notes = {}
        if report.get("status") != "ok":
            return report, notes
        for gid, budget, job_cells in jobs:
            job_report = self._run(self._job(job_cells, "grade", memory_budget.limits_for(limits, budget["mb"])),
                                   warm_first=True)
            if job_report.get("status") == "error":
                raise GraderError(job_report.get("reason", "sandbox error"))
            notes[gid] = {"budget": budget,
                          "refused": memory_budget.refused_a_process(job_report, job_cells[-1]["index"]),
                          "note": memory_budget.merge(report, job_cells[-1]["index"], budget, job_report)}
        return report, notes

    def _cells_to_run(self, nb: nbformat.NotebookNode, tests: dict[str, int], prof: dict,
                      skip: set[str] = frozenset(), run_tests: frozenset[str] | None = None) -> list[dict]:
        """The job's cells: every code cell in order but those whose source is in ``skip`` (the chapter's
        untouched demos) and the graded test cells outside ``run_tests`` (None: all of them); graded test cells
        rewritten and seeded."""
        cells = []
        for index, c in enumerate(nb.cells):
            if c.cell_type != "code" or (c.source.strip() in skip and not is_graded_run(c)):
                continue
            entry = {"index": index, "code": c.source}
            gid = grade_id(c) if is_graded_test(c) else None
            if gid is not None and run_tests is not None and gid not in run_tests and tests.get(gid) == index:
                continue
            if gid is not None and tests.get(gid) == index:
                spec = prof["cells"].get(gid)
                if spec is None:
                    raise GraderError(f"test cell {gid} is not in the reference profile")
                try:
                    code, _ = trusted.rewrite_test_cell(c.source, "grade", set(spec["keep_want_sites"]),
                                                        conservative=bool(spec.get("conservative")))
                except trusted.TestCellNotSupported as exc:
                    raise GraderError(f"test cell {gid}: {exc}") from None
                seed = drawn_seeds(prof).get(gid, cell_seed(gid, SEED_BASES[0]))
                entry.update(code=code, test=True, grade_id=gid, seed=seed)
            cells.append(entry)
        return cells

    # -- grading ----------------------------------------------------------------------------------------

    def grade(self, chapter: str, submission: Path, student: str, judge: frozenset[str] | None = None) -> GradingResult:
        """Grade one submission. ``judge``: for a maintainer's tool that grades a variant of the reference on some
        cells only (the mistake catalogue, the shortcut lint, the mutation score): the graded test cells to decide.
        Those run, with every graded test cell whose bindings they use (autograder/cell_reach.py); the other test
        cells are not run and score 0 as "not judged". It is an argument of the trusted caller, never anything a
        submission says; ``grade``, ``grade-one`` and ``serve`` never pass it."""
        # Every message of this grading (decisions, budget notes) in the class's language, never in one a
        # learner's kernel claims: see autograder/class_language.py.
        with grading(self.language):  # hidden tests' hints too: this is the trusted side
            return self._grade_in_class_language(chapter, submission, student, judge)

    def _tests_to_run(self, chapter: str, judge: frozenset[str] | None) -> frozenset[str] | None:
        """``judge`` and the graded test cells it reaches (a test cell reading what an earlier test cell bound
        would otherwise fail for want of it, not for the learner's code)."""
        if judge is None:
            return None
        # the test cells each test cell reaches, read once per chapter and engine (a catalogue grades hundreds)
        key = hashlib.sha256(self.course.source_notebook(chapter).read_bytes()).digest()
        cached = self._test_reach.get(chapter)
        if cached is None or cached[0] != key:
            tests = {gid for gid, _ in self._graded_cells(chapter)}
            reach = cell_reach.reach(self.course, chapter)
            cached = (key, {t: reach.get(t, set()) & tests for t in tests})
            self._test_reach[chapter] = cached
        return frozenset(judge) | {c for j in judge for c in cached[1].get(j, ())}

    def _grade_in_class_language(self, chapter: str, submission: Path, student: str,
                                 judge: frozenset[str] | None = None) -> GradingResult:
        started = time.monotonic()
        timed = time.perf_counter()
        self._clock = {} if self.on_stage is not None else None
        base = {"student": student, "chapter": chapter, "isolation": self.isolation.get("label", "")}
        try:
            result = self._grade(chapter, Path(submission), base, self._tests_to_run(chapter, judge))
        except GraderError as exc:
            result = self._unscored(chapter, base, "failed", f"grader error: {exc}")
        except Exception as exc:  # noqa: BLE001 - one notebook must never stop a batch
            result = self._unscored(chapter, base, "failed", f"grader error: {type(exc).__name__}: {exc}")
        result = result.replace(seconds=round(time.monotonic() - started, 3))
        clock, self._clock = self._clock, None
        if clock is not None:
            clock["engine other"] = max(0.0, time.perf_counter() - timed - sum(clock.values()))
            for name, seconds in clock.items():
                self.on_stage(name, seconds)
        return result

    def _graded_cells(self, chapter: str) -> list[tuple[str, float]]:
        source = nbformat.read(self.course.source_notebook(chapter), as_version=4)
        return graded_cells(source)

    def _unscored(self, chapter: str, base: dict, status: str, reason: str, **fields) -> GradingResult:
        """Zero (the learner's notebook) or failed (the grader): every graded cell of the chapter scores 0."""
        try:
            graded = self._graded_cells(chapter)
        except Exception:  # noqa: BLE001
            graded = []
        return GradingResult.unscored(status=status, reason=reason, graded=graded, **base, **fields)

    def _hidden_runs(self, chapter: str, source: nbformat.NotebookNode) -> learner_files.HiddenRuns:
        """The chapter's hidden-test runs (learner_files.hidden_runs against every public file, kit.published),
        computed once per chapter and engine (about 0.05 s and the chapter's hidden lines in memory), again only
        when the chapter's source or release changed."""
        release = self.course.release_notebook(chapter)
        key = hashlib.sha256(self.course.source_notebook(chapter).read_bytes() + b"\0"
                             + (release.read_bytes() if release.is_file() else b"")).digest()
        cached = self._hidden.get(chapter)
        if cached is None or cached[0] != key:
            cached = (key, learner_files.hidden_runs(source, learner_files.public_texts(*kit.published(self.course))))
            self._hidden[chapter] = cached
        return cached[1]

    def _grade(self, chapter: str, submission: Path, base: dict,
               run_tests: frozenset[str] | None = None) -> GradingResult:
        src_path = self.course.source_notebook(chapter)
        if not src_path.is_file():
            raise GraderError(f"unknown chapter {chapter!r}")
        started = time.perf_counter()
        try:
            nb, intake_flags = intake.read_submission(submission, chapter)
        except intake.Unusable as exc:
            return self._unscored(chapter, base, "zero", str(exc))
        finally:
            self._add_stage("read + repair", time.perf_counter() - started)
        source = nbformat.read(src_path, as_version=4)
        release_path = self.course.release_notebook(chapter)
        release = nbformat.read(release_path, as_version=4) if release_path.is_file() else None
        # A copy of the course's own notebook (a symlink nbgrader collect followed, a file passed around) holds runs
        # of hidden-test lines that no public file has (learner_files owns the rule). That is evidence for the
        # instructor (result.suspicions), never a score: the notebook is graded as usual, so nothing a learner sees
        # depends on it and the grader answers no question about which lines are hidden (issue 41, class 4).
        copied = learner_files.copied_hidden_run((c.source for c in nb.cells), self._hidden_runs(chapter, source))
        suspicions = (learner_files.suspicion(copied),) if copied else ()
        prof = self.profile(chapter)
        started = time.perf_counter()
        fixed = structure.repair(nb, source, release)
        self._add_stage("read + repair", time.perf_counter() - started)
        # The chapter's own demo cells, left as released, are skipped as in the reference run: they draw figures
        # or train illustrations (most of a notebook's time) and no graded check reads them. A cell the learner
        # wrote or changed still runs.
        demos = {c.source.strip() for c in source.cells if c.cell_type == "code" and not is_graded_run(c)}
        report, notes = self._run_graded(fixed.nb, self._cells_to_run(fixed.nb, fixed.tests, prof, skip=demos,
                                                                      run_tests=run_tests),
                                         source, self.limits)
        report, output_flags = intake.clean_report(report)  # learner-controlled: encodable, bounded depth
        if report.get("status") == "error":
            raise GraderError(report.get("reason", "sandbox error"))
        executed = _merge_outputs(fixed.nb, report)
        found = {"flags": intake_flags + fixed.flags + output_flags, "suspicions": suspicions,
                 "executed_notebook": json.loads(nbformat.writes(executed))}  # plain JSON, as nbformat writes it
        if report.get("status") != "ok":  # the monitor's reason is its own words; the kernel's are learner_said
            return self._unscored(chapter, base, "zero", str(report.get("reason", "kernel died")),
                                  learner_said=report.get("learner_said") or (), **found)
        leaks = trusted.LeakFilter([c.source for c in source.cells if is_graded_test(c) and trusted.is_hidden(c.source)])
        started = time.perf_counter()
        decided = _add_budget_notes(_decide(prof, executed, fixed.tests, self._graded_cells(chapter), leaks,
                                            self.limits.cell_timeout_s, run_tests), notes)
        if notes and not memory_budget.proven(self.isolation):  # rlimits only: a budget is a claim there
            decided, flag = memory_budget.withhold(decided, notes, base["isolation"])
            found["flags"] = found["flags"] + ([flag] if flag else [])
        self._add_stage("decision", time.perf_counter() - started)
        return GradingResult(status="graded", cells=tuple(decided), **base, **found)


def _duration(value) -> float:
    """Seconds from a sandbox report: a finite, non-negative number, else 0 (the kernel's figures are the learner's)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        return 0.0
    return float(value)


def _clean_output(o) -> dict | None:
    """One output from the kernel in valid nbformat shape, or None (the kernel's report may be forged), with
    nothing a front-end would run: safe_output's policy (text, our check records, validated raster images)."""
    from . import safe_output  # the policy's one owner (the feedback page, the report and batch use it too)

    if not isinstance(o, dict):
        return None
    kind = o.get("output_type")
    if kind == "stream":
        if o.get("name") in ("stdout", "stderr") and isinstance(o.get("text"), str):
            return safe_output.safe_output(o)
        return None
    if kind in ("display_data", "execute_result"):
        data = o.get("data")
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            return None
        return safe_output.safe_output(o)
    if kind == "error":
        return safe_output.safe_output(o)
    return None


def _add_budget_notes(decided: list[CellResult], notes: dict[str, dict]) -> list[CellResult]:
    """Say, in a failed budget cell's feedback, that it ran under a memory budget (and whether it was stopped)."""
    out = []
    for cell in decided:
        info = notes.get(cell.grade_id)
        if info is not None and not cell.passed:
            if info["note"]:  # the job was stopped: its checks never ran, and this is the only thing to say
                cell = dataclasses.replace(cell, messages=(info["note"],))
            else:
                cell = dataclasses.replace(cell, messages=(memory_budget.note(info["budget"], info["refused"]),
                                                           *cell.messages))
        out.append(cell)
    return out


def _merge_outputs(nb: nbformat.NotebookNode, report: dict) -> nbformat.NotebookNode:
    """A copy of ``nb`` with the outputs the kernel reported (sources and metadata stay the grader's own)."""
    executed = copy.deepcopy(nb)
    cells = report.get("cells")
    for index_str, data in (cells.items() if isinstance(cells, dict) else []):
        try:
            index = int(index_str)
        except (TypeError, ValueError):
            continue
        if not 0 <= index < len(executed.cells):
            continue
        cell = executed.cells[index]
        if cell.cell_type == "code" and isinstance(data, dict):
            outs = data.get("outputs") if isinstance(data.get("outputs"), list) else []
            cell.outputs = [nbformat.from_dict(c) for c in map(_clean_output, outs) if c is not None]
            ec = data.get("execution_count")
            cell.execution_count = ec if isinstance(ec, int) and not isinstance(ec, bool) else None
    return executed


NOT_JUDGED = "not judged: this grading ran other cells only"  # Engine.grade's judge left this cell out


def _decide(prof: dict, executed: nbformat.NotebookNode, tests: dict[str, int],
            graded: list[tuple[str, float]], leak_filter: trusted.LeakFilter | None = None,
            cell_timeout_s: float | None = None, run_tests: frozenset[str] | None = None) -> list[CellResult]:
    """The trusted decision for every graded cell, in the chapter's order, from the records the kernel made; a
    cell outside ``run_tests`` (a maintainer's tool judged others: ``Engine.grade``'s ``judge``) did not run."""
    out = []
    for gid, pts in graded:
        if run_tests is not None and gid not in run_tests:
            out.append(CellResult(gid, pts, False, (NOT_JUDGED,)))
            continue
        idx = tests.get(gid)
        outputs = executed.cells[idx].get("outputs", []) if idx is not None else []
        records = [o["data"][RECORD_MIME] for o in outputs
                   if o.get("output_type") in ("display_data", "execute_result")
                   and isinstance(o.get("data"), dict) and isinstance(o["data"].get(RECORD_MIME), dict)]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        passed, messages = trusted.decide_cell(prof["cells"][gid], records, errors[0] if errors else None, gid,
                                               cell_timeout_s)
        if leak_filter is not None:
            messages = leak_filter.clean(messages)
        out.append(CellResult(gid, pts, passed, tuple(messages)))
    return out


def grade_submission(course_root, chapter: str, submission, student: str,
                     limits: Limits = Limits()) -> GradingResult:
    """Grade one submission with a throwaway engine (a batch should keep one Engine warm instead)."""
    with Engine(Path(course_root), limits) as engine:
        return engine.grade(chapter, Path(submission), student)


def isolation_line(description: dict) -> str:
    lacks = description.get("lacks") or []
    return f"isolation: {description.get('label', '?')}" + ("; lacks: " + "; ".join(lacks) if lacks else "")


def preflight(isolation: str = "auto", require: str | None = None) -> str:
    """The start-up line of ``grade``: the level this account reaches on this machine (the probe the zygote
    runs, without importing torch). Raises :class:`IsolationUnavailable` when it is not the one asked for."""
    from .sandbox import levels, zygote

    found = levels.probe(zygote.state_dir())
    try:
        level = levels.choose(found, isolation, require)
    except levels.Unreachable as exc:
        raise IsolationUnavailable(str(exc)) from None
    return isolation_line(levels.describe(level, found))


def add_isolation_arguments(parser: argparse.ArgumentParser) -> None:
    """``--isolation`` and ``--require``, shared by ``grade`` and ``grade-one``."""
    parser.add_argument("--isolation", choices=("auto", "root", "user", "process"), default="auto",
                        help="isolation level (default: auto, the strongest this account reaches here)")
    parser.add_argument("--require", choices=("root", "user", "process"), default=None,
                        help="refuse to grade below this isolation level")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder grade-one",
                                     description="Grade one notebook in the isolated sandbox.")
    parser.add_argument("chapter")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--student", default="learner")
    parser.add_argument("--json", type=Path, help="write the full result here")
    parser.add_argument("--html", type=Path, help="write the learner's feedback here")
    parser.add_argument("--cell-timeout", type=float, default=Limits.cell_timeout_s)
    parser.add_argument("--notebook-timeout", type=float, default=Limits.notebook_timeout_s)
    parser.add_argument("--memory-mb", type=int, default=Limits.memory_mb)
    add_isolation_arguments(parser)
    args = parser.parse_args(argv)
    limits = Limits(cell_timeout_s=args.cell_timeout, notebook_timeout_s=args.notebook_timeout,
                    memory_mb=args.memory_mb, isolation=args.isolation, require=args.require or "")
    try:
        with Engine(Course().root, limits) as engine:
            print(engine.isolation_line())
            result = engine.grade(args.chapter, args.notebook, args.student)
            language = engine.language
    except GraderError as exc:
        print(f"grade-one: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(result.to_json(), indent=1))
    if args.html:
        with speaking(language):
            args.html.write_text(feedback_html(result))
    print(f"{result.student} {result.chapter}: {result.status} {result.score:g}/{result.max_score:g}"
          f"{' (' + result.reason + ')' if result.reason else ''}  [{result.seconds:.1f} s]")
    for flag in result.flags:
        print(f"  flag: {flag}")
    for suspicion in result.suspicions:  # the instructor's evidence: never on the learner's page (--html)
        print(f"  suspicion: {suspicion}")
    for label, text in result.learner_said:  # the notebook's words, labelled as its own (learner_text)
        print(f"  the notebook's own text (untrusted), {label}: {text}")
    for cell in result.cells:
        print(f"  {'PASS' if cell.passed else 'FAIL'} {cell.grade_id} {cell.score:g}/{cell.max_score:g}")
        for m in cell.messages:
            print(f"      {m}")
    return 0 if result.status != "failed" else 1


def profile_main(argv: list[str] | None = None) -> int:
    """``python -m autograder profile``: build (or reuse) the reference profiles, the one reference run.

    ``grade`` builds them itself when it needs them; stock ``nbgrader autograde``'s kernels read their reference
    values from them (attention_course.expected) and run this command on first use."""
    parser = argparse.ArgumentParser(prog="python -m autograder profile",
                                     description="Build the chapters' reference profiles (cached in grading/expected).")
    parser.add_argument("chapters", nargs="*", help="chapter ids (default: every chapter)")
    parser.add_argument("--course", type=Path, default=None, help="the course tree (default: this repository)")
    add_isolation_arguments(parser)
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    try:
        paths = build_profiles(course.root, args.chapters or course.chapters(),
                               Limits(isolation=args.isolation, require=args.require or ""))
    except GraderError as exc:
        print(f"profile: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
