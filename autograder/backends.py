"""Where notebooks are graded: local worker processes (one warm engine each) or a Dask distributed cluster.
Each backend yields ``(task, result)`` as results arrive; results come back to the grading command, the only
gradebook writer. Used by ``grade`` (autograder/batch.py); :func:`make_engine`, :func:`prepare_with` and
:func:`close_engine` are the engine's life cycle for any other caller (the benchmarks).
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from attention_course.language import speaking

from .atomic_files import write_atomic_bytes
from .course import Course
from .digests import framed_sha256
from .discovery import Task, failed_result, submission_bytes
from .parent_death import die_with_parent
from .results import GradingResult, ResultFormatError

# One BLAS/OpenMP thread per notebook: scores do not depend on the worker count, and N workers do not
# oversubscribe N cores.
_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def make_engine(course_root: Path, module_name: str, limits: dict):
    os.environ.update(_THREAD_ENV)
    module = importlib.import_module(module_name)
    engine = module.Engine(Path(course_root), module.Limits(**limits))
    enter = getattr(engine, "__enter__", None)
    return enter() if enter else engine


def close_engine(engine) -> None:
    try:
        exit_ = getattr(engine, "__exit__", None)
        if exit_:
            exit_(None, None, None)
        elif hasattr(engine, "close"):
            engine.close()
    except Exception:
        pass


def _grade_with(engine, task: Task, submission: Path) -> GradingResult:
    with speaking(getattr(engine, "language", None)):  # the class's (the engine's course's), English without one
        return _grade_in_language(engine, task, submission)


def _grade_in_language(engine, task: Task, submission: Path) -> GradingResult:
    started = time.perf_counter()
    try:
        result = engine.grade(task.chapter, submission, task.student)
        if not isinstance(result, GradingResult):
            raise TypeError(f"the engine returned a {type(result).__name__}, not an autograder.results.GradingResult")
    except Exception:
        result = failed_result(task, "grader error: " + traceback.format_exc(limit=8)[-2000:])
    if not result.seconds:
        result = result.replace(seconds=time.perf_counter() - started)
    # The learner's feedback page is rendered here, by the worker, in parallel: the grading command then
    # never imports the engine (and torch) itself.
    render = getattr(sys.modules.get(type(engine).__module__), "feedback_html", None)
    if render is not None and result.recorded:
        t0 = time.perf_counter()
        try:
            page = render(result)
        except Exception:  # noqa: BLE001 - the grading command renders it again (and reports the error)
            page = None
        result = result.replace(feedback_html=page,
                                timings={**dict(result.timings), "feedback html": time.perf_counter() - t0})
    return result


def received_result(task: Task, payload) -> GradingResult:
    """A worker's result from its wire form (results.GradingResult.to_wire): only JSON crosses process and
    machine boundaries, bounded and versioned; what does not decode is the grader's failure on that notebook."""
    try:
        return GradingResult.from_json(payload)
    except ResultFormatError as err:
        return failed_result(task, f"grader error: a worker's result could not be read: {err}")


def prepare_with(engine, chapter: str) -> str | None:
    """Build (or load) what the engine needs once per chapter, e.g. its reference profile; None when fine."""
    prepare = getattr(engine, "profile", None)
    if prepare is None:
        return None
    try:
        prepare(chapter)
        return None
    except Exception:
        return traceback.format_exc(limit=6)[-3000:]


def _local_worker(conn, parent_pid: int, course_root: str, module_name: str, limits: dict) -> None:
    die_with_parent(parent_pid)  # a killed grade or serve takes its workers with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        engine = make_engine(Path(course_root), module_name, limits)
    except Exception:
        conn.send(("fatal", traceback.format_exc()))
        return
    try:
        conn.send(("ready", None))
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg is None:
                break
            if msg.get("op") == "prepare":
                conn.send(("prepared", prepare_with(engine, msg["chapter"])))
                continue
            task = Task(**msg)
            conn.send(("result", _grade_with(engine, task, Path(task.path)).to_wire()))
    finally:
        close_engine(engine)


_worker_state = threading.local()
_materialise_lock = threading.Lock()


def _materialise(bundle: dict) -> Path:
    """Write the shipped course files once per worker machine; returns the course root.

    ``bundle["files"]`` (sources, release) name the root; ``bundle["cache"]`` (the engine's per-chapter
    caches, e.g. reference profiles) are added to it when missing."""
    base = Path(tempfile.gettempdir()) / f"attention-course-grader-{os.getuid()}"
    root = base / bundle["hash"]
    with _materialise_lock:
        _materialise_files(base, root, bundle)
        for rel, data in bundle.get("cache", {}).items():
            dest = root / rel
            if not dest.is_file():
                write_atomic_bytes(dest, data)
    return root


def _materialise_files(base: Path, root: Path, bundle: dict) -> None:
    if (root / ".complete").is_file():
        return
    base.mkdir(mode=0o700, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=base))
    for rel, data in bundle["files"].items():
        dest = staging / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    (staging / ".complete").write_text("")
    try:
        staging.rename(root)
    except OSError:  # another worker process on this machine won the race
        shutil.rmtree(staging, ignore_errors=True)


def _thread_engine(root: Path, module_name: str, limits: dict):
    """This Dask worker thread's warm engine for a materialised course root."""
    engines = getattr(_worker_state, "engines", None)
    if engines is None:
        engines = _worker_state.engines = {}
    if root not in engines:
        engines[root] = make_engine(root, module_name, limits)
    return engines[root]


def prepare_on_dask_worker(bundle: dict, chapter: str, module_name: str, limits: dict) -> dict:
    """A Dask task: build the engine's per-chapter cache; returns the files it wrote under grading/expected."""
    root = _materialise(bundle)
    cache_dir = root / "grading" / "expected"
    before = {p: p.stat().st_mtime_ns for p in cache_dir.glob("*")} if cache_dir.is_dir() else {}
    error = prepare_with(_thread_engine(root, module_name, limits), chapter)
    if error:
        return {"error": error, "files": {}}
    files = {}
    for p in sorted(cache_dir.glob("*")) if cache_dir.is_dir() else []:
        if p.is_file() and not p.name.startswith(".") and before.get(p) != p.stat().st_mtime_ns:
            files[str(p.relative_to(root))] = p.read_bytes()
    return {"error": None, "files": files}


def grade_on_dask_worker(bundle: dict, task: dict, payload: bytes | None, module_name: str, limits: dict) -> bytes:
    """A Dask task: grade one shipped submission with this worker thread's warm engine; the result's wire form."""
    root = _materialise(bundle)
    task = Task(**task)
    try:
        engine = _thread_engine(root, module_name, limits)
    except Exception:
        return failed_result(task, "engine failed to start on the worker: "
                             + traceback.format_exc()[-2000:]).to_wire()
    with tempfile.TemporaryDirectory(prefix="submission-") as tmp:
        path = Path(tmp) / task.student / task.chapter / Path(task.path).name
        path.parent.mkdir(parents=True)
        if payload is not None:
            path.write_bytes(payload)
        result = _grade_with(engine, task, path)
    return result.replace(worker=os.uname().nodename).to_wire()


class LocalBackend:
    """N worker processes, each with one warm engine; tasks handed out one at a time to idle workers."""

    def __init__(self, workers: int, course_root: Path, module_name: str, limits: dict, max_restarts: int = 8,
                 keep_warm: bool = False):
        self.n = max(1, workers)
        # keep_warm: the workers outlive a run, idle and warm, for the next (``serve``); otherwise a run asks
        # them to stop as soon as no task is left for them (``grade``: one run per process).
        self.keep_warm = keep_warm
        self.args = (str(course_root), module_name, limits)
        self.ctx = mp.get_context("spawn")
        self.max_restarts = max_restarts
        self.procs: list = []
        self.started = 0  # worker processes started in all (a run with nothing to grade starts none)

    def describe(self, tasks: int) -> str:
        return f"with {min(self.n, max(1, tasks))} worker process(es)"

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_local_worker, args=(child, os.getpid(), *self.args), daemon=True)
        proc.start()
        child.close()
        w = {"proc": proc, "conn": parent, "task": None, "closing": False, "idle": False}
        self.procs.append(w)
        self.started += 1
        return w

    def _retire(self, w):
        if w in self.procs:
            self.procs.remove(w)
        try:
            w["conn"].close()
        except OSError:
            pass
        if w["proc"].is_alive():
            w["proc"].kill()
        w["proc"].join(5)

    def start(self, expected_tasks: int) -> None:
        """Start the workers now (they warm up while the caller opens the gradebook)."""
        while len(self.procs) < min(self.n, expected_tasks):
            self._start()

    def stop(self) -> None:
        """Workers asked to stop get a few seconds to close their engines; the rest are killed."""
        deadline = time.monotonic() + 10
        for w in list(self.procs):
            if w["closing"]:
                w["proc"].join(max(0.0, deadline - time.monotonic()))
            self._retire(w)

    def prepare(self, chapters: list[str]) -> None:
        """The engine's per-chapter caches (reference profiles) before anyone grades: each chapter by one
        worker, different chapters on different workers as they become ready (a cached profile is a file
        read; a cold one runs the reference twice)."""
        pending = list(chapters)
        if not pending:
            return
        self.start(1)
        busy: dict[int, str] = {}

        def dispatch(w) -> None:
            chapter = pending.pop(0)
            w["idle"] = False
            w["conn"].send({"op": "prepare", "chapter": chapter})
            busy[id(w)] = chapter

        while pending or busy:
            for w in self.procs:
                if w["idle"] and pending:
                    dispatch(w)
            # busy workers, and (while chapters are left) workers still starting, whose next word is "ready"
            watch = [w for w in self.procs if id(w) in busy or (pending and not w["idle"])]
            if not watch:
                raise RuntimeError("all grading workers died")
            conns = {w["conn"]: w for w in watch}
            sentinels = {w["proc"].sentinel: w for w in watch}
            for ready in mp.connection.wait([*conns, *sentinels]):
                w = conns.get(ready) or sentinels[ready]
                try:
                    if ready is not w["conn"] and not w["conn"].poll():
                        raise EOFError
                    kind, payload = w["conn"].recv()
                except (EOFError, OSError):
                    raise RuntimeError("a grading worker died while preparing (see the messages above)") from None
                if kind == "fatal":
                    raise RuntimeError("the grading engine failed to start:\n" + payload)
                if kind == "prepared":
                    chapter = busy.pop(id(w))
                    if payload:
                        raise RuntimeError(f"the grading engine could not prepare {chapter}:\n{payload}")
                w["idle"] = True  # "ready" or "prepared": waiting for work

    def run(self, tasks: list[Task]):
        pending = list(reversed(tasks))
        attempts: dict[int, int] = {}
        restarts = 0
        for w in list(self.procs):
            if not w["proc"].is_alive():
                self._retire(w)  # died while it waited (killed, out of memory): start() replaces it
        if not self.keep_warm:
            ordered = sorted(self.procs, key=lambda w: not w["idle"])  # prepared (idle) workers first
            for w in ordered[max(1, len(tasks)):]:
                self._retire(w)  # more warm workers than tasks
        self.start(len(tasks))

        def assign(w) -> None:
            if pending:
                w["idle"] = False
                w["task"] = pending.pop()
                try:
                    w["conn"].send(asdict(w["task"]))
                except OSError:
                    pass  # it has just died: its sentinel says so below, and its task is handed out again
            elif self.keep_warm:
                w["idle"] = True  # warm, waiting for the next run
            else:
                w["idle"] = False
                w["closing"] = True
                w["conn"].send(None)

        try:
            for w in list(self.procs):
                if w["idle"]:
                    assign(w)
            while pending or any(w["task"] is not None for w in self.procs):
                if not self.procs:
                    raise RuntimeError("all grading workers died")
                waitables = {}
                for w in self.procs:
                    waitables[w["conn"]] = w
                    waitables[w["proc"].sentinel] = w
                for ready in mp.connection.wait(list(waitables)):
                    w = waitables[ready]
                    if w not in self.procs:
                        continue
                    msg = None
                    if ready is w["conn"] or w["conn"].poll():
                        try:
                            msg = w["conn"].recv()
                        except (EOFError, OSError):
                            msg = None
                    if msg is None:  # the worker exited (asked to, or died)
                        task, closing = w["task"], w["closing"]
                        self._retire(w)
                        if closing:
                            continue
                        if task is not None:
                            attempts[id(task)] = attempts.get(id(task), 0) + 1
                            if attempts[id(task)] >= 2:
                                yield task, failed_result(task, "the grading worker died twice on this notebook")
                            else:
                                pending.append(task)
                        if pending and restarts < self.max_restarts:
                            restarts += 1
                            self._start()
                        continue
                    kind, payload = msg
                    if kind == "fatal":
                        raise RuntimeError("the grading engine failed to start:\n" + payload)
                    if kind == "result":
                        task, w["task"] = w["task"], None
                        yield task, received_result(task, payload)
                    if kind in ("ready", "result"):
                        assign(w)
        finally:
            for w in list(self.procs):  # ask the rest to stop; stop() waits for them
                if self.keep_warm and w["task"] is None:
                    continue  # idle and warm (a worker still busy is stopped: its result has nobody to read it)
                if not w["closing"]:
                    w["closing"] = True
                    try:
                        w["conn"].send(None)
                    except OSError:
                        pass


class DaskBackend:
    """Grade on a Dask distributed cluster; ships submission bytes and the course files grading needs.

    Workers need this repository's code and Python environment (``pip install -e .``, torch, ...) but no
    shared filesystem: each gets the chapters' source and release notebooks once (``client.scatter``) and
    every submission's bytes with its task; the engine's per-chapter cache (the reference profile) is
    built once on some worker, brought back here (and kept in ``grading/expected/``) and shipped to all."""

    def __init__(self, address: str, course: Course, chapters: list[str], module_name: str, limits: dict):
        self.address = address
        self.course = course
        self.chapters = chapters
        self.args = (module_name, limits)
        self.client = None

    def describe(self, tasks: int) -> str:
        return f"on the Dask cluster {self.address}"

    def _course_files(self) -> dict[str, bytes]:
        root = self.course.root
        files = {"autograder/nbgrader_config.py": (root / "autograder" / "nbgrader_config.py").read_bytes()}
        for chapter in self.chapters:
            for folder in (self.course.solutions / chapter, self.course.chapters_dir / chapter):
                if folder.is_dir():
                    for p in sorted(folder.rglob("*")):
                        if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts:
                            files[str(p.relative_to(root))] = p.read_bytes()
        return files

    def _cache_files(self) -> dict[str, bytes]:
        cache_dir = self.course.grading / "expected"
        files = {}
        if cache_dir.is_dir():
            for p in sorted(cache_dir.iterdir()):
                if p.is_file() and p.suffix == ".json" and any(ch in p.name for ch in self.chapters):
                    files[str(p.relative_to(self.course.root))] = p.read_bytes()
        return files

    def bundle(self) -> dict:
        files = self._course_files()
        digest = framed_sha256(*(k.encode() + b"\0" + v for k, v in sorted(files.items())))[:24]
        return {"hash": digest, "files": files, "cache": self._cache_files()}

    def start(self, expected_tasks: int) -> None:
        if self.client is None and expected_tasks:
            from distributed import Client

            self.client = Client(self.address, timeout="60s")

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def prepare(self, chapters: list[str]) -> None:
        if not chapters:
            return
        self.start(1)
        bundle = self.bundle()
        futures = [self.client.submit(prepare_on_dask_worker, bundle, ch, *self.args, pure=False) for ch in chapters]
        for chapter, fut in zip(chapters, futures):
            out = fut.result()
            if out["error"]:
                raise RuntimeError(f"the grading engine could not prepare {chapter} on a worker:\n{out['error']}")
            for rel, data in out["files"].items():
                dest = self.course.root / rel
                if not dest.is_file():
                    write_atomic_bytes(dest, data)

    def run(self, tasks: list[Task]):
        from distributed import as_completed

        self.start(len(tasks))
        client = self.client
        bundle = client.scatter(self.bundle(), broadcast=True, hash=False)
        futures = {}
        for task in tasks:
            payload = submission_bytes(task)
            fut = client.submit(grade_on_dask_worker, bundle, asdict(task), payload, *self.args,
                                pure=False, retries=1, key=f"grade-{task.student}-{task.chapter}-{task.key[:12]}")
            futures[fut] = task
        try:
            for fut in as_completed(futures):
                task = futures.pop(fut)
                try:
                    result = received_result(task, fut.result())
                except Exception as err:
                    result = failed_result(task, f"dask task failed: {type(err).__name__}: {err}")
                yield task, result
        finally:
            for fut in futures:
                fut.cancel()
