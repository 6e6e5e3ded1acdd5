"""What a grading run has to do: the submissions under nbgrader's ``submitted/`` layout (read without trusting
them, see autograder/learner_files.py), their resume keys, and what the gradebook already holds.

Each recorded notebook carries a key (hash of the submission, its folder's exchange files, its chapter's source
notebook and the grading code); a run grades only submissions without a matching key. Split out of
autograder/batch.py (the command).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import attention_course

from . import arrivals, learner_files
from .digests import framed_sha256
from .results import GradingResult

ENGINE_MODULE = "autograder.isolation"


def engine_module_name() -> str:
    # AUTOGRADER_ENGINE lets tests and benchmarks swap in another engine with the same interface.
    return os.environ.get("AUTOGRADER_ENGINE", ENGINE_MODULE)


NOTHING_SUBMITTED = "no notebook submitted"


@dataclass
class Task:
    student: str  # the recorded id (learner_files.student_id of the folder's name)
    chapter: str
    path: str  # the submitted notebook
    key: str = ""
    claimed_time: str | None = None  # timestamp.txt, when it holds a date: the learner's claim, shown only
    arrival: arrivals.Arrival | None = None  # the recorded arrival of this very notebook (attach_arrivals)
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
            tasks.append(Task(student, chapter, str(path), claimed_time=seen.timestamp, refusal=refusal,
                              flags=id_flags + seen.flags, folder_digest=seen.digest().hex(),
                              exchange=dict(seen.exchange)))
    return tasks


def submission_digest(task: Task) -> str | None:
    """The submitted notebook's digest (autograder/arrivals.py's: what an arrival record binds), or None when
    there is none to grade. One notebook's bytes at a time: a class of learners with notebooks of up to
    intake.MAX_NOTEBOOK_BYTES each is never held at once."""
    content = submission_bytes(task)
    return None if content is None else arrivals.notebook_digest(content)


def attach_arrivals(tasks: list[Task], ledger: arrivals.Ledger, digests: dict) -> None:
    """Each task's recorded arrival (autograder/arrivals.py): the latest record of its learner and chapter that
    holds exactly the notebook graded (``digests``: id(task) -> :func:`submission_digest`). None when there is
    none; an arrival's flags (an owner mismatch at collect) join the task's."""
    for task in tasks:
        task.arrival = ledger.arrival_of(task.student, task.chapter, Path(task.path).name, digests.get(id(task)))
        if task.arrival is not None:
            task.flags = [*task.flags, *task.arrival.flags]
            if task.arrival.claimed_time:  # collect put the recorded time in timestamp.txt; the claim is here
                task.claimed_time = task.arrival.claimed_time


def grading_sources() -> list[Path]:
    """The code that can change a score: every module of ``autograder/`` and ``attention_course/`` (a change
    anywhere in them regrades every submission: regrading is cheaper than proving a change harmless, and no
    import graph is followed, so nothing is missed), plus the engine module when a test or benchmark swaps in
    one from elsewhere (``AUTOGRADER_ENGINE``)."""
    files = set()
    for package_dir in (Path(attention_course.__file__).parent, Path(__file__).parent):
        files.update(p for p in package_dir.rglob("*.py") if "__pycache__" not in p.parts)
    spec = importlib.util.find_spec(engine_module_name())
    if spec is not None and spec.origin:
        files.add(Path(spec.origin))
    return sorted(files)


def grading_code_hash() -> str:
    root = Path(__file__).resolve().parent.parent
    return framed_sha256(*(str(p.resolve().relative_to(root) if p.resolve().is_relative_to(root) else p.name).encode()
                           + b"\0" + p.read_bytes() for p in grading_sources()))


def submission_bytes(task: Task) -> bytes | None:
    """The submitted notebook's bytes (bounded, never through a link), or None when there is none to grade."""
    # Here: autograder/intake.py loads nbformat (0.3 s), which a run with nothing to grade must not pay for; it
    # imports nothing of the pipeline (no cycle: tests/test_import_graph.py).
    from .intake import MAX_NOTEBOOK_BYTES

    if task.refusal:
        return None
    try:
        return learner_files.read_bounded(task.path, MAX_NOTEBOOK_BYTES)
    except learner_files.NotReadable:
        return None  # too large or unreadable: the engine gives the reason


def submission_key(task: Task, source_bytes: bytes, code_hash: str, limits_repr: str, digest: str | None) -> str:
    """The resume key: the submission (``digest``: :func:`submission_digest`), its name, its folder's exchange
    files and findings, its recorded arrival, its chapter's source, the grading code and the limits."""
    return framed_sha256(b"attention-course-grade-v3", code_hash.encode(), limits_repr.encode(), task.chapter.encode(),
                         os.fsencode(Path(task.path).name), source_bytes,
                         b"<missing>" if digest is None else digest.encode(), task.folder_digest.encode(),
                         (task.arrival.key() if task.arrival else "<no arrival>").encode())[:40]


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


def failed_result(task: Task, reason: str) -> GradingResult:
    return GradingResult.unscored(task.student, task.chapter, "failed", reason)


def missing_result(task: Task, max_score: float) -> GradingResult:
    """The zero of a task that is not graded (nothing submitted, or refused: task.refusal says why)."""
    refused = task.refusal and task.refusal != NOTHING_SUBMITTED
    return GradingResult.unscored(task.student, task.chapter, "zero", task.refusal or NOTHING_SUBMITTED,
                                  declared_max=max_score,
                                  flags=(task.refusal,) if refused else ())  # refused: the instructor should look

