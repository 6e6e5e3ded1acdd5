"""The isolated grading engine (autograder.isolation) against hostile and broken notebooks, and against the
course (every chapter's reference, blank and catalogue: tests/test_catalogues.py).

The hostile corpus (tests/hostile/cases.py) is graded as one batch through one Engine (and a second beside it
for the case that only waits for the wall clock: tests/hostile/run.py) with small limits
(1.5 GB, 64 processes, 5 MB of output; cell 60 s and notebook 120 s, except for the two cases that test a clock: a
3 s cell, an 8 s notebook) in a throwaway copy of the course that also holds a gradebook, another learner's
submission and a canary file; a TCP server listens on 127.0.0.1 only. Each case asserts its exact score, status,
reason and flags, that the whole batch finished, and that nothing outside the sandbox changed. Every case is graded
at the root level; the level-independent ones (tests/hostile/levels.py, LEVEL_INDEPENDENT: Python-level cheats and
files refused before any kernel starts, whose outcome no jail can change) at the root level only, the others at
every level. The root level's batch is graded beside a CpuBurner of one spinning process (tests/load.py: with the
other pytest worker busy, both cores are); ``HOSTILE_RUNS=N`` grades every level's corpus N times in a row, each
beside one spinning process per core.

These tests need root, Linux namespaces and cgroup v1 memory+pids controllers: without them they fail
with a message saying what is missing (they never skip).
"""
from __future__ import annotations

import contextlib
import copy
import ctypes
import dataclasses
import hashlib
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from attention_course.cells import RECORD_MIME, grade_id, is_graded_test
from autograder import structure, submissions, trusted
from autograder.course import Course
from autograder.isolation import Engine, Limits, feedback_html
from autograder.results import GradingResult

from .hostile import cases as hostile_cases
from .hostile import run
from .hostile.cases import CASES, CHAPTER, FULL, Ctx
from .synthetic import write_chapter
from .hostile.levels import FULLEST, LEVEL_INDEPENDENT, expected, graded_at
from .load import CpuBurner, batch_params, cpu_seconds_of

COURSE = Course()
CHAPTERS = COURSE.chapters()
LIMITS = Limits(**run.LIMITS)
# levels this machine reaches as root (root with cgroup v1, a user namespace, no namespaces); the unprivileged
# runs (an ordinary account: user namespace with rlimits, process level, namespaces refused) are in
# tests/test_unprivileged.py
LEVELS_AS_ROOT = ("root", "user", "process")
# the level whose batch the suite grades beside a CpuBurner (the memory bomb once lost a race there on a busy machine)
LOADED_LEVELS = ("root",)
BATCHES, BATCH_IDS = batch_params(LEVELS_AS_ROOT, LOADED_LEVELS)

MISTAKES = [m.id for m in submissions.load_mistakes(COURSE, CHAPTER)]


def case_params(batches: list[tuple], ids: list[str]) -> list:
    """``(batch, case)`` params of every case graded at each batch's level (levels.graded_at), ids
    ``<batch id>-<case>``: a level-independent case has no test at a level other than the root one."""
    return [pytest.param(params, case, id=f"{bid}-{case.name}") for params, bid in zip(batches, ids)
            for case in CASES if graded_at(case, params[0])]


def _course_copy(dest: Path) -> Course:
    course = COURSE.copy_to(dest)
    course.grading.mkdir(exist_ok=True)
    cache = COURSE.grading / "expected"
    if cache.is_dir():  # reuse reference profiles already built for these exact sources
        (course.grading / "expected").mkdir(exist_ok=True)
        for p in cache.glob("isolation-*.json"):
            shutil.copy(p, course.grading / "expected" / p.name)
    return course


def _require_isolation(engine: Engine) -> None:
    if engine.isolation.get("level") != "root":
        pytest.fail(f"these tests grade at the root level; this machine reached {engine.isolation_line()}")


def _snapshot(*roots: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    out = {}
    for root in roots:
        if root.is_file():
            out[str(root)] = hashlib.sha256(root.read_bytes()).hexdigest()
            continue
        for p in sorted(root.rglob("*")):
            if p.is_file() and not any(p.is_relative_to(s) for s in skip):
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class _Server:
    """A TCP server on 127.0.0.1 that remembers what anyone sent it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.received.append(conn.recv(1000))
                except OSError:
                    self.received.append(b"<connected>")

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


class CorpusBatches:
    """The hostile corpus's batches of one test module, each graded (``grade(params, names)``) when a test first asks
    for it and dropped once the last selected test that reads it has run: the tests of one level need not run one
    after the other, and a batch is never graded twice.

    ``names``: the cases graded at the batch's level (levels.graded_at) that this session's selected tests ask for
    (``-k``), or all of them where a test reads the whole batch; the reference is graded after them either way."""

    def __init__(self, request, grade):
        self.grade, self.graded, self.asked, self.last = grade, {}, {}, {}
        for item in request.session.items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if item.path != request.path or "batch" not in params:
                continue
            batch, case = params["batch"], params.get("case")
            self.last[batch] = item.nodeid
            asked = self.asked.setdefault(batch, set())
            if case is None or asked is None:
                self.asked[batch] = None  # a test that reads the whole batch
            else:
                asked.add(case.name)

    def get(self, params: tuple) -> dict:
        if params not in self.graded:
            asked = self.asked.get(params)
            names = {c.name for c in CASES if graded_at(c, params[0]) and (asked is None or c.name in asked)}
            self.graded[params] = self.grade(params, names)
        return self.graded[params]

    def done(self, item, params: tuple) -> None:
        if self.last.get(params) == item.nodeid:
            self.graded.pop(params, None)

    def lend(self, request):
        """For a ``batch`` fixture: yields the batch of ``request.param``, then drops it after its last test."""
        yield self.get(request.param)
        self.done(request.node, request.param)


@pytest.fixture(scope="module")
def corpus(request, tmp_path_factory):
    return CorpusBatches(request, lambda params, names: _grade_batch(params, names, tmp_path_factory))


@pytest.fixture
def batch(request, corpus):
    """The batch of ``request.param`` (tests/load.py: level, run, spinning processes), graded once (CorpusBatches)."""
    yield from corpus.lend(request)


def _grade_batch(params: tuple, names: set[str], tmp_path_factory) -> dict:
    """Grade the hostile corpus's cases ``names`` (and the reference after them) in one Engine at one isolation
    level, once (run.grade_cases); beside a CpuBurner of as many spinning processes as the batch's params say."""
    level, attempt, spinners = params
    tmp = tmp_path_factory.mktemp(f"hostile-{level}-{attempt}")
    course = _course_copy(tmp / "course")
    gradebook = course.grading / "gradebook.db"
    with sqlite3.connect(gradebook) as db:
        db.execute("create table grade (student text, score real)")
        db.execute("insert into grade values ('someone', 12.5)")
    other = submissions.write_submission(course, "other-learner", CHAPTER, submissions.reference(course, CHAPTER))
    canary = tmp / "canary.txt"
    canary.write_text("nobody writes here")
    server = _Server()
    ctx = Ctx(course=course, repo=COURSE.root, port=server.port, canary=canary, other_student=other)
    protected = (course.root, COURSE.solutions, canary)
    skip = (course.grading / "expected", course.grading / "submitted" / "hostile")
    started = time.monotonic()
    try:
        with Engine(course.root, Limits(**run.LIMITS, isolation=level)) as engine:
            assert engine.isolation["level"] == level, engine.isolation
            engine.profile(CHAPTER)  # built (trusted side) before the snapshot
            paths = run.write_cases(ctx, names)
            before = _snapshot(*protected, skip=skip)
            ipc_before = run.sysv_ipc_objects()
            burner = CpuBurner(spinners) if spinners else None
            with burner or contextlib.nullcontext():
                graded = time.monotonic()
                results = run.grade_cases(engine, paths)
                graded, burning = time.monotonic() - graded, burner.running() if burner else 0
        after = _snapshot(*protected, skip=skip)
        ipc_left = run.ipc_left_by_grading(ipc_before)
    finally:
        server.close()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    print(f"hostile corpus, {level} level, run {attempt}: {len(paths)} notebooks graded in {graded:.1f} s"
          + (f" beside {burning} spinning processes ({burner.cpu_seconds:.1f} CPU s)" if burner else "")
          + f", {time.monotonic() - started:.1f} s in all")
    return {"level": level, "results": results, "changed": changed, "server": server.received, "course": course,
            "seconds": time.monotonic() - started, "ipc_left": ipc_left,
            "burners": (burner.processes, burning) if burner else None}


def _outputs_text(result: GradingResult) -> str:
    nb = result.executed_notebook or {"cells": []}
    return json.dumps([o for c in nb["cells"] for o in c.get("outputs", [])])


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_corpus_has_at_least_20_cases():
    assert len(CASES) >= 20
    assert len({c.name for c in CASES}) == len(CASES)


# What a level-independent case's own code may not name: the OS resources the isolation levels confine (files,
# processes, exits, the network, signals and clocks, memory sizes, descriptors and pipes, /proc, IPC, the environment,
# links, code that reads files to run them).
OS_RESOURCES = ("open(", "os.", "import os", "socket", "subprocess", "/proc", "signal", "ctypes", "fork", "_exit",
                "exec", "mmap", "shm", "environ", "sqlite", "glob", "pathlib", "shutil", "linecache", "threading",
                "multiprocessing", "resource", "time.", "sleep", "while True", "2**20", "<< 20", "gc.", "symlink", "fd")


def _own_code(case, ctx: Ctx) -> str:
    """The code the case adds to the notebook it starts from (reference, blank or wrong): its code cells that are
    none of theirs; a file that is not a notebook, as text."""
    built = case.build(ctx)
    if isinstance(built, bytes):
        try:
            built = json.loads(built.decode("utf-8"))
        except (ValueError, RecursionError):
            return built.decode("utf-8", "replace")
    cells = built.get("cells") if isinstance(built, dict) else None
    if not isinstance(cells, list):
        return json.dumps(built)
    start = {c.source for nb in (hostile_cases.reference(ctx), hostile_cases.wrong(ctx), hostile_cases.blank(ctx))
             for c in nb.cells}
    sources = ("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    return "\n".join(src for src in sources if src not in start)


@pytest.mark.unit
@pytest.mark.timeout(120)
def test_level_independent_cases_touch_nothing_a_level_confines():
    """tests/hostile/levels.py grades LEVEL_INDEPENDENT at the root level only: none of them may name an OS resource
    the levels confine in its own code, and none is a link or a FIFO (what the engine opens). The check can fail:
    cases that attack what the levels confine are caught by it."""
    ctx = Ctx(course=COURSE, repo=COURSE.root, port=1, canary=Path("/nonexistent/canary"),
              other_student=Path("/nonexistent/other.ipynb"))
    by_name = {c.name: c for c in CASES}
    named = {}
    for name in sorted(LEVEL_INDEPENDENT):
        assert not isinstance(by_name[name].build(ctx), hostile_cases.Special), f"{name} is a link or a FIFO"
        own = _own_code(by_name[name], ctx)
        named[name] = [word for word in OS_RESOURCES if word in own]
    assert {name: words for name, words in named.items() if words} == {}, "level-independent cases naming OS resources"
    for name in ("infinite_loop", "memory_bomb", "os_exit", "network", "read_solutions", "exfiltrate_hidden_source",
                 "grader_pipes_via_proc", "sysv_ipc", "recorder_forwarding"):
        assert name not in LEVEL_INDEPENDENT and any(w in _own_code(by_name[name], ctx) for w in OS_RESOURCES), name
    assert {c.name for c in CASES if graded_at(c, "user")} == {c.name for c in CASES} - LEVEL_INDEPENDENT
    assert all(graded_at(c, FULLEST) for c in CASES)


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_profiles_built_by_two_engines_each_taking_the_next_chapter(monkeypatch, tmp_path):
    """build_profiles(engines=2): two engines, every chapter profiled once (a chapter listed twice too), a free engine
    takes the next chapter in the order given (here the first engine is held on the first chapter until the other has
    built three); an engine's error reaches the caller and stops the other engine at its next chapter."""
    from autograder import isolation

    chapters = [f"{i:02d}_chapter" for i in range(1, 6)]
    for ch in [*chapters, "broken"]:
        course = write_chapter(tmp_path / "c", ch, [("setup", "x = 1", "setup")])
    built, release = [], threading.Event()

    class FakeEngine:
        def __init__(self, course_root, limits):
            self.course = Course(course_root)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def missing_capabilities(self):
            return []

        def profile(self, chapter):
            if chapter == chapters[0]:
                assert release.wait(20), "the other engine did not go on while this one was busy"
            if chapter == "broken":  # the held engine goes on a moment after this error left its engine
                threading.Timer(0.3, release.set).start()
                raise isolation.GraderError("the reference run of broken did not finish")
            built.append((chapter, id(self)))
            if len(built) == 3:
                release.set()

    monkeypatch.setattr(isolation, "Engine", FakeEngine)
    paths = isolation.build_profiles(course.root, [*chapters, chapters[2]], engines=2)
    assert paths == [isolation.profile_path(course, ch) for ch in [*chapters, chapters[2]]]
    assert sorted(ch for ch, _ in built) == sorted(chapters) and len({e for _, e in built}) == 2
    assert [ch for ch, _ in built][:3] == chapters[1:4]
    built.clear()
    release.clear()
    with pytest.raises(isolation.GraderError, match="broken did not finish"):
        isolation.build_profiles(course.root, [chapters[0], "broken", *chapters[1:]], engines=2)
    assert [ch for ch, _ in built] == [chapters[0]], "the engine still free went on after the other's error"


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_the_waiting_case_is_graded_beside_the_others_and_the_alone_cases_after_it(monkeypatch, tmp_path):
    """run.grade_cases: the case that waits for the wall clock is graded by a second engine, with the batch's limits,
    while the first grades the others (the two gradings meet at a barrier, which a one-after-the-other order never
    reaches); the alone cases start only once the second engine is closed (it takes its time to close here, so an
    alone case graded beside it would be seen); each engine grades the reference last; the cases that test a clock
    are graded under their own limits (Case.limits), every other notebook under the batch's."""
    log, meet, engines = [], threading.Barrier(2, timeout=20), []

    class FakeEngine:
        def __init__(self, course_root, limits):
            self.course, self.limits = Course(course_root), limits
            engines.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            time.sleep(0.5)  # a zygote takes a while to stop: the main engine must not go on meanwhile
            log.append(("closed", "", id(self)))

        def profile(self, chapter):
            return {}

        def grade(self, chapter, path, student):
            if any(c.waits and c.name == path.parent.name for c in CASES) or not log:
                meet.wait()  # the waiting case, and the first engine's first notebook
            log.append(("grade", path.parent.name, id(self)))
            return (student, id(self), self.limits)

    monkeypatch.setattr(run, "Engine", FakeEngine)
    paths = {c.name: tmp_path / c.name / c.file_name for c in CASES}
    paths["__after__"] = tmp_path / "__after__" / f"{CHAPTER}.ipynb"
    main = FakeEngine(tmp_path, LIMITS)
    results = run.grade_cases(main, paths)
    assert len(engines) == 2 and engines[1].limits is main.limits, "one second engine, with the batch's limits"
    side = id(engines[1])
    assert set(results) == set(paths) | {run.AFTER_WAITING}
    assert results[run.AFTER_WAITING] == (run.AFTER_WAITING, side, LIMITS)
    assert results["__after__"] == ("__after__", id(main), LIMITS)
    for c in CASES:
        assert results[c.name] == (c.student or c.name, side if c.waits else id(main),
                                   dataclasses.replace(LIMITS, **c.limits)), c.name
    assert main.limits is LIMITS and engines[1].limits is LIMITS, "an engine kept a case's own limits"
    assert {c.name: c.limits for c in CASES if c.limits} == {"infinite_loop": {"cell_timeout_s": 3},
                                                            "swallows_interrupt": {"cell_timeout_s": 3,
                                                                                   "notebook_timeout_s": 8}}
    assert {c.name for c in CASES if c.waits} == {"swallows_interrupt"}
    assert {c.name for c in CASES if c.alone} == {"fork_bomb", "grader_pipes_via_proc"}
    side_closed = log.index(("closed", "", side))
    assert [name for k, name, e in log if e == side and k == "grade"] == ["swallows_interrupt", "__after__"]
    alone = [i for i, (k, name, e) in enumerate(log) if any(c.alone and c.name == name for c in CASES)]
    assert len(alone) == 2 and min(alone) > side_closed
    assert log[-1] == ("grade", "__after__", id(main))


@pytest.mark.unit
@pytest.mark.timeout(120)
def test_the_cpu_burner_spins_on_every_core_and_leaves_no_process_behind(monkeypatch):
    """tests/load.py: one spinning process per core while the block runs, none after it; a burner whose test was
    killed before it could stop it follows that test; the suite's loaded batch has one spinning process beside it,
    and HOSTILE_RUNS makes every batch a loaded one, N per level, each beside one spinning process per core."""
    import os
    import subprocess
    import sys

    def gone(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] in "ZX"  # exited (a zombie waits for init's wait)
        except OSError:
            return True

    with CpuBurner() as burner:
        pids = [p.pid for p in burner.procs]
        assert len(pids) == (os.cpu_count() or 1) and burner.running() == len(pids)
        while not all(cpu_seconds_of(pid) > 0 for pid in pids):  # each spins (the test's timeout backstops it)
            time.sleep(0.05)
    assert burner.cpu_seconds > 0 and burner.running() == 0 and all(gone(pid) for pid in pids)

    test = subprocess.Popen([sys.executable, "-c", "import sys, time; from tests.load import CpuBurner; "
                             "b = CpuBurner(1).__enter__(); print(b.procs[0].pid, flush=True); time.sleep(600)"],
                            cwd=str(COURSE.root), stdout=subprocess.PIPE, text=True)
    orphan = int(test.stdout.readline())
    assert not gone(orphan)
    test.kill()
    test.wait()
    while not gone(orphan):  # it notices its parent is gone within a million iterations
        time.sleep(0.05)

    # the suite: one spinning process beside the loaded level (the other xdist worker keeps the other core busy)
    assert batch_params(("root", "user"), ("root",)) == ([("root", 1, 1), ("user", 1, 0)], ["root", "user"])
    monkeypatch.setenv("HOSTILE_RUNS", "2")
    cores = os.cpu_count() or 1
    assert batch_params(("root", "user"), ("root",)) == (
        [("root", 1, cores), ("root", 2, cores), ("user", 1, cores), ("user", 2, cores)],
        ["root-run1", "root-run2", "user-run1", "user-run2"])
    monkeypatch.setenv("HOSTILE_RUNS", "0")
    with pytest.raises(ValueError, match="HOSTILE_RUNS"):
        batch_params(("root",), ())


@pytest.mark.sandbox
@pytest.mark.timeout(600)  # the level's whole corpus is graded in the first test that asks (CorpusBatches)
@pytest.mark.parametrize("batch, case", case_params(BATCHES, BATCH_IDS), indirect=["batch"])
def test_hostile_notebook(batch, case):
    assert_contained(batch, expected(case, batch["level"]))


def assert_contained(batch: dict, case) -> None:
    """The case's exact outcome at the batch's level (tests/hostile/levels.py), and nothing escaped."""
    results = batch["results"]
    assert case.name in results and "__after__" in results, "the batch did not finish"
    assert results["__after__"].score == FULL, "the engine is not healthy after the hostile corpus"
    if any(c.waits and c.name in results for c in CASES):  # graded by a second engine (run.grade_cases)
        assert results[run.AFTER_WAITING].score == FULL, "the second engine is not healthy after the cases that wait"
        assert results[run.AFTER_WAITING].isolation == results["__after__"].isolation, "the engines' levels differ"
    if case.waits:
        assert results[case.name].isolation == results["__after__"].isolation, "graded at another level"
    assert batch["changed"] == [], f"files outside the sandbox changed: {batch['changed']}"
    assert batch["server"] == [], f"the loopback server was reached: {batch['server']}"
    assert batch["ipc_left"] == [], f"System V IPC objects left on the host: {batch['ipc_left']}"
    if batch.get("burners"):  # graded under load: every spinning process lasted the whole batch
        started, lasted = batch["burners"]
        assert lasted == started >= 1, f"{started - lasted} of the {started} CPU burners stopped during the batch"
    r = results[case.name]
    assert r.student == (case.student or case.name)  # a learner's id is data: kept as it is, never rewritten
    assert r.status == case.status, (r.status, r.reason, _outputs_text(r)[-3000:])
    assert r.reason == case.reason
    assert r.score == case.score, {c.grade_id: c.messages for c in r.cells if not c.passed}
    assert r.max_score == FULL
    assert sorted(r.flags) == sorted(case.flags)
    assert r.suspicions == case.suspicions  # the instructor's evidence (issue 41, class 4): only where expected
    if r.status == "graded":
        assert {c.grade_id for c in r.cells if not c.passed} == set(case.failing)
        for c in r.cells:
            assert c.score == (0 if c.grade_id in case.failing else c.max_score)
    else:
        assert all(c.score == 0 and not c.passed for c in r.cells)
        assert all(case.reason in m for c in r.cells for m in c.messages)
    text = _outputs_text(r)
    for s in case.outputs_contain:
        assert s in text, f"{s!r} not in the executed notebook's outputs"
    for s in case.outputs_lack:
        assert s not in text, f"{s!r} in the executed notebook's outputs"
    assert GradingResult.from_json(r.to_wire()) == r  # its wire form is plain UTF-8 JSON and reads back the same
    page = feedback_html(r)
    page.encode("utf-8")
    for s in case.extra.get("feedback_lacks", ()):
        assert s not in page and s not in json.dumps(r.to_json()["cells"]), f"{s!r} reached the learner's feedback"
    if r.executed_notebook is not None:
        assert len(json.dumps(r.executed_notebook)) < 8 << 20  # outputs were capped
        nbformat.validate(nbformat.from_dict(r.executed_notebook))
    if "autograded_inert" in case.extra:
        assert_autograded_inert(batch["course"], r, case.extra["autograded_inert"])
    if case.extra.get("class_report"):
        assert_class_report_draws(batch["course"], r, results["__after__"])


def assert_class_report_draws(course: Course, r: GradingResult, other: GradingResult) -> None:
    """The class report over this learner and another: the heatmap labels every learner with the id as plain text
    (matplotlib parsed `$...$` as mathtext and the whole report failed before issue 24), nothing of the id becomes
    markup in the page, and its CSV cell is no formula."""
    from bs4 import BeautifulSoup

    from autograder import export, report

    chapter = {CHAPTER: report.exercise_order(course, [CHAPTER])[CHAPTER]}
    flagged = r.replace(flags=(f"look at {r.student}",))  # so the page lists the id (the flagged table)
    soup = BeautifulSoup(report.render(course, [flagged, other]), "html.parser")
    assert not soup.find("b") and r.student in soup.get_text()
    import matplotlib.pyplot as plt

    try:
        heatmap = report.build_figures([r, other], [CHAPTER], chapter)["heatmap"][0]
        heatmap.canvas.draw()
        labels = heatmap.axes[0].get_yticklabels()
        assert r.student in [t.get_text() for t in labels] and not any(t._parse_math for t in labels)
    finally:
        plt.close("all")
    assert export.safe_cell(r.student) == "'" + r.student


INERT_MIMES = {"text/plain", "image/png", "image/jpeg", RECORD_MIME}  # what safe_output keeps (none renders active)


def assert_autograded_inert(course: Course, r: GradingResult, mark: str) -> None:
    """The autograded notebook as `grade` writes it for formgrader (outputs.write_outputs): every output only plain
    text, a validated raster image or a check record; every learner cell carrying ``mark`` shown as plain text."""
    from autograder import outputs, safe_output

    outputs.write_outputs(course, r)
    written = json.loads((course.grading / "autograded" / r.student / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    marked = 0
    for cell in written["cells"]:
        for o in cell.get("outputs", []):
            assert set(o.get("data", {})) <= INERT_MIMES, (o.get("output_type"), sorted(o.get("data", {})))
            assert not {k: v for k, v in o.get("metadata", {}).items() if k not in ("width", "height")}
            marked += mark in json.dumps(o)
        if cell["cell_type"] != "code" and mark in "".join(cell["source"]):
            assert cell["source"].startswith(safe_output.LEARNER_TEXT_NOTE), cell["source"][:200]
            marked += 1
    assert marked, f"{mark!r} is not in the autograded notebook at all (the attack did not run)"


@pytest.mark.sandbox
@pytest.mark.timeout(600)  # the level's whole corpus is graded in the first test that asks (CorpusBatches)
@pytest.mark.parametrize("batch", BATCHES, ids=BATCH_IDS, indirect=True)
def test_wrong_answer_feedback_names_symptoms_without_leaking(batch):
    source = nbformat.read(COURSE.source_notebook(CHAPTER), as_version=4)
    secrets = {"BEGIN HIDDEN TESTS", "0.32861", "torch-sdpa-", "masked-weights-"}
    for cell in source.cells:
        if is_graded_test(cell) and trusted.is_hidden(cell.source):
            hidden = cell.source.split("BEGIN HIDDEN TESTS", 1)[1]
            secrets |= {line.strip() for line in hidden.splitlines() if len(line.strip()) > 20}
    for name, r in batch["results"].items():
        page = feedback_html(r)
        messages = json.dumps(r.to_json()["cells"]) + json.dumps(r.flags) + r.reason
        for s in secrets:
            assert s not in page and s not in messages, (name, s)
    if batch["level"] != FULLEST:  # the cases below are level-independent: graded at the root level only
        return
    r = batch["results"]["tensor_subclass"]
    assert any("tensor subclass" in m for m in r.cell("test_sdpa_visible").messages)
    r = batch["results"]["fake_records"]
    assert any("fake check record" in m for m in r.cell("test_sdpa_visible").messages)
    r = batch["results"]["patch_numpy_torch"]
    assert any("is the scale 1/sqrt(d)" in m for m in r.cell("test_sdpa_hidden").messages), \
        r.cell("test_sdpa_hidden").messages
    page = feedback_html(r)
    assert "test_sdpa_hidden" in page and "failed" in page and "19 / 27" in page


# -- self-consistency checks: a synthetic chapter whose expected value depends on the run ----------------

SYNTHETIC = "98_synthetic"
SYN_SETUP = ("import torch\nfrom attention_course.runtime import start_chapter\ndevice = start_chapter('98_synthetic')\n"
             "def noisy(g):\n    return torch.randn(3, generator=g, dtype=torch.float64)")
SYN_SOLUTION = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
SYN_TEST = '''from attention_course.checks import Checks
check = Checks("test_double")
x = torch.randn(4, dtype=torch.float64)            # the global RNG: differs with the seed
check.close("fixed", double(torch.ones(3, dtype=torch.float64)), torch.full((3,), 2.0, dtype=torch.float64))
check.close("consistent", double(x) / 2, x)         # want depends on the run: stays in the kernel
expected = torch.tensor([2.0, 4.0], dtype=torch.float64)
check.close("literal", double(torch.tensor([1.0, 2.0], dtype=torch.float64)), expected)
'''
# an expected value whose computation also advances a generator the next check needs: dropping it would
# change that check's input, so the grader falls back to keeping this cell's expected values
SYN_RNG_TEST = '''from attention_course.checks import Checks
check = Checks("test_rng")
g = torch.Generator().manual_seed(1)
expected = noisy(g) * 0 + 2.0
check.close("first", double(torch.ones(3, dtype=torch.float64)), expected)
x = torch.randn(3, generator=g, dtype=torch.float64)
check.matches_reference("second", double(x))
'''


def _synthetic_course(root: Path) -> Course:
    return write_chapter(root, SYNTHETIC, [("setup", SYN_SETUP, "setup"), ("solution", SYN_SOLUTION, "double"),
                                           ("test", SYN_TEST, "test_double", 3), ("test", SYN_RNG_TEST, "test_rng", 1)])


@pytest.mark.sandbox
@pytest.mark.timeout(120)
def test_self_consistency_sites_keep_their_expected_value_in_the_kernel(tmp_path):
    course = _synthetic_course(tmp_path)
    source = nbformat.read(course.source_notebook(SYNTHETIC), as_version=4)
    with Engine(course.root, LIMITS) as engine:
        _require_isolation(engine)
        prof = engine.profile(SYNTHETIC)
        spec = prof["cells"]["test_double"]
        assert [c["check"] for c in spec["checks"]] == ["fixed", "consistent", "literal"]
        assert spec["keep_want_sites"] == [2] and not spec["conservative"]
        assert prof["cells"]["test_rng"]["conservative"]
        code, _ = trusted.rewrite_test_cell(SYN_TEST, "grade", set(spec["keep_want_sites"]))
        assert "torch.full" not in code and "[2.0, 4.0]" not in code  # reproducible wants never run
        assert "double(x) / 2, x)" in code
        right = tmp_path / "right" / f"{SYNTHETIC}.ipynb"
        right.parent.mkdir()
        nbformat.write(source, right)
        assert engine.grade(SYNTHETIC, right, "right").score == 4
        wrong = copy.deepcopy(source)
        wrong.cells[1].source = "def double(x):\n    return x + x + 0 * x.sum() + (x.numel() == 2)"
        path = tmp_path / "wrong" / f"{SYNTHETIC}.ipynb"
        path.parent.mkdir()
        nbformat.write(wrong, path)
        r = engine.grade(SYNTHETIC, path, "wrong")
        assert r.score == 1 and r.cell("test_rng").passed  # right where numel != 2
        assert r.cell("test_double").messages == ("literal: 2 of 2 values are wrong",)


# -- pieces that need no sandbox ------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_rewritten_test_cells_hold_no_expected_values():
    source = nbformat.read(COURSE.source_notebook(CHAPTER), as_version=4)
    cells = {grade_id(c): c.source for c in source.cells if is_graded_test(c)}
    visible, _ = trusted.rewrite_test_cell(cells["test_sdpa_visible"], "grade")
    assert "0.32861" not in visible and "check.close" not in visible
    assert visible.count("\n") == cells["test_sdpa_visible"].count("\n") + 1  # lines stay in place
    hidden, _ = trusted.rewrite_test_cell(cells["test_sdpa_hidden"], "grade")
    assert "F.scaled_dot_product_attention(q, k, v" not in hidden
    assert "__ac_raises__" in hidden and "match=" not in hidden
    for gid, src in cells.items():
        profile_code, sites = trusted.rewrite_test_cell(src, "profile")
        grade_code, sites2 = trusted.rewrite_test_cell(src, "grade")
        assert sites == sites2 and len(sites) == profile_code.count("__ac_site__(")
    with pytest.raises(trusted.TestCellNotSupported):
        trusted.rewrite_test_cell("check = Checks('x')\nhelper(check)\ncheck.close('a', 1, 1)", "grade")


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_structure_repair_restores_and_flags():
    source = nbformat.read(COURSE.source_notebook(CHAPTER), as_version=4)
    release = nbformat.read(COURSE.release_notebook(CHAPTER), as_version=4)
    ref = submissions.reference(COURSE, CHAPTER)
    fixed = structure.repair(ref, source, release)
    assert fixed.flags == []
    assert "BEGIN HIDDEN TESTS" in fixed.nb.cells[fixed.tests["test_sdpa_hidden"]].source
    moved = copy.deepcopy(ref)
    i = next(k for k, c in enumerate(moved.cells) if grade_id(c) == "test_variance")
    moved.cells.insert(0, moved.cells.pop(i))  # a test moved before its solution runs after it again
    fixed = structure.repair(moved, source, release)
    order = [grade_id(c) for c in fixed.nb.cells if grade_id(c)]
    assert order.index("test_variance") > order.index("dot_product_variance")
    forged = copy.deepcopy(ref)
    extra = nbformat.v4.new_code_cell("print('free points')")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "test_bonus", "points": 50, "solution": False}
    forged.cells.append(extra)
    fixed = structure.repair(forged, source, release)
    assert fixed.flags == ["a cell with a grade_id the chapter does not have: its nbgrader metadata was removed"]
    assert "test_bonus" not in fixed.tests


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_unusable_files_get_a_reason(tmp_path):
    cases = {"wrong.ipynb": (b"{}", "wrong file name"), f"{CHAPTER}.ipynb": (b"  \n", "empty file")}
    for name, (data, reason) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(structure.Unusable, match=reason):
            structure.load_submission(p, CHAPTER)
    p = tmp_path / f"{CHAPTER}.ipynb"
    p.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(structure.Unusable, match="malformed JSON"):
        structure.load_submission(p, CHAPTER)
    p.write_text(json.dumps({"cells": [{"cell_type": "code", "source": 5}]}))
    with pytest.raises(structure.Unusable, match="not a notebook"):
        structure.load_submission(p, CHAPTER)


# -- choosing the level (pure logic: the probe's findings are given) ------------------------------------


def _found(root=False, namespaces=False, userns=False, landlock=7, backend=None):
    from autograder.sandbox import cgroups

    return {"root": root, "namespaces": namespaces, "user_namespace": userns, "seccomp": True,
            "landlock": landlock, "cgroup": backend or cgroups.NoCgroup(), "cgroup_reasons": ["cgroup v1: needs root"]}


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_the_strongest_reachable_level_is_chosen_and_nothing_below_the_required_one():
    from autograder.sandbox import levels

    assert levels.choose(_found(root=True, namespaces=True, userns=True)) == "root"
    assert levels.choose(_found(userns=True)) == "user"
    assert levels.choose(_found()) == "process"
    assert levels.choose(_found(userns=True), "process") == "process"
    with pytest.raises(levels.Unreachable, match="'user' is not reachable here: unprivileged user namespaces"):
        levels.choose(_found(), "user")
    with pytest.raises(levels.Unreachable, match="isolation 'process' is below the required 'user'"):
        levels.choose(_found(), "auto", "user")
    with pytest.raises(levels.Unreachable, match="not running as root"):
        levels.choose(_found(userns=True), "root")


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_each_level_says_what_it_lacks():
    from autograder.sandbox import levels

    user = levels.describe("user", _found(userns=True))
    assert user["label"] == "user (rlimits, seccomp)"
    assert user["lacks"] == ["no cgroup: memory limited by RLIMIT_AS and processes by RLIMIT_NPROC (a notebook over "
                             "a limit sees an error instead of being stopped); memory budgets are not proven, so "
                             "budget cells earn no points (autograder/memory_budget.py)"]
    proc = levels.describe("process", _found(landlock=0))
    assert proc["label"] == "process (rlimits, no landlock, seccomp)"
    assert any(line.startswith("no Landlock: the kernel can read whatever this account can read") for line in proc["lacks"])
    assert any(line.startswith("no namespaces") for line in proc["lacks"])
    old = levels.describe("process", _found(landlock=4))
    assert any("Landlock ABI 4 (< 6): signals" in line for line in old["lacks"])


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_policies_are_data_applied_by_named_steps():
    from autograder.sandbox import jail, policy

    for level in policy.LEVELS:
        for root in (True, False):
            pol = policy.for_level(level, root=root, cgroup=False, landlock=True, seccomp=True)
            assert set(pol.monitor_steps) | set(pol.kernel_steps) <= set(jail.STEPS)
            assert pol.kernel_steps[-2:] == ("seccomp", "environment")  # learner code starts right after
    user = policy.for_level("user", root=False, cgroup=False, landlock=True, seccomp=True)
    assert "drop_capabilities" in user.kernel_steps and "user_namespace" in user.monitor_steps
    proc = policy.for_level("process", root=False, cgroup=False, landlock=True, seccomp=True)
    assert proc.kernel_steps.index("landlock_rules") < proc.kernel_steps.index("no_new_privs") \
        < proc.kernel_steps.index("landlock")
    assert "/etc" not in proc.binds and "/etc/shadow" not in proc.read_only_extra
    for level in ("root", "user"):  # a namespace root that is host uid 0 must not find /etc/shadow bound
        binds = policy.for_level(level, root=True, cgroup=True, landlock=True, seccomp=True).binds
        assert "/etc" not in binds and "/etc/shadow" not in binds and "/etc/passwd" in binds
    limits = {"max_procs": 64, "scratch_mb": 64, "notebook_timeout_s": 20, "memory_mb": 1536}
    with_cgroup = policy.rlimits(limits, nproc_base=0, as_base_mb=None)
    assert with_cgroup["RLIMIT_NPROC"] == (96, 96) and "RLIMIT_AS" not in with_cgroup
    alone = policy.rlimits(limits, nproc_base=10, as_base_mb=3000)
    assert alone["RLIMIT_NPROC"] == (74, 74) and alone["RLIMIT_AS"] == ((3000 + 1536) << 20,) * 2


# -- the result channel: raw caps, strict decoding, safe reasons (autograder/sandbox/framing.py, monitor.py) ------


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_learner_text_in_a_reason_is_one_line_without_control_characters():
    from autograder.learner_text import last_line, one_line

    paint = "\x1b[2J\x1b[31mFATAL\r\x07 grader\texploded\x1b]0;pwned\x07\x1b[0m\u202e\u200b \x9b1m!"
    assert one_line(paint) == "FATAL grader exploded !"
    assert last_line("Traceback (most recent call last):\n  ...\nRuntimeError: " + paint + "\n") == \
        "RuntimeError: FATAL grader exploded !"
    assert one_line("x" * 1000, 20) == "x" * 17 + "..."
    assert all(ch.isprintable() for ch in one_line("".join(map(chr, range(0x250)))))


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_result_frames_are_capped_on_raw_bytes_and_decoded_strictly():
    import os
    import struct

    from autograder import sandbox

    r, w = os.pipe()
    try:
        os.write(w, struct.pack(">I", 200 << 20))  # only the header: refused before any body is read
        with pytest.raises(sandbox.ProtocolError, match="exceeds the cap"):
            sandbox.read_raw_frame(r, 100 << 20, time.monotonic() + 5)
    finally:
        os.close(r)
        os.close(w)
    for bad in (b'{"done":true,"cells":{"0":NaN}}', b'{"done":true,"cells":{"0":-Infinity}}', b'{"done":true}',
                b'{"done":1,"cells":{}}', b"[1]", b'{"done":true,"cells":{}', b"\xff"):
        with pytest.raises(sandbox.ProtocolError):
            sandbox.decode_result(bad)
    assert sandbox.decode_result(b'{"done":true,"cells":{"3":{}},"truncated":true}') == {"cells": {"3": {}},
                                                                                          "truncated": True, "warm": []}
    # the lazy imports a kernel says it made: a few strings, anything else dropped (the Engine keeps only the names
    # of runner.WARM_UPS: test_a_forged_warm_list_reaches_the_zygote_only_as_names_it_owns)
    for warm, kept in (('"sympy"', []), ('{"a":1}', []), ('["sympy",1,null]', ["sympy"]),
                       ("[" + ",".join(['"a"'] * 50) + "]", ["a"] * 8)):
        frame = b'{"done":true,"cells":{},"warm":' + warm.encode() + b"}"
        assert sandbox.decode_result(frame)["warm"] == kept, warm
    # the Engine's reading of a report: a result that does not decode, or none, is the learner's zero
    ok = {"status": "ok", "reason": "", "result_bytes": 5}
    assert sandbox.read_report(ok, b"[1,2]")["status"] == "zero"
    assert sandbox.read_report(ok, None)["reason"] == sandbox.INTERFERED
    good = sandbox.read_report(ok, b'{"done":true,"cells":{"1":{"outputs":[]}}}')
    assert good["status"] == "ok" and good["cells"] == {"1": {"outputs": []}} and "result_bytes" not in good
    zero = sandbox.read_report({"status": "zero", "reason": "kernel died (\x1b[31mboom\r)"}, None)
    assert zero["reason"] == "kernel died (boom )"
    assert sandbox.read_report("status", None)["status"] == "error"


@pytest.mark.unit
@pytest.mark.timeout(120)
def test_a_result_is_decoded_within_a_memory_budget():
    import subprocess
    import sys

    code = ("from autograder.sandbox import monitor\n"
            "raw = b'{\"done\":true,\"cells\":{},\"pad\":[' + b'9e15,' * (4 << 20) + b'0]}'\n"  # 20 MB
            "print(repr(monitor._decodes_within(raw, 4 * len(raw) + (64 << 20))))\n"
            "print(repr(monitor._decodes_within(raw, 2 << 30)))\n"
            "print(repr(monitor._decodes_within(b'{\"done\":true,\"cells\":{\"0\":NaN}}', 1 << 30)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100,
                          cwd=str(COURSE.root))
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr[-2000:]
    assert lines[0].startswith("'the result of 20971") and "does not decode within 144 MB" in lines[0], lines
    assert lines[1] == "''"  # the same bytes decode with room to spare
    assert "malformed frame" in lines[2]


@pytest.mark.sandbox
@pytest.mark.timeout(60)
def test_system_v_ipc_of_a_sandbox_uid_is_removed():
    import ctypes
    import os

    from autograder.sandbox import sysv

    if os.geteuid() != 0:
        pytest.fail("this test needs root (it creates IPC objects as another uid)")
    uid = 299_999  # no account's: as the per-sandbox uids of jail.UID_BASE are
    libc = ctypes.CDLL(None, use_errno=True)
    mine = libc.shmget(0, ctypes.c_size_t(1 << 20), 0o1000 | 0o600)  # root's own: must stay
    assert mine >= 0
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            ok = (libc.shmget(0, ctypes.c_size_t(1 << 20), 0o1000 | 0o600) >= 0 and libc.msgget(0, 0o1000 | 0o600) >= 0
                  and libc.semget(0, 2, 0o1000 | 0o600) >= 0)
        finally:
            os._exit(0 if ok else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    try:
        owned = {(k, o["id"]) for k in sysv.KINDS for o in sysv.objects(k) if o["uid"] == uid}
        assert {k for k, _ in owned} == {"shm", "msg", "sem"}
        assert set(sysv.remove_owned_by(uid)) == owned
        assert not [o for k in sysv.KINDS for o in sysv.objects(k) if uid in (o["uid"], o["cuid"])]
        assert any(o["id"] == mine for o in sysv.objects("shm"))
    finally:
        sysv.remove("shm", mine)


@pytest.mark.unit
@pytest.mark.timeout(120)
def test_an_honest_result_always_decodes_within_the_monitors_budget():
    """The kernel's own budgets charge every output entry and every record container what it costs decoded, so
    no notebook that only prints, displays (300k tiny values, alternating stdout and stderr) and records (lists
    of 100k values up to the record budget) makes a result the monitor would refuse."""
    import subprocess
    import sys

    code = ("import json\n"
            "from autograder.sandbox import monitor, runner\n"
            "cap = runner._Capture(5 << 20, 64 << 20)\n"
            "cap.start(0, 1)\n"
            "for i in range(300_000):\n"
            "    cap.rich('display_data', {'text/plain': '1'})\n"
            "cap.start(1, 2)\n"
            "for i in range(300_000):\n"
            "    cap.stream('stdout' if i % 2 else 'stderr', 'x')\n"
            "from attention_course.encoding import make_encoder\n"
            "enc = make_encoder()\n"
            "cap.start(2, 3)\n"
            "got = enc([[]] * 100_000)\n"  # a list of 100k values (each a dict of its own), 22 MB decoded
            "for i in range(5):\n"  # more than the record budget holds
            "    cap.record({'cell': 't', 'check': str(i), 'kind': 'close', 'got': got}, 'r')\n"
            "print(sum(runner.RECORD_MIME in o.get('data', {}) for o in cap.cells['2']['outputs']))\n"
            "raw = json.dumps({'done': True, 'cells': cap.cells, 'truncated': cap.truncated}).encode()\n"
            "print(len(cap.cells['0']['outputs']) + len(cap.cells['1']['outputs']), cap.truncated)\n"
            "print(repr(monitor._decodes_within(raw, monitor.decode_budget(len(raw), "
            "{'max_output_mb': 5, 'max_record_mb': 64}))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100,
                          cwd=str(COURSE.root))
    assert done.returncode == 0, done.stderr[-2000:]
    records, count, decodes = done.stdout.splitlines()
    assert 1 <= int(records) < 5  # kept up to the record budget, the rest dropped
    assert int(count.split()[0]) <= (5 << 20) // 256 + 2 and count.endswith("True")
    assert decodes == "''"


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_only_the_setup_pipe_can_make_a_result_the_graders_failure():
    """A jail step that fails is still the grader's error (said on the setup pipe); "ready" hands over to the
    result pipe, where nothing the kernel writes can be a grader error."""
    import os

    from autograder.sandbox import framing, monitor

    def kernel(frame):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            if frame is not None:
                framing.write_frame(w, frame)
            os._exit(0 if frame is not None else 7)
        os.close(w)
        return pid, r

    pid, r = kernel({"ready": True})
    assert monitor._setup_failure(pid, r, time.monotonic() + 20) is None
    os.waitpid(pid, 0)
    pid, r = kernel({"abort": "RuntimeError: sandbox step 'landlock' failed: \x1b[31mENOSYS"})
    failed = monitor._setup_failure(pid, r, time.monotonic() + 20)
    assert failed["status"] == "error"
    assert failed["reason"] == "sandbox setup failed: RuntimeError: sandbox step 'landlock' failed: ENOSYS"
    pid, r = kernel(None)  # died before saying anything
    assert monitor._setup_failure(pid, r, time.monotonic() + 20)["reason"] == \
        "sandbox setup failed: the kernel ended before its jail was built (exit status 7)"


@pytest.mark.sandbox
@pytest.mark.timeout(300)
def test_the_zygote_makes_a_lazy_import_once_a_kernel_has_made_it(tmp_path_factory, monkeypatch):
    """Most grading never builds an optimizer (chapter 3's class, this corpus), so the zygote starts without
    torch._dynamo (0.9 s of CPU per engine start). A kernel that made it says so, the Engine asks the zygote to
    make it, and the kernels after it find it made; a notebook graded cold or warm scores the same."""
    from .conftest import course_with_engine

    asked = []
    with course_with_engine(tmp_path_factory) as (course, engine):
        real = engine._make_warm
        monkeypatch.setattr(engine, "_make_warm", lambda proc, names: (asked.append(sorted(names)), real(proc, names)))

        def grade(chapter: str, student: str) -> None:
            path = submissions.write_submission(course, student, chapter, submissions.reference(course, chapter))
            r = engine.grade(chapter, path, student)
            assert r["status"] == "graded" and r["score"] == r["max_score"] > 0, (chapter, r["reason"])

        grade("03_scoring_functions", "cold")
        assert asked == [[]] and not engine._warm, "a chapter that builds no optimizer left the zygote cold"
        grade("02_kernel_regression", "first")  # trains a parametric kernel regression with an optimizer
        assert "torch._dynamo" in asked[-1] and "torch._dynamo" in engine._warm, asked
        asked.clear()
        grade("02_kernel_regression", "second")
        assert asked == [[]], f"the next kernel still made {asked}: the zygote did not"


@pytest.mark.unit
def test_a_forged_warm_list_reaches_the_zygote_only_as_names_it_owns():
    """A kernel's result names the lazy imports it made, and the learner writes that result: eight names of
    escaped control characters made a "w" frame larger than the zygote reads, and the zygote exited mid-class.
    Only names of runner.WARM_UPS are sent, each once per zygote."""
    import os
    from types import SimpleNamespace

    from autograder.sandbox.framing import decode
    from autograder.sandbox.runner import WARM_UPS

    engine = Engine(Course().root)
    r, w = os.pipe()
    try:
        fake = SimpleNamespace(stdin=os.fdopen(w, "wb", buffering=0))
        engine._make_warm(fake, ["\x01" * 98 + letter for letter in "abcdefgh"] + ["os", "subprocess"])
        engine._make_warm(fake, ["sympy", "evil", "sympy"])
        engine._make_warm(fake, ["sympy"])  # asked for already
        fake.stdin.close()
        w = None
        sent = os.read(r, 1 << 16)
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
    assert sent[:1] == b"w" and decode(sent[1 + 4:]) == ["sympy"], sent
    assert engine._warm == {"sympy"} and set(engine._warm) <= set(WARM_UPS)


_PROCESS_PROBE = r"""
import json, os, subprocess, sys, threading
from autograder.sandbox import seccomp

seccomp.load(refuse_processes=sys.argv[1] == "refuse")
out = {}
for name, start in (("fork", os.fork), ("subprocess", lambda: subprocess.run([sys.executable, "-c", "pass"]).returncode),
                    ("posix_spawn", lambda: os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], {}))):
    try:
        pid = start()
    except PermissionError as exc:
        out[name] = f"refused: errno {exc.errno}"
        continue
    if name == "fork" and pid == 0:
        os._exit(0)
    if name != "subprocess":
        os.waitpid(pid, 0)
    out[name] = "started"
ran = []
thread = threading.Thread(target=ran.append, args=("ran",))
thread.start()
thread.join()
out["thread"] = ran[0] if ran else "did not run"
if sys.argv[1] == "refuse":
    try:
        os.execv(sys.executable, [sys.executable, "-c", "pass"])
    except PermissionError as exc:
        out["exec"] = f"refused: errno {exc.errno}"
print(json.dumps(out))
"""


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_a_job_that_may_start_no_process_has_fork_and_exec_refused_and_keeps_its_threads():
    """Issue 41: without a cgroup a memory budget is RLIMIT_AS, which holds per process, so a budget's job may start
    no process and no program (a fresh Python or a fork had a budget of its own). Threads still start (torch uses
    them): clone with CLONE_THREAD is allowed, clone without it refused, clone3 answers ENOSYS (glibc falls back)."""
    import subprocess
    import sys

    def probe(mode: str) -> dict:
        done = subprocess.run([sys.executable, "-c", _PROCESS_PROBE, mode], capture_output=True, text=True,
                              timeout=50, cwd=str(COURSE.root))
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    refused = "refused: errno 1"  # EPERM: an ordinary PermissionError in the learner's cell
    assert probe("refuse") == {"fork": refused, "subprocess": refused, "posix_spawn": refused, "thread": "ran",
                               "exec": refused}
    assert probe("allow") == {"fork": "started", "subprocess": "started", "posix_spawn": "started", "thread": "ran"}


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_no_process_is_the_budget_jobs_limit_applied_by_the_seccomp_step():
    from dataclasses import asdict
    from types import SimpleNamespace

    from autograder import memory_budget
    from autograder.sandbox import jail, policy

    budget_job = asdict(memory_budget.limits_for(Limits(), 64))
    assert policy.seccomp_options(budget_job) == {"refuse_processes": True}
    assert policy.seccomp_options(asdict(Limits())) == {"refuse_processes": False}
    assert policy.seccomp_options({}) == {"refuse_processes": False}  # a job from before the field: processes allowed
    for level in policy.LEVELS:
        for root in (True, False):
            for cgroup in (True, False):
                steps = policy.for_level(level, root=root, cgroup=cgroup, landlock=True, seccomp=True).kernel_steps
                assert "seccomp" in steps and "single_process" not in steps
                # no seccomp: a cgroup still counts the whole tree; with neither, such a job is refused, never run
                steps = policy.for_level(level, root=root, cgroup=cgroup, landlock=True, seccomp=False).kernel_steps
                assert "seccomp" not in steps and ("single_process" in steps) == (not cgroup)
    with pytest.raises(RuntimeError, match="may start no process"):
        jail.single_process(SimpleNamespace(limits=budget_job))
    jail.single_process(SimpleNamespace(limits=asdict(Limits())))  # any other job runs as before


_SHM_HOLDER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
shmid = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
print(shmid, flush=True)
sys.stdin.readline()  # alive until the test says so
"""


@pytest.mark.unit
def test_a_segment_another_running_program_made_is_not_the_gradings_leak():
    """The leak check counts what grading left, not what another program on the shared host holds (a PostgreSQL
    server beside the batch made one mid-batch): a segment whose creator runs is not counted; once its creator is
    gone and the segment stays, it is."""
    before = run.sysv_ipc_objects()
    holder = subprocess.Popen([sys.executable, "-c", _SHM_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    shmid = holder.stdout.readline().strip()
    try:
        assert shmid.isdigit(), f"shmget failed: {shmid!r}"
        assert ("shm", shmid) in run.sysv_ipc_objects()
        assert ("shm", shmid) not in run.ipc_left_by_grading(before)
        holder.communicate("\n", timeout=30)
        assert ("shm", shmid) in run.ipc_left_by_grading(before)
    finally:
        holder.kill()
        holder.wait()
        ctypes.CDLL(None).shmctl(int(shmid), 0, None) if shmid.isdigit() else None  # IPC_RMID
    assert ("shm", shmid) not in run.sysv_ipc_objects()
