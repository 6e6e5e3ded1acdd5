"""Files written whole or not at all: a reader (formgrader, ``release_feedback``, the next run, a learner's
browser) sees the previous version or the new one, never half of one, even when the writer is killed; and records
appended a whole line at a time (the arrival record, the feedback journal)."""
from __future__ import annotations

import os
from pathlib import Path


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
