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
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib
import importlib.util
import io
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import learner_files, results
from .course import Course
from .learner_files import EXCHANGE_FILES  # noqa: F401 - importable where it used to live

ENGINE_MODULE = "autograder.isolation"
# One BLAS/OpenMP thread per notebook: scores do not depend on the worker count, and N workers do not
# oversubscribe N cores.
_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def engine_module_name() -> str:
    # AUTOGRADER_ENGINE lets tests and benchmarks swap in another engine with the same interface.
    return os.environ.get("AUTOGRADER_ENGINE", ENGINE_MODULE)


# ----------------------------------------------------------------------------------------------------
# Submissions and resume keys
# ----------------------------------------------------------------------------------------------------
NOTHING_SUBMITTED = "no notebook submitted"


@dataclass
class Task:
    student: str  # the recorded id (learner_files.student_id of the folder's name)
    chapter: str
    path: str  # the submitted notebook
    key: str = ""
    timestamp: str | None = None  # the submission time, when timestamp.txt holds one
    refusal: str | None = None  # not graded: zero with this reason (nothing submitted, not a regular file...)
    flags: list = field(default_factory=list)  # what discovery found wrong with the folder (learner_files)
    folder_digest: str = ""  # the folder's exchange files and findings, for the resume key
    exchange: dict = field(default_factory=dict)  # valid exchange files, copied beside the feedback page


def discover(submitted: Path, chapters: list[str], course_files: set | None = None, warn=None) -> list[Task]:
    """Every <student>/<chapter>/ folder: its <chapter>.ipynb, else its only notebook (graded as given).

    Learners control every name and file here (issue 24): nothing is followed (``lstat`` only, see
    autograder/learner_files.py), folder names become ids with :func:`learner_files.student_id`, and what is
    wrong with a folder becomes the task's refusal or flags, never an exception. ``course_files``: (device,
    inode) of the course's own files, whose hard links are refused."""
    tasks: list[Task] = []
    if not submitted.is_dir():
        return tasks
    try:
        students = sorted(os.scandir(os.fsencode(submitted)), key=lambda e: e.name)
    except OSError:
        return tasks
    ids = learner_files.unique_ids([e.name for e in students])
    for entry in students:
        if entry.name.startswith(b"."):
            continue
        student, id_flags = ids[entry.name]
        student_path = Path(os.fsdecode(entry.path))
        try:
            st = os.lstat(student_path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):  # collect makes real folders; a link here would be followed into anything
            if warn:
                warn(f"skipped {student}: the submission folder is a symbolic link (not followed)")
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        for chapter in chapters:
            folder = student_path / chapter
            path = folder / f"{chapter}.ipynb"
            try:
                st = os.lstat(folder)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                tasks.append(Task(student, chapter, str(path), flags=list(id_flags),
                                  refusal="the submission folder is a symbolic link, not a folder: refused"))
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            if not os.path.lexists(path):
                try:
                    found = sorted(e.name for e in os.scandir(folder) if e.name.endswith(".ipynb"))
                except OSError:
                    found = []
                path = folder / found[0] if found else path
            seen = learner_files.inspect_folder(folder, path, course_files or set())
            refusal = seen.refusal or (None if os.path.lexists(path) else NOTHING_SUBMITTED)
            tasks.append(Task(student, chapter, str(path), timestamp=seen.timestamp, refusal=refusal,
                              flags=id_flags + seen.flags, folder_digest=seen.digest().hex(),
                              exchange=dict(seen.exchange)))
    return tasks


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def grading_sources() -> list[Path]:
    """The code that can change a score: every module of ``autograder/`` and ``attention_course/`` (a change
    anywhere in them regrades every submission: regrading is cheaper than proving a change harmless, and no
    import graph is followed, so nothing is missed), plus the engine module when a test or benchmark swaps in
    one from elsewhere (``AUTOGRADER_ENGINE``)."""
    import attention_course

    files = set()
    for package_dir in (Path(attention_course.__file__).parent, Path(__file__).parent):
        files.update(p for p in package_dir.rglob("*.py") if "__pycache__" not in p.parts)
    spec = importlib.util.find_spec(engine_module_name())
    if spec is not None and spec.origin:
        files.add(Path(spec.origin))
    return sorted(files)


def grading_code_hash() -> str:
    root = Path(__file__).resolve().parent.parent
    return _sha(*(str(p.resolve().relative_to(root) if p.resolve().is_relative_to(root) else p.name).encode()
                  + b"\0" + p.read_bytes() for p in grading_sources()))


def submission_bytes(task: Task) -> bytes | None:
    """The submitted notebook's bytes (bounded, never through a link), or None when there is none to grade."""
    from .intake import MAX_NOTEBOOK_BYTES

    if task.refusal:
        return None
    try:
        return learner_files.read_bounded(task.path, MAX_NOTEBOOK_BYTES)
    except learner_files.NotReadable:
        return None  # too large or unreadable: the engine gives the reason


def submission_key(task: Task, source_bytes: bytes, code_hash: str, limits_repr: str,
                   content: bytes | None = None) -> str:
    if content is None:
        content = submission_bytes(task)
    return _sha(b"attention-course-grade-v2", code_hash.encode(), limits_repr.encode(), task.chapter.encode(),
                os.fsencode(Path(task.path).name), source_bytes,
                b"<missing>" if content is None else content, task.folder_digest.encode())[:40]


def recorded_keys(db_url: str) -> dict[tuple[str, str], str] | None:
    """{(student, chapter): key} of every notebook recorded in full, read from a SQLite gradebook with the
    standard library only (no nbgrader/SQLAlchemy import: a run with nothing to do must cost almost
    nothing). Same rule as GradebookWriter.done_keys: our row and nbgrader's submission row. {} when the
    gradebook does not exist yet; None when it is not SQLite (the writer answers then)."""
    import sqlite3
    from urllib.parse import unquote

    if not db_url.startswith("sqlite:///"):
        return None
    path = Path(unquote(db_url[len("sqlite:///"):].split("?", 1)[0]))
    if str(path) in ("", ":memory:"):
        return None
    if not path.is_file():
        return {}
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
        try:
            rows = con.execute(
                "SELECT r.student, r.chapter, r.key FROM autograder_result AS r "
                "JOIN assignment AS a ON a.name = r.chapter "
                "JOIN submitted_assignment AS s ON s.assignment_id = a.id AND s.student_id = r.student").fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return {}
        return None  # locked for longer than the timeout, or something else: let the writer decide
    return {(st, ch): key for st, ch, key in rows}


def outputs_digest(done: dict[tuple[str, str], str]) -> str:
    """What grades.csv, grades_by_exercise.csv and the class report were last written from."""
    return _sha(*(f"{st}\0{ch}\0{key}".encode() for (st, ch), key in sorted(done.items())))


OUTPUTS_STATE = ".outputs-state.json"


def outputs_current(course: Course, done: dict[tuple[str, str], str], report: bool) -> bool:
    state = course.grading / OUTPUTS_STATE
    wanted = [course.grading / "grades.csv", course.grading / "grades_by_exercise.csv"]
    if report:
        from .report import REPORT_NAME

        wanted.append(course.grading / "reports" / REPORT_NAME)
    try:
        recorded = json.loads(state.read_text())
    except (OSError, ValueError):
        return False
    return (all(p.is_file() for p in wanted) and recorded.get("digest") == outputs_digest(done)
            and (recorded.get("report") or not report))


def failed_result(task: Task, reason: str) -> dict:
    return results.new(task.student, task.chapter, "failed", reason)


def missing_result(task: Task, max_score: float) -> dict:
    """The zero of a task that is not graded (nothing submitted, or refused: task.refusal says why)."""
    result = results.new(task.student, task.chapter, "zero", task.refusal or NOTHING_SUBMITTED, max_score)
    if task.refusal and task.refusal != NOTHING_SUBMITTED:
        result["flags"] = [task.refusal]  # refused, not merely missing: the instructor should look
    return result


# ----------------------------------------------------------------------------------------------------
# Worker side (local processes and Dask workers)
# ----------------------------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the process that started it dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _make_engine(course_root: Path, module_name: str, limits: dict):
    os.environ.update(_THREAD_ENV)
    module = importlib.import_module(module_name)
    engine = module.Engine(Path(course_root), module.Limits(**limits))
    enter = getattr(engine, "__enter__", None)
    return enter() if enter else engine


def _close_engine(engine) -> None:
    try:
        exit_ = getattr(engine, "__exit__", None)
        if exit_:
            exit_(None, None, None)
        elif hasattr(engine, "close"):
            engine.close()
    except Exception:
        pass


def _grade_with(engine, task: Task, submission: Path) -> dict:
    started = time.perf_counter()
    try:
        result = engine.grade(task.chapter, submission, task.student)
        # Only JSON crosses process boundaries and reaches the gradebook.
        result = json.loads(json.dumps(result))
    except Exception:
        result = failed_result(task, "grader error: " + traceback.format_exc(limit=8)[-2000:])
    result.setdefault("seconds", time.perf_counter() - started)
    # The learner's feedback page is rendered here, by the worker, in parallel: the grading command then
    # never imports the engine (and torch) itself.
    render = getattr(sys.modules.get(type(engine).__module__), "feedback_html", None)
    if render is not None and result.get("status") in ("graded", "zero"):
        t0 = time.perf_counter()
        try:
            result["feedback_html"] = render(result)
        except Exception:  # noqa: BLE001 - the grading command renders it again (and reports the error)
            pass
        timings = result.get("timings") if isinstance(result.get("timings"), dict) else {}
        result["timings"] = dict(timings, **{"feedback html": time.perf_counter() - t0})
    return result


def _prepare_with(engine, chapter: str) -> str | None:
    """Build (or load) what the engine needs once per chapter, e.g. its reference profile; None when fine."""
    prepare = getattr(engine, "profile", None)
    if prepare is None:
        return None
    try:
        prepare(chapter)
        return None
    except Exception:
        return traceback.format_exc(limit=6)[-3000:]


def _local_worker(conn, course_root: str, module_name: str, limits: dict) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        engine = _make_engine(Path(course_root), module_name, limits)
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
                conn.send(("prepared", _prepare_with(engine, msg["chapter"])))
                continue
            task = Task(**msg)
            conn.send(("result", _grade_with(engine, task, Path(task.path))))
    finally:
        _close_engine(engine)


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
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, dest)
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
        import shutil

        shutil.rmtree(staging, ignore_errors=True)


def _thread_engine(root: Path, module_name: str, limits: dict):
    """This Dask worker thread's warm engine for a materialised course root."""
    engines = getattr(_worker_state, "engines", None)
    if engines is None:
        engines = _worker_state.engines = {}
    if root not in engines:
        engines[root] = _make_engine(root, module_name, limits)
    return engines[root]


def prepare_on_dask_worker(bundle: dict, chapter: str, module_name: str, limits: dict) -> dict:
    """A Dask task: build the engine's per-chapter cache; returns the files it wrote under grading/expected."""
    root = _materialise(bundle)
    cache_dir = root / "grading" / "expected"
    before = {p: p.stat().st_mtime_ns for p in cache_dir.glob("*")} if cache_dir.is_dir() else {}
    error = _prepare_with(_thread_engine(root, module_name, limits), chapter)
    if error:
        return {"error": error, "files": {}}
    files = {}
    for p in sorted(cache_dir.glob("*")) if cache_dir.is_dir() else []:
        if p.is_file() and not p.name.startswith(".") and before.get(p) != p.stat().st_mtime_ns:
            files[str(p.relative_to(root))] = p.read_bytes()
    return {"error": None, "files": files}


def grade_on_dask_worker(bundle: dict, task: dict, payload: bytes | None, module_name: str, limits: dict) -> dict:
    """A Dask task: grade one shipped submission with this worker thread's warm engine."""
    root = _materialise(bundle)
    task = Task(**task)
    try:
        engine = _thread_engine(root, module_name, limits)
    except Exception:
        return failed_result(task, "engine failed to start on the worker: " + traceback.format_exc()[-2000:])
    with tempfile.TemporaryDirectory(prefix="submission-") as tmp:
        path = Path(tmp) / task.student / task.chapter / Path(task.path).name
        path.parent.mkdir(parents=True)
        if payload is not None:
            path.write_bytes(payload)
        result = _grade_with(engine, task, path)
    result["worker"] = os.uname().nodename
    return result


# ----------------------------------------------------------------------------------------------------
# Backends: each yields (task, result) as results arrive
# ----------------------------------------------------------------------------------------------------
class LocalBackend:
    """N worker processes, each with one warm engine; tasks handed out one at a time to idle workers."""

    def __init__(self, workers: int, course_root: Path, module_name: str, limits: dict, max_restarts: int = 8):
        self.n = max(1, workers)
        self.args = (str(course_root), module_name, limits)
        self.ctx = mp.get_context("spawn")
        self.max_restarts = max_restarts
        self.procs: list = []
        self.started = 0  # worker processes started in all (a run with nothing to grade starts none)

    def describe(self, tasks: int) -> str:
        return f"with {min(self.n, max(1, tasks))} worker process(es)"

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_local_worker, args=(child, *self.args), daemon=True)
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
        ordered = sorted(self.procs, key=lambda w: not w["idle"])  # prepared (idle) workers first
        for w in ordered[max(1, len(tasks)):]:
            self._retire(w)  # more warm workers than tasks
        self.start(len(tasks))

        def assign(w) -> None:
            w["idle"] = False
            if pending:
                w["task"] = pending.pop()
                w["conn"].send(asdict(w["task"]))
            else:
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
                        yield task, payload
                    if kind in ("ready", "result"):
                        assign(w)
        finally:
            for w in list(self.procs):  # ask the rest to stop; stop() waits for them
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
        digest = _sha(*(k.encode() + b"\0" + v for k, v in sorted(files.items())))[:24]
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
                    _write_atomic_bytes(dest, data)

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
                    result = fut.result()
                except Exception as err:
                    result = failed_result(task, f"dask task failed: {type(err).__name__}: {err}")
                yield task, result
        finally:
            for fut in futures:
                fut.cancel()


# ----------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------
@dataclass
class Summary:
    submissions: int = 0
    up_to_date: int = 0
    graded: int = 0
    zero: int = 0
    flagged: int = 0
    failed: int = 0
    seconds: float = 0.0
    failures: list = field(default_factory=list)
    profile_seconds: float = 0.0  # the one-time reference profiles (per chapter; cached on disk)
    first_result_seconds: float | None = None  # from the start of the run to the first graded notebook
    workers_started: int = 0
    # Seconds spent per stage, summed over notebooks (engine stages when the engine reports them, see
    # Engine.grade's result["timings"]) and once-per-run stages (csv, report).
    stages: dict = field(default_factory=dict)

    @property
    def processed(self) -> int:
        return self.graded + self.zero + self.failed

    def add_stage(self, name: str, seconds: float) -> None:
        self.stages[name] = self.stages.get(name, 0.0) + float(seconds)

    def line(self) -> str:
        per = f", {self.seconds / self.processed:.2f} s per notebook" if self.processed else ""
        extra = ""
        if self.processed:
            extra = f"; reference profiles {self.profile_seconds:.1f} s"
            if self.first_result_seconds is not None:
                extra += f", first notebook graded {self.first_result_seconds:.1f} s after the start"
        return (f"{self.submissions} submissions: {self.graded} graded, {self.zero} zero, {self.flagged} flagged, "
                f"{self.failed} failed, {self.up_to_date} already up to date; {self.seconds:.1f} s{per}{extra}")

    def to_json(self) -> dict:
        data = asdict(self)
        data["processed"] = self.processed
        return data


def _write_atomic(path: Path, data: str) -> None:
    _write_atomic_bytes(path, data.encode("utf-8"))


def _write_atomic_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(course: Course, result: dict, summary: Summary | None = None) -> None:
    """The executed notebook (for formgrader) and the learner's feedback page.

    The notebook is written only through safe_output.safe_notebook: formgrader renders it in the instructor's
    Jupyter session, so nothing the learner wrote or their kernel produced may be active there (issue 24)."""
    from . import safe_output

    student, chapter = result["student"], result["chapter"]
    t0 = time.perf_counter()
    if result.get("executed_notebook"):
        known = safe_output.chapter_texts(course.source_notebook(chapter), course.release_notebook(chapter))
        _write_atomic(course.grading / "autograded" / student / chapter / f"{chapter}.ipynb",
                      json.dumps(safe_output.safe_notebook(result["executed_notebook"], known), indent=1,
                                 ensure_ascii=False))
    t1 = time.perf_counter()
    page = result.pop("feedback_html", None)  # rendered by the worker
    if page is None:
        feedback_html = getattr(importlib.import_module(engine_module_name()), "feedback_html", None)
        page = feedback_html(result) if feedback_html is not None else None
    if page is not None:
        _write_atomic(course.grading / "feedback" / student / chapter / f"{chapter}.html", page)
    if summary is not None:
        summary.add_stage("executed notebook write", t1 - t0)
        summary.add_stage("feedback write", time.perf_counter() - t1)


def _copy_exchange_files(course: Course, task: Task) -> None:
    """The exchange's bookkeeping that nbgrader's collect leaves beside a submission (``timestamp.txt``,
    ``submission_secret.txt``), beside the learner's feedback page and autograded notebook: ``nbgrader
    release_feedback`` names each learner's page from them, and stops for the whole class when one is missing
    or unreadable. Only the copies discovery read and validated are written (never the learner's files
    themselves); beside a feedback page whose learner had no valid ones, learner_files.feedback_exchange_files
    puts stand-ins, so everyone else's feedback is still released (that learner is flagged)."""
    feedback = course.grading / "feedback" / task.student / task.chapter
    if feedback.is_dir():
        for name, data in learner_files.feedback_exchange_files(task.exchange).items():
            _write_atomic_bytes(feedback / name, data)
    autograded = course.grading / "autograded" / task.student / task.chapter
    if autograded.is_dir():
        for name, data in task.exchange.items():
            _write_atomic_bytes(autograded / name, data)


def write_csv(course: Course, rows: list[dict]) -> tuple[Path, Path]:
    from .export import safe_writer  # ids, flags, reasons and messages are learner text: no cell runs as a formula

    out = course.grading / "grades.csv"
    buf = io.StringIO()
    w = safe_writer(buf)
    w.writerow(["student", "chapter", "status", "score", "max_score", "percent", "flagged", "flags", "reason",
                "graded_at"])
    for r in sorted(rows, key=lambda r: (r["student"], r["chapter"])):
        pct = 100.0 * r["score"] / r["max_score"] if r["max_score"] else 0.0
        w.writerow([r["student"], r["chapter"], r["status"], f"{r['score']:g}", f"{r['max_score']:g}", f"{pct:.1f}",
                    "yes" if r["flags"] else "no", " | ".join(r["flags"]), r["reason"],
                    r["graded_at"].isoformat(timespec="seconds") if r.get("graded_at") else ""])
    _write_atomic(out, buf.getvalue())
    per_cell = course.grading / "grades_by_exercise.csv"
    buf = io.StringIO()
    w = safe_writer(buf)
    w.writerow(["student", "chapter", "cell", "score", "max_score", "passed", "messages"])
    for r in sorted(rows, key=lambda r: (r["student"], r["chapter"])):
        for cell, v in sorted(r["cells"].items()):
            w.writerow([r["student"], r["chapter"], cell, f"{v['score']:g}", f"{v['max_score']:g}",
                        "yes" if v["passed"] else "no", " | ".join(v["messages"])])
    _write_atomic(per_cell, buf.getvalue())
    return out, per_cell


def grade(course: Course, chapters: list[str] | None = None, *, workers: int | None = None,
          scheduler: str | None = None, db_url: str | None = None, force: bool = False,
          submitted: Path | None = None, limits: dict | None = None, progress: bool = True,
          report: bool = True, log=print) -> Summary:
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
    contents = {}
    for task in tasks:
        contents[id(task)] = submission_bytes(task)
        task.key = submission_key(task, sources[task.chapter], code_hash, limits_repr, contents[id(task)])
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
    _refuse_course_copies(course, todo, contents)
    expected_runnable = sum(1 for t in todo if not t.refusal)

    if scheduler:
        backend = DaskBackend(scheduler, course, chapters, module_name, limits)
    else:
        backend = LocalBackend(workers or os.cpu_count() or 1, course.root, module_name, limits)
    try:
        backend.start(expected_runnable)  # workers warm up (torch import) while this process opens the gradebook
        from .gradebook import GradebookWriter

        with GradebookWriter(db_url) as writer:
            rows = _grade_into(writer, course, tasks, sources, backend, summary, force, progress, log, started)
        summary.workers_started = getattr(backend, "started", 0)
        t0 = time.perf_counter()
        write_csv(course, rows)  # while the workers shut down
        summary.add_stage("csv", time.perf_counter() - t0)
        if report:
            from .report import write_report

            t0 = time.perf_counter()
            path = write_report(course, rows, failures=summary.failures)
            summary.add_stage("report", time.perf_counter() - t0)
            log(f"class report: {path}")
        if not summary.failures:  # a run with failures must write its report again next time
            _write_atomic(course.grading / OUTPUTS_STATE, json.dumps(
                {"digest": outputs_digest({(r["student"], r["chapter"]): r["key"] for r in rows}),
                 "report": report}))
    finally:
        backend.stop()
    summary.seconds = time.perf_counter() - started
    log(summary.line())
    return summary


def _refuse_course_copies(course: Course, tasks: list[Task], contents: dict) -> None:
    """A submission that holds the course's hidden tests is the course's own notebook (e.g. a symlink to it that
    ``nbgrader collect`` followed): refused, zero with the reason. The release never carries hidden tests, so a
    learner's own work cannot hold them. The reference solution's code alone is not evidence (a correct
    answer may be written exactly as the reference writes it) and is graded as usual."""
    import nbformat

    hidden: dict[str, set] = {}
    for task in tasks:
        content = contents.get(id(task))
        if task.refusal or content is None:
            continue
        if task.chapter not in hidden:
            release = course.release_notebook(task.chapter)
            hidden[task.chapter] = learner_files.hidden_test_lines(
                nbformat.read(course.source_notebook(task.chapter), as_version=4),
                nbformat.read(release, as_version=4) if release.is_file() else None)
        if learner_files.carries_hidden_tests(content, hidden[task.chapter]):
            task.refusal = learner_files.HIDDEN_TESTS_REASON


def _grade_into(writer, course: Course, tasks: list[Task], sources: dict, backend, summary: Summary, force: bool,
                progress: bool, log, started: float) -> list[dict]:
    import nbformat
    from tqdm import tqdm

    from attention_course.cells import graded_cells

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

    def record(task: Task, result: dict, bar) -> None:
        status = result.get("status")
        for stage, seconds in (result.get("timings") or {}).items():
            if isinstance(seconds, (int, float)):
                summary.add_stage(stage, seconds)
        if status not in ("graded", "zero"):
            summary.failed += 1
            summary.failures.append({"student": task.student, "chapter": task.chapter,
                                     "reason": str(result.get("reason", ""))})
            bar.write(f"FAILED {task.student}/{task.chapter}: {str(result.get('reason', ''))[-600:]}")
        else:
            result["student"], result["chapter"] = task.student, task.chapter
            result["flags"] = list(task.flags) + list(result.get("flags") or [])
            t0 = time.perf_counter()
            write_outputs(course, result, summary)
            _copy_exchange_files(course, task)
            t1 = time.perf_counter()
            writer.write_result(result, task.key, _parse_timestamp(task.timestamp))
            summary.add_stage("gradebook write", time.perf_counter() - t1)
            summary.graded += status == "graded"
            summary.zero += status == "zero"
            summary.flagged += bool(result.get("flags"))
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


def _parse_timestamp(text: str | None):
    """The submission time for the gradebook (discovery kept only text that parses)."""
    return learner_files.parse_timestamp(text)


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
    parser.add_argument("--stats", type=Path, metavar="FILE.json",
                        help="write the run's numbers here (counts, per-stage seconds, profile time, first result)")
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
                        progress=not args.no_progress)
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
        _write_atomic(args.stats, json.dumps(stats, indent=1))
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
