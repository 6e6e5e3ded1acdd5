"""Framing of every pipe between Engine, zygote, monitor and kernel: 4-byte big-endian length + UTF-8 JSON.

Never pickle: the kernel is hostile, and whatever it sends is parsed as data, size-capped at every hop.

Sizes are capped on the raw bytes, from the length header, before a frame is read or decoded: a frame's length
is checked against the cap, then read in chunks of at most 1 MB. The kernel's result (the ``done`` frame) is
never re-encoded on its way to the Engine: the monitor forwards its raw bytes (:func:`write_raw_frame`), so what
arrives is exactly as large as what the kernel sent, and :func:`decode_result` reads it strictly (valid UTF-8
JSON without NaN or Infinity, an object with ``done``: a dict of cells); anything else is
:class:`ProtocolError`, which the monitor and the Engine turn into the learner's zero.
"""
from __future__ import annotations

import json
import os
import select
import struct
import time

HEADER = struct.Struct(">I")  # every frame's length prefix (the monitor and the runner frame raw results with it)


class ProtocolError(Exception):
    pass


def write_frame(fd: int, obj) -> None:
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8",
                                                                                              "surrogatepass")
    write_all(fd, HEADER.pack(len(data)) + data)


def write_all(fd: int, data: bytes) -> None:
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


def read_raw_frame(fd: int, max_bytes: int, deadline: float | None = None) -> bytes | None:
    """One frame's bytes, undecoded; None on EOF before a frame. The cap is checked before anything is read."""
    header = read_exact(fd, HEADER.size, deadline)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the cap of {max_bytes}")
    data = read_exact(fd, size, deadline) if size else b""
    if data is None:
        raise ProtocolError("stream ended inside a frame")
    return data


def write_raw_frame(fd: int, data: bytes) -> None:
    write_all(fd, HEADER.pack(len(data)) + data)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def decode(data: bytes):
    """Strict JSON: no NaN or Infinity (no writer of ours produces them). A number out of range (``1e400``) reads
    as an infinite float, as Python's reader makes it; refusing it would cost a Python call per number."""
    try:
        return json.loads(data.decode("utf-8", "surrogatepass"), parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed frame: {type(exc).__name__}") from None


def read_frame(fd: int, max_bytes: int, deadline: float | None = None):
    data = read_raw_frame(fd, max_bytes, deadline)
    return None if data is None else decode(data)


def decode_result(data: bytes) -> dict:
    """The kernel's result frame as ``{"cells": {...}, "truncated": bool, "warm": [str, ...]}``; ProtocolError when
    it is not one. ``warm``: the lazy imports the kernel says it made, as strings, a few at most; the Engine keeps
    only names of runner.WARM_UPS (Engine._make_warm), so a forged list at worst moves when the zygote makes them."""
    frame = decode(data)
    if not isinstance(frame, dict) or frame.get("done") is not True or not isinstance(frame.get("cells"), dict):
        raise ProtocolError("malformed result")
    warm = frame.get("warm")
    warm = [name for name in warm[:8] if isinstance(name, str)] if isinstance(warm, list) else []
    return {"cells": frame["cells"], "truncated": frame.get("truncated") is True, "warm": warm}
