"""Files written whole or not at all: a reader (formgrader, ``release_feedback``, the next run, a learner's
browser) sees the previous version or the new one, never half of one, even when the writer is killed; and records
appended a whole line at a time (the arrival record, the feedback journal)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .learner_files import NotReadable, read_bounded


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """``data`` into ``path``, through a temporary file beside it (the process id in its name: two writers never
    share one) and ``os.replace``. Makes the parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_atomic(path: Path, text: str) -> None:
    """``text`` as UTF-8, as :func:`write_atomic_bytes` writes."""
    write_atomic_bytes(path, text.encode("utf-8"))


def append_line(path: Path, line: bytes, mode: int = 0o640) -> None:
    """Append one record line (no newline in ``line``) in one ``write`` on an ``O_APPEND`` descriptor, synced:
    concurrent writers never interleave inside a line, and a crash leaves at most one torn last line, which the
    reader skips (a line that follows a torn one starts on a line of its own)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = line + b"\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(path: Path, max_bytes: int, parse, what: str) -> tuple[list, int]:
    """The records of a file :func:`append_line` wrote: each non-empty line's JSON through ``parse``, and how many
    lines did not parse (a torn last line after a kill) and were skipped. ``([], 0)`` when there is no file yet;
    read with ``lstat``-style care and a size bound (learner_files.read_bounded); ``what`` names it in the error."""
    try:
        raw = read_bounded(path, max_bytes)
    except NotReadable as err:
        if str(err) == "missing":
            return [], 0
        raise RuntimeError(f"{what} {path} is not readable ({err})") from None
    records, skipped = [], 0
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            records.append(parse(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            skipped += 1
    return records, skipped
