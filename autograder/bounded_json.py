"""A learner's notebook file read within stated budgets, in a child process of its own (issue 41, class 5).

Python's JSON reader builds every value of a file before anything can look at it, and each value costs far
more than its bytes: the three bytes ``[],`` become a list of about 80. A 19 MB file of them cost the grading
process 2.57 GB, and the intake accepts 50 MB. So a submitted file is read in three steps, each bounded:

1. **Measured before it is parsed** (:func:`scan`). The raw bytes are measured with C-speed bytes operations
   only (``count``, ``replace``, ``split``, ``translate``; no regular expression, no Python loop per byte):
   escaped backslashes and quotes are blanked, every quote left delimits a string, and what lies outside the
   strings is the file's skeleton, whose commas, colons and brackets give the number of JSON values (each key
   counted) and how deeply they nest. A file past a :class:`Budget` is refused with the reason and never parsed.
2. **Parsed in a child** (:func:`read_notebook`): a fresh interpreter (``-I -S``: no site packages, no
   environment, only this module and :mod:`autograder.learner_files`) whose address space may grow by at most
   ``Budget.memory_bytes`` (``RLIMIT_AS``, set before it opens the file) and which the parent kills past
   ``Budget.wall_s``. The child keeps only what grading reads (:func:`skeleton_of`): each cell's type, id, text
   and the metadata keys the caller names; outputs, attachments and every other key are dropped as soon as the
   file is parsed, so nothing of them is ever copied. It sends that back as compact JSON on a pipe the parent
   reads up to ``Budget.reply_bytes``.
3. **Every way it can end is a refusal with a reason** (:class:`Refused`): past a budget, killed for memory or
   time, not JSON, not a notebook. The learner scores zero with that reason and the batch goes on. Only a child
   that could not start at all is the grader's own failure (:class:`ReaderFailed`).

The budgets themselves are policy, stated as data where they apply (``autograder/intake.py``'s ``BUDGET``).
"""
from __future__ import annotations

import json
import os
import resource
import selectors
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from itertools import accumulate, repeat
from pathlib import Path

from .learner_files import NotReadable, read_bounded

MIB = 1 << 20


@dataclass(frozen=True)
class Budget:
    """What a submitted file may hold (see ``intake.BUDGET`` for the values and why)."""

    max_bytes: int  # the file
    max_values: int  # JSON values, each key counted: what the parse would build
    max_depth: int  # how deeply arrays and objects nest
    max_string_bytes: int  # any one string, as written in the file
    max_cells: int
    max_cell_chars: int  # one cell's text
    max_source_chars: int  # all cells' text
    max_kept_metadata_bytes: int  # the metadata kept (the caller's keys), all cells and the notebook, as JSON
    # The JSON values in that kept metadata, each key counted: what the trusted side builds from it costs per
    # value (a short tag costs over 100 bytes there however few bytes it took in the file), as a cell does
    max_kept_metadata_values: int
    memory_bytes: int  # how far the child's address space may grow once it has started
    wall_s: float  # how long the parent waits for the child

    @property
    def reply_bytes(self) -> int:
        """The most the child's reply can hold: the text (at most 6 bytes a character, a control character
        written as ``\\u00XX``), the kept metadata, and a type and id (at most 64 characters) per cell."""
        return 6 * self.max_source_chars + self.max_kept_metadata_bytes + self.max_cells * 512 + MIB


class Refused(Exception):
    """The file is not read; ``str(exc)`` is the reason, for the learner and the instructor."""


class Unreadable(Refused):
    """The file could not be opened or read as a regular file: ``str(exc)`` is ``learner_files.NotReadable``'s
    word for why (``missing``, ``too large (...)``, ``FIFO``, ...), which the caller turns into its reason."""


class ReaderFailed(Exception):
    """The child that reads the file did not start or broke on its own: the grader's fault, never the learner's."""


# -- step 1: measuring the raw bytes ---------------------------------------------------------------------------

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
for _b in b"[{":
    _STEP[_b] = 1
for _b in b"]}":
    _STEP[_b] = -1
_WHITESPACE = b" \t\n\r"
_BRACES_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")


@dataclass(frozen=True)
class Shape:
    values: int
    depth: int
    longest_string: int


def too_many_values(n: int, budget: Budget) -> str:
    return f"the file holds {n} JSON values, more than the {budget.max_values} a notebook may hold"


def scan(raw: bytes, budget: Budget) -> Shape:
    """How many JSON values ``raw`` holds (each key counted), how deeply they nest and its longest string in
    bytes, measured without parsing; :class:`Refused` past ``budget``. Exact for valid JSON; for anything else
    an estimate that the parse then refuses. Memory: at most twice ``raw`` beside it, plus 41 bytes a string."""
    strings = raw.count(b'"') // 2
    if strings > budget.max_values:  # before splitting: the split costs a bytes object per string
        raise Refused(too_many_values(strings, budget))
    # In JSON a backslash only occurs inside a string, where it escapes the next character. Blanking escaped
    # backslashes first, then escaped quotes (left to right, as bytes.replace works), leaves quotes that each
    # open or close a string. (UTF-8 never uses these two byte values inside a multi-byte character.)
    parts = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__").split(b'"')
    outside, inside = parts[0::2], parts[1::2]  # the skeleton between the strings, and the strings
    del parts
    longest = max(map(len, inside), default=0)
    del inside

    def count(token: bytes, pieces=outside) -> int:
        return sum(map(bytes.count, pieces, repeat(token)))

    # Each separator ends a value or a key; each container is one more value, an empty one (whitespace inside
    # it removed, one piece at a time) one less. No empty container spans a string: ``[""]`` holds one.
    compact = map(bytes.translate, outside, repeat(_BRACES_AS_BRACKETS), repeat(_WHITESPACE))
    empty = count(b"[]", compact)
    values = count(b",") + count(b":") + count(b"[") + count(b"{") + 1 - empty
    if values > budget.max_values:
        raise Refused(too_many_values(values, budget))
    if longest > budget.max_string_bytes:
        raise Refused(f"the file holds a string of {longest} bytes, longer than the {budget.max_string_bytes} "
                      f"a notebook may hold")
    # at most 2 brackets a value: bounded by the check above
    brackets = b"".join(map(bytes.translate, outside, repeat(None), repeat(_NOT_BRACKETS)))
    depth = max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    if depth > budget.max_depth:
        raise Refused(f"the file's JSON is nested {depth} levels deep, deeper than the {budget.max_depth} "
                      f"a notebook may be")
    return Shape(values, depth, longest)


# -- step 2: what grading reads of a notebook -------------------------------------------------------------------

CELL_TYPES = ("code", "markdown", "raw")
MAX_ID_CHARS = 64  # longer ids are not kept (structure.repair gives such a cell an id of its own)


def count_values(value) -> int:
    """JSON values in ``value``, each key of an object counted (as :func:`scan` counts them); iterative."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            count += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def skeleton_of(data, cell_keys, notebook_keys, budget: Budget) -> dict:
    """What grading reads of a parsed notebook: ``{"metadata": {key: value}, "cells": [[type, id, text,
    {key: value}], ...]}`` with only ``notebook_keys`` and ``cell_keys`` of the metadata. :class:`Refused`
    when it is not a notebook or is past ``budget``."""
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Refused("not a notebook (no list of cells)")
    cells = data["cells"]
    if len(cells) > budget.max_cells:
        raise Refused(f"the notebook has {len(cells)} cells, more than the {budget.max_cells} a notebook may have")
    out, chars = [], 0
    for c in cells:
        if not isinstance(c, dict) or c.get("cell_type") not in CELL_TYPES:
            raise Refused("not a notebook (a cell without a valid cell_type)")
        src = c.get("source", "")
        if isinstance(src, list):
            if not all(isinstance(s, str) for s in src):
                raise Refused("not a notebook (a cell's source is not text)")
            src = "".join(src)
        if not isinstance(src, str):
            raise Refused("not a notebook (a cell's source is not text)")
        if len(src) > budget.max_cell_chars:
            raise Refused(f"a cell's text is {len(src)} characters long, longer than the {budget.max_cell_chars} "
                          f"a cell may be")
        chars += len(src)
        if chars > budget.max_source_chars:
            raise Refused(f"the cells' text is more than {budget.max_source_chars} characters in all, more than "
                          f"a notebook may hold")
        cid = c.get("id")
        meta = c.get("metadata")
        kept = {k: meta[k] for k in cell_keys if k in meta} if isinstance(meta, dict) else {}
        out.append([c["cell_type"], cid if isinstance(cid, str) and len(cid) <= MAX_ID_CHARS else None, src, kept])
    meta = data.get("metadata")
    kept = {k: meta[k] for k in notebook_keys if k in meta} if isinstance(meta, dict) else {}
    size = len(json.dumps([kept, [c[3] for c in out]], ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > budget.max_kept_metadata_bytes:
        raise Refused(f"the notebook's metadata is {size} bytes, more than the {budget.max_kept_metadata_bytes} "
                      f"a notebook may carry")
    values = count_values(kept) + sum(count_values(c[3]) for c in out)
    if values > budget.max_kept_metadata_values:
        raise Refused(f"the notebook's metadata holds {values} JSON values, more than the "
                      f"{budget.max_kept_metadata_values} a notebook may carry")
    return {"metadata": kept, "cells": out}


def decode(raw: bytes) -> str:
    """The file's text; :class:`Refused` when it is empty or not UTF-8 (the caller has measured it first)."""
    if not raw.strip():
        raise Refused("empty file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("malformed JSON (the file is not UTF-8 text)") from None


def load(text: str):
    """``text`` parsed; :class:`Refused` when it is not JSON."""
    try:
        return json.loads(text)
    except RecursionError:  # past max_depth already; kept for a budget raised past Python's limit
        raise Refused("malformed JSON (nested deeper than Python can read)") from None
    except ValueError:
        raise Refused("malformed JSON") from None


# -- the child ---------------------------------------------------------------------------------------------------

READY = b"R"  # the child's first byte: it started, limited itself, and is about to open the file
_ROOT = str(Path(__file__).resolve().parent.parent)
_CHILD = ("import sys; sys.path.insert(0, sys.argv[1]); "
          "from autograder.bounded_json import child_main; child_main(sys.argv[2:])")


def memory_reason(budget: Budget) -> str:
    return f"the file could not be read within the grader's memory limit ({budget.memory_bytes // MIB} MiB)"


def time_reason(budget: Budget) -> str:
    return f"the file could not be read within the grader's time limit ({budget.wall_s:g} s)"


def _limit_self(budget: Budget) -> None:
    """Cap this process's address space at its size now plus ``budget.memory_bytes``, and its CPU time."""
    try:
        with open("/proc/self/statm") as f:
            now = int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        now = 256 * MIB  # more than an interpreter with these imports takes
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = now + budget.memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    cpu = int(budget.wall_s) + 1  # the parent's wall clock decides; this only ends a child it no longer waits for
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu if hard == resource.RLIM_INFINITY else min(cpu, hard), hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _answer(path: bytes, request: dict) -> dict:
    """Read, measure, decode, parse, cut: each step drops what the one before it made, so the file is held
    at most twice (its bytes, then its text, then the parsed values) beside the step's own work."""
    budget = Budget(**request["budget"])
    try:
        raw = read_bounded(path, budget.max_bytes)
    except NotReadable as exc:
        return {"unreadable": str(exc)}
    try:
        if raw.strip():
            scan(raw, budget)
        text = decode(raw)
        del raw
        data = load(text)
        del text
        return {"notebook": skeleton_of(data, request["cell_keys"], request["notebook_keys"], budget)}
    except Refused as exc:
        return {"refused": str(exc)}
    except MemoryError:
        return {"refused": memory_reason(budget)}


def child_main(argv: list[str]) -> None:
    """The child: ``argv`` is the file's path and the request (JSON: budget, metadata keys to keep)."""
    path, request = os.fsencode(argv[0]), json.loads(argv[1])
    _limit_self(Budget(**request["budget"]))
    out = sys.stdout.buffer
    out.write(READY)
    out.flush()
    try:
        answer = _answer(path, request)
        reply = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    except MemoryError:
        reply = json.dumps({"refused": memory_reason(Budget(**request["budget"]))}).encode()
    except Exception as exc:  # noqa: BLE001 - the parent reports it as the grader's failure
        reply = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode("utf-8", "replace")
    out.write(reply)
    out.flush()


def _collect(proc: subprocess.Popen, budget: Budget) -> tuple[bytes, bytes]:
    """The child's stdout (at most ``budget.reply_bytes``) and the tail of its stderr, within the wall clock."""
    deadline = time.monotonic() + budget.wall_s
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise Refused(time_reason(budget))
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > budget.reply_bytes + len(READY):
                        raise Refused(f"the file could not be read within the grader's limits (what grading reads "
                                      f"of it is larger than {budget.reply_bytes} bytes)")
                else:
                    err = (err + chunk)[-4096:]
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise Refused(time_reason(budget)) from None
    return bytes(out), bytes(err)


def child_command(path, budget: Budget, cell_keys, notebook_keys) -> list:
    """The command line of the child that reads ``path`` (its reply on stdout: :data:`READY`, then JSON)."""
    request = json.dumps({"budget": asdict(budget), "cell_keys": list(cell_keys),
                          "notebook_keys": list(notebook_keys)})
    return [sys.executable, "-I", "-S", "-c", _CHILD, _ROOT, os.fsencode(path), request]


def read_notebook(path, budget: Budget, cell_keys, notebook_keys) -> dict:
    """The notebook at ``path`` as :func:`skeleton_of` gives it, read in a memory- and time-limited child.

    Raises :class:`Unreadable` or :class:`Refused` (the learner's file, with the reason) or
    :class:`ReaderFailed` (the grader's). Strings may hold lone surrogates: the caller cleans them."""
    try:
        proc = subprocess.Popen(child_command(path, budget, cell_keys, notebook_keys), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={}, close_fds=True)
    except OSError as exc:
        raise ReaderFailed(f"the notebook reader could not start: {exc}") from None
    try:
        out, err = _collect(proc, budget)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if not out.startswith(READY):
        raise ReaderFailed("the notebook reader did not start: "
                           + (err.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1])
    try:
        answer = json.loads(out[len(READY):].decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError):
        answer = None
    if not isinstance(answer, dict) or len(answer) != 1:
        # It started, then died without a reply: the limits ended it (a MemoryError Python could not recover
        # from, SIGXCPU), since nothing else in it depends on the file.
        raise Refused(memory_reason(budget))
    (kind, value), = answer.items()
    if kind == "notebook" and isinstance(value, dict):
        return value
    if kind == "unreadable":
        raise Unreadable(str(value))
    if kind == "refused":
        raise Refused(str(value))
    raise ReaderFailed(f"the notebook reader failed: {value}")
