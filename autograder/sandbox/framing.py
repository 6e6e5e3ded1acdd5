"""Framing of every pipe between Engine, zygote, monitor and kernel: 4-byte big-endian length + UTF-8 JSON.

Never pickle: the kernel is hostile, and whatever it sends is parsed as data, size-capped at every hop.
"""
from __future__ import annotations

import json
import os
import select
import struct
import time

_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    pass


def write_frame(fd: int, obj) -> None:
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8",
                                                                                              "surrogatepass")
    _write_all(fd, _HEADER.pack(len(data)) + data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def read_exact(fd: int, n: int, deadline: float | None = None) -> bytes | None:
    """Read exactly n bytes; None on EOF before anything was read. Raises TimeoutError past the deadline."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                ready, _, _ = select.select([fd], [], [], left)
            except InterruptedError:
                continue
            if not ready:
                raise TimeoutError
        try:
            chunk = os.read(fd, min(n - got, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError("stream ended inside a frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_bytes: int, deadline: float | None = None):
    header = read_exact(fd, _HEADER.size, deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the cap of {max_bytes}")
    data = read_exact(fd, size, deadline) if size else b""
    if data is None:
        raise ProtocolError("stream ended inside a frame")
    try:
        return json.loads(data.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed frame: {type(exc).__name__}") from None
