"""The grader's one content digest: SHA-256 over parts, each framed by its length, so that no two different
sequences of parts (``b"ab", b"c"`` and ``b"a", b"bc"``) hash alike. Resume keys, the record of what the CSVs
and report were written from, and the Dask workers' course bundles are all named by it."""
from __future__ import annotations

import hashlib


def framed_sha256(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()
