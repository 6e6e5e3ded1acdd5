"""Files written whole or not at all: a reader (formgrader, ``release_feedback``, the next run, a learner's
browser) sees the previous version or the new one, never half of one, even when the writer is killed."""
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
