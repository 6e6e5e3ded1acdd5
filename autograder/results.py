"""The result of grading one notebook: its one owner, from the sandbox to the gradebook (issue 24).

:class:`GradingResult` is a frozen dataclass. Every producer (the engine, ``discovery``'s zeros for folders
that were not graded, the backends' failures, the stub engine of the tests) builds it here, and every reader
(batch, outputs, gradebook, report, feedback page, CSV) reads its attributes. Nothing edits one in place: a
step that adds something (the batch's discovery flags, the lateness, the worker's feedback page) makes a new
one with :meth:`GradingResult.replace`, which goes through the same checks.

**The one place learner text is made safe.** ``__post_init__`` runs for every result however it is made
(constructor, replace, :meth:`GradingResult.from_json`, a gradebook row): reasons, flags and verdict messages
lose control characters and terminal escape codes (``autograder.learner_text``), and every count and length is capped
(``MAX_*`` below), so no output has to trust a result's size or its characters. *Escaping* is the one thing left
to the writers, because it depends on where the text goes: HTML (``html.escape`` in the feedback page and the
class report), CSV (``export.safe_writer``: no cell read as a formula), figures (mathtext off, ``report``).

**Whose words.** ``reason``, ``flags``, ``suspicions`` and the cells' messages are the grader's own sentences: a
producer puts no text of the learner's process or file in them (an exception is named from a fixed list,
``learner_text.exception_name``). What the notebook itself said, where an instructor may want it (the message of
the exception that broke the kernel), goes in ``learner_said`` as ``(what it is, in the grader's words, the text)``
pairs, which the class report shows under its own label and the learner's feedback page never shows (issue 41,
class 7). ``suspicions`` are for the instructor only too: evidence such as a copy of the course's hidden tests
(``learner_files.copied_hidden_run``), which must not change anything the learner sees (class 4).

**One wire format.** :meth:`GradingResult.to_json` / :meth:`GradingResult.from_json` are what crosses a process
or machine boundary (local worker pipes, Dask) and what the gradebook's ``autograder_result`` row keeps (without
the executed notebook): a JSON object with ``format`` and ``version``; decoding refuses more than
:data:`MAX_WIRE_BYTES` before it parses anything, and refuses another format or version with a message that
says what to do. Rows recorded before version 1 (a per-cell dict in the ``cells`` column) are read by
:meth:`GradingResult.from_row`: see there for why they are read rather than refused.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from .learner_text import one_line, printable

Status = Literal["graded", "zero", "failed"]  # zero: unusable or killed notebook; failed: the grader's fault
STATUSES = ("graded", "zero", "failed")

FORMAT = "attention-course/grading-result"
VERSION = 2  # 2: suspicions and learner_said (issue 41)
RECORDED_VERSIONS = (1, VERSION)  # what a gradebook row may hold (GradingResult.from_row: read, never refused)
# The executed notebook travels with a result: a submission is at most 50 MiB (intake.MAX_NOTEBOOK_BYTES) and the
# kernel's outputs and records at most ~105 MiB at the default limits (sandbox.result_cap); JSON escaping adds some.
MAX_WIRE_BYTES = 256 << 20
MAX_CELLS = 500  # graded cells of one chapter (the largest has 30)
MAX_MESSAGES = 100  # verdict messages of one cell; the rest are counted in one last message
MAX_MESSAGE_CHARS = 2000
MAX_FLAGS = 100
MAX_FLAG_CHARS = 1000
MAX_REASON_CHARS = 1000
MAX_FAILURE_CHARS = 4000  # a grader error keeps its traceback's last lines for the instructor
MAX_ID_CHARS = 256  # a grade_id
MAX_HTML_CHARS = 4 << 20  # the feedback page the worker rendered
MAX_LEARNER_SAID = 5  # texts of the notebook's own kept for the instructor
MAX_LEARNER_CHARS = 2000

GRADER_FAILED = "not graded: the grader failed (not your fault)"


class ResultFormatError(ValueError):
    """Bytes or JSON that are not a grading result of this format and version; the message says what to do."""


def clean_line(text, limit: int) -> str:
    """One printable line of at most ``limit`` characters (learner text in a reason, a flag, a message)."""
    return one_line(text, limit)


def clean_lines(text, limit: int) -> str:
    """Printable lines, spacing kept, at most ``limit`` characters (the last ones: a traceback ends with the error)."""
    return printable(text, limit)


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ResultFormatError(f"{what} is not a finite number: {type(value).__name__}")
    return float(value)


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise ResultFormatError(f"{what} is not text: {type(value).__name__}")
    return value


def _capped(items: Iterable, limit: int, what: str) -> list:
    items = list(items)
    return items if len(items) <= limit else items[: limit - 1] + [f"... and {len(items) - limit + 1} more {what}"]


@dataclass(frozen=True)
class CellResult:
    """One graded test cell: its points (all or nothing today) and the verdict's messages (trusted text, see
    autograder/TRUST.md: never what the learner's process printed or raised)."""
    grade_id: str
    max_score: float
    passed: bool
    messages: tuple[str, ...] = ()
    score: float | None = None  # None: max_score when passed, else 0

    def __post_init__(self):
        gid = clean_line(_text(self.grade_id, "a cell's grade_id"), MAX_ID_CHARS)
        top = max(0.0, _number(self.max_score, f"max score of {gid}"))
        if not isinstance(self.passed, bool):  # never truthiness: a numpy bool or a string is a grader bug
            raise ResultFormatError(f"passed of {gid} is not a bool: {type(self.passed).__name__}")
        passed = self.passed
        pts = (top if passed else 0.0) if self.score is None else _number(self.score, f"score of {gid}")
        if isinstance(self.messages, (str, bytes)) or not isinstance(self.messages, Iterable):
            raise ResultFormatError(f"the messages of {gid} are not a list")
        msgs = tuple(_capped((clean_lines(m, MAX_MESSAGE_CHARS) for m in self.messages), MAX_MESSAGES, "messages"))
        for name, value in (("grade_id", gid), ("max_score", top), ("passed", passed),
                            ("score", min(max(pts, 0.0), top)), ("messages", msgs)):
            object.__setattr__(self, name, value)

    def to_json(self) -> dict:
        """The wire form, under its grade_id in the result's ``cells`` object."""
        return {"score": self.score, "max_score": self.max_score, "passed": self.passed,
                "messages": list(self.messages)}

    @classmethod
    def of(cls, grade_id: str, data) -> "CellResult":
        if not isinstance(data, Mapping):
            raise ResultFormatError(f"the result of cell {grade_id!r} is not an object")
        return cls(grade_id=grade_id, max_score=data.get("max_score"), passed=data.get("passed"),
                   messages=data.get("messages", ()), score=data.get("score"))


@dataclass(frozen=True)
class Late:
    """How late the submission was and what it cost (autograder/deadlines.py owns the policy)."""
    seconds: float
    penalty: float = 0.0
    text: str = ""  # late_policy.how_late(seconds)
    policy: str = ""  # the policy in words, for the feedback page
    held: bool = False  # late_policy.held: no recorded arrival while a due date is set; the final score withheld
    arrived: str = ""  # the recorded arrival (autograder/arrivals.py), for people; "" when none
    claimed: str = ""  # the learner's timestamp.txt (their claim, shown beside the arrival, never used)

    def __post_init__(self):
        object.__setattr__(self, "seconds", max(0.0, _number(self.seconds, "seconds late")))
        object.__setattr__(self, "penalty", max(0.0, _number(self.penalty, "late penalty")))
        object.__setattr__(self, "text", clean_line(_text(self.text, "lateness text"), 200))
        object.__setattr__(self, "policy", clean_line(_text(self.policy, "late policy"), 1000))
        object.__setattr__(self, "held", self.held is True)
        object.__setattr__(self, "arrived", clean_line(_text(self.arrived, "arrival time"), 200))
        object.__setattr__(self, "claimed", clean_line(_text(self.claimed, "claimed time"), 300))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GradingResult:
    """One notebook's grading. ``score`` and ``max_score`` are the sums of its cells; a notebook with no cells
    (nothing submitted, refused) carries its chapter's points in ``declared_max``."""
    student: str
    chapter: str
    status: Status = "graded"
    reason: str = ""
    flags: tuple[str, ...] = ()  # the grader's words about the notebook; the learner's feedback page shows them
    cells: tuple[CellResult, ...] = ()  # in the chapter's order
    suspicions: tuple[str, ...] = ()  # the grader's words, for the instructor only (never on the feedback page)
    learner_said: tuple[tuple[str, str], ...] = ()  # (label in the grader's words, the notebook's own text)
    declared_max: float = 0.0
    executed_notebook: Mapping | None = None  # nbformat JSON, hidden tests included: for instructors only
    seconds: float = 0.0
    isolation: str = ""  # the sandbox level it ran at, e.g. "root (cgroup v1)" (docs/isolation.md)
    timings: tuple[tuple[str, float], ...] = ()  # seconds per stage, for `grade --stats`
    late: Late | None = None
    feedback_html: str | None = None  # rendered by the worker (whose engine module owns the page)
    worker: str = ""  # the Dask worker's host name
    key: str = ""  # the resume key it is recorded under (read back from the gradebook)
    graded_at: _dt.datetime | None = None

    def __post_init__(self):
        status = self.status
        if status not in STATUSES:
            raise ResultFormatError(f"status {status!r} is none of {', '.join(STATUSES)}")
        limit = MAX_FAILURE_CHARS if status == "failed" else MAX_REASON_CHARS
        reason = _text(self.reason, "reason")
        reason = clean_lines(reason, limit) if status == "failed" else clean_line(reason, limit)
        if isinstance(self.flags, (str, bytes)):
            raise ResultFormatError("flags are not a list")
        flags = tuple(_capped((clean_line(_text(f, "a flag"), MAX_FLAG_CHARS) for f in self.flags), MAX_FLAGS,
                              "flags"))
        if isinstance(self.suspicions, (str, bytes)):
            raise ResultFormatError("suspicions are not a list")
        suspicions = tuple(_capped((clean_line(_text(f, "a suspicion"), MAX_FLAG_CHARS) for f in self.suspicions),
                                   MAX_FLAGS, "suspicions"))
        if isinstance(self.learner_said, (str, bytes)) or not isinstance(self.learner_said, Iterable):
            raise ResultFormatError("learner_said is not a list")
        said = []
        for pair in list(self.learner_said)[:MAX_LEARNER_SAID]:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ResultFormatError("learner_said is not a list of (label, text) pairs")
            said.append((clean_line(_text(pair[0], "a learner_said label"), 200),
                         clean_line(_text(pair[1], "a learner_said text"), MAX_LEARNER_CHARS)))
        cells = tuple(self.cells)
        if not all(isinstance(c, CellResult) for c in cells):
            raise ResultFormatError("a cell result that is not a CellResult")
        if len(cells) > MAX_CELLS:
            raise ResultFormatError(f"{len(cells)} graded cells, more than {MAX_CELLS}")
        if len({c.grade_id for c in cells}) != len(cells):
            raise ResultFormatError("a grade_id appears twice among the cells")
        if self.executed_notebook is not None and not isinstance(self.executed_notebook, Mapping):
            raise ResultFormatError("the executed notebook is not a JSON object")
        page = self.feedback_html
        if page is not None and (not isinstance(page, str) or len(page) > MAX_HTML_CHARS):
            page = None  # the grading command renders it again
        timings = tuple((clean_line(_text(k, "a stage"), 100), _number(v, f"seconds of {k}"))
                        for k, v in (self.timings.items() if isinstance(self.timings, Mapping) else self.timings))
        late = self.late
        if late is not None and not isinstance(late, Late):
            late = Late(**{k: late[k] for k in ("seconds", "penalty", "text", "policy", "held", "arrived", "claimed")
                           if k in late})
        # Ids are checked, never changed: they name the gradebook's row and the resume key; discovery made them
        # printable (learner_files.student_id) and every output escapes them.
        _text(self.student, "student"), _text(self.chapter, "chapter")
        for name, value in (("reason", reason), ("flags", flags), ("cells", cells), ("suspicions", suspicions),
                            ("learner_said", tuple(said)),
                            ("declared_max", max(0.0, _number(self.declared_max, "declared max"))),
                            ("seconds", max(0.0, _number(self.seconds, "seconds"))),
                            ("isolation", clean_line(_text(self.isolation, "isolation"), 200)),
                            ("timings", timings), ("late", late), ("feedback_html", page),
                            ("worker", clean_line(_text(self.worker, "worker"), 200)),
                            ("key", clean_line(_text(self.key, "key"), 64))):
            object.__setattr__(self, name, value)

    # -- what readers ask -------------------------------------------------------------------------------------

    @property
    def score(self) -> float:
        return float(sum(c.score for c in self.cells))

    @property
    def max_score(self) -> float:
        return float(sum(c.max_score for c in self.cells)) if self.cells else self.declared_max

    @property
    def recorded(self) -> bool:
        """Whether it goes into the gradebook: graded or zero (a grader failure is reported, never recorded)."""
        return self.status in ("graded", "zero")

    @cached_property
    def _by_id(self) -> dict[str, CellResult]:
        return {c.grade_id: c for c in self.cells}

    def cell(self, grade_id: str) -> CellResult | None:
        return self._by_id.get(grade_id)

    @property
    def late_seconds(self) -> float:
        return self.late.seconds if self.late else 0.0

    @property
    def penalty(self) -> float:
        return self.late.penalty if self.late else 0.0

    # The wire form read by key, for code outside the grader that reads results as JSON (other engineers' tests,
    # autograder/mutants.py). Read-only: each call builds the JSON again (the executed notebook is shared, not copied).
    def __getitem__(self, key: str):
        return self.to_json()[key]

    def get(self, key: str, default=None):
        return self.to_json().get(key, default)

    def replace(self, **changes) -> "GradingResult":
        """A copy with ``changes``, through the same checks (``cells`` may be given as CellResults)."""
        return dataclasses.replace(self, **changes)

    # -- constructors -----------------------------------------------------------------------------------------

    @classmethod
    def unscored(cls, student: str, chapter: str, status: Status, reason: str,
                 graded: Iterable[tuple[str, float]] = (), message: str | None = None, **fields) -> "GradingResult":
        """A notebook that earns nothing: ``zero`` (unusable, killed, refused, nothing submitted) or ``failed``
        (the grader's fault). Every graded cell of ``graded`` scores 0 with ``message``."""
        if message is None:
            message = GRADER_FAILED if status == "failed" else f"not graded: {clean_line(reason, MAX_REASON_CHARS)}"
        return cls(student=student, chapter=chapter, status=status, reason=reason,
                   cells=tuple(CellResult(gid, pts, False, (message,)) for gid, pts in graded), **fields)

    # -- the wire format --------------------------------------------------------------------------------------

    def to_json(self, notebook: bool = True) -> dict:
        """The wire form: plain JSON with ``format`` and ``version`` (``notebook=False``: without the executed
        notebook, as the gradebook keeps it)."""
        out = {"format": FORMAT, "version": VERSION, "student": self.student, "chapter": self.chapter,
               "status": self.status, "reason": self.reason, "flags": list(self.flags),
               "suspicions": list(self.suspicions), "learner_said": [list(p) for p in self.learner_said],
               "cells": {c.grade_id: c.to_json() for c in self.cells}, "declared_max": self.declared_max,
               "score": self.score, "max_score": self.max_score,  # derived: for readers of the JSON only
               "seconds": self.seconds, "isolation": self.isolation, "timings": dict(self.timings),
               "late": self.late.to_json() if self.late else None, "worker": self.worker, "key": self.key,
               "graded_at": self.graded_at.isoformat() if self.graded_at else None,
               "late_seconds": self.late_seconds, "penalty": self.penalty}  # derived, as score and max_score
        if notebook:
            out["executed_notebook"] = self.executed_notebook
            out["feedback_html"] = self.feedback_html
        return out

    def to_wire(self) -> bytes:
        data = json.dumps(self.to_json(), ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")
        if len(data) > MAX_WIRE_BYTES:  # refused here too, so a worker never sends what no reader takes
            failed = GradingResult.unscored(self.student, self.chapter, "failed",
                                            f"grader error: the result is {len(data) >> 20} MiB, more than the "
                                            f"{MAX_WIRE_BYTES >> 20} MiB a result may take",
                                            [(c.grade_id, c.max_score) for c in self.cells])
            data = json.dumps(failed.to_json(), ensure_ascii=False).encode("utf-8", "surrogatepass")  # small
        return data

    @classmethod
    def from_json(cls, data) -> "GradingResult":
        """A result from its wire form (bytes, text or the decoded object). Raises :class:`ResultFormatError`."""
        if isinstance(data, (bytes, bytearray, str)):
            if len(data) > MAX_WIRE_BYTES:
                raise ResultFormatError(f"a grading result of {len(data)} bytes, more than {MAX_WIRE_BYTES}")
            try:
                data = json.loads(data)
            except (ValueError, RecursionError) as err:
                raise ResultFormatError(f"a grading result that is not JSON: {err}") from None
        if not isinstance(data, Mapping):
            raise ResultFormatError("a grading result is not a JSON object")
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise ResultFormatError(
                f"a grading result of format {data.get('format')!r} version {data.get('version')!r}, not {FORMAT!r} "
                f"version {VERSION}: it was written by another version of the grader. Use the same grader code on "
                f"every worker (Dask workers need this repository's code), or regrade with --force")
        return cls.of(data)

    @classmethod
    def of(cls, data: Mapping) -> "GradingResult":
        """A result from the wire form's fields (no envelope check: :meth:`from_json` does it). Every field but
        ``student``, ``chapter`` and ``status`` may be missing."""
        cells = data.get("cells") or {}
        if not isinstance(cells, Mapping):
            raise ResultFormatError("a grading result's cells are not an object keyed by grade_id")
        if len(cells) > MAX_CELLS:
            raise ResultFormatError(f"{len(cells)} graded cells, more than {MAX_CELLS}")
        names = ("reason", "flags", "declared_max", "executed_notebook", "seconds", "isolation", "timings", "late",
                 "feedback_html", "worker", "key", "suspicions", "learner_said")
        fields = {k: data[k] for k in names if data.get(k) is not None}
        if not cells and "declared_max" not in fields and data.get("max_score") is not None:
            fields["declared_max"] = data["max_score"]
        if isinstance(data.get("graded_at"), str):
            try:
                fields["graded_at"] = _dt.datetime.fromisoformat(data["graded_at"])
            except ValueError:
                raise ResultFormatError("graded_at is not an ISO time") from None
        return cls(student=data.get("student", ""), chapter=data.get("chapter", ""),
                   status=data.get("status", "graded"),
                   cells=tuple(CellResult.of(_text(gid, "a grade_id"), v) for gid, v in cells.items()), **fields)

    # -- the gradebook's row ----------------------------------------------------------------------------------

    def to_row(self) -> dict:
        """The columns of the gradebook's ``autograder_result`` row (the key and time are the writer's)."""
        return {"student": self.student, "chapter": self.chapter, "status": self.status, "reason": self.reason,
                "flags": json.dumps(list(self.flags)), "score": self.score, "max_score": self.max_score,
                "cells": json.dumps(self.to_json(notebook=False)), "seconds": self.seconds,
                "isolation": self.isolation or None}

    @classmethod
    def from_row(cls, row: Mapping, late: Late | None = None) -> "GradingResult":
        """A recorded result, from its gradebook row.

        Rows of version 1 (no suspicions, no learner_said) are read as they are. Rows written before version 1
        hold only the per-cell object in ``cells`` (the same as the wire form's). They are read, not refused: the grader itself wrote them, they pass through the same
        checks as any result, and their resume keys no longer match (the grading code changed), so the next run
        that grades their chapter replaces them. Refusing them would stop ``grade`` for a whole class, on every
        chapter, because the CSV and the class report read every recorded row."""
        try:
            stored = json.loads(row["cells"] or "{}")
        except ValueError:
            stored = {}
        if isinstance(stored, Mapping) and "format" in stored:
            recorded = stored.get("format") == FORMAT and stored.get("version") in RECORDED_VERSIONS
            base = cls.of(stored) if recorded else cls.from_json(stored)  # from_json refuses it, saying why
        else:
            base = cls.of({"student": row["student"], "chapter": row["chapter"], "status": row["status"],
                           "reason": row["reason"] or "", "flags": json.loads(row["flags"] or "[]"),
                           "cells": stored, "max_score": row["max_score"], "seconds": row["seconds"],
                           "isolation": row["isolation"]})
        return base.replace(student=row["student"], chapter=row["chapter"], key=row["key"] or "",
                            graded_at=row["graded_at"], late=late)
