"""Encode check values as plain JSON (never pickle) so a trusted process can decode them safely.

Tensors become ``{"tensor": {...}}`` with dtype, shape, device, exact type name and the raw bytes in
base64; NumPy arrays become ``{"array": {...}}``. Anything we do not recognise is recorded only by its
type name, so a rigged object cannot smuggle behaviour into the grader: decoding yields NumPy arrays and
Python scalars and nothing else.
"""
from __future__ import annotations

import base64
import math
from dataclasses import dataclass

import numpy as np

# float16/bfloat16 are widened so NumPy can hold them; the original dtype name is kept.
_WIDEN = {"bfloat16": "float32", "float16": "float32"}


@dataclass(frozen=True)
class DecodedTensor:
    """A tensor as the grader sees it: values plus the facts the checks look at."""

    values: np.ndarray
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "float32"
    device: str  # device type, e.g. "cpu", "cuda", "meta"
    type_name: str  # "Tensor" unless the learner returned a subclass

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


@dataclass(frozen=True)
class Unsupported:
    type_name: str


def _encode_tensor(x) -> dict:
    import torch

    detached = torch.Tensor.detach(x)
    dtype = str(detached.dtype).removeprefix("torch.")
    device = detached.device.type
    if device == "meta":
        raw, np_dtype = b"", dtype
    else:
        as_plain = torch.Tensor.as_subclass(torch.Tensor.cpu(detached), torch.Tensor)
        if dtype in _WIDEN:
            as_plain = as_plain.to(getattr(torch, _WIDEN[dtype]))
        arr = np.ascontiguousarray(as_plain.numpy())
        raw, np_dtype = arr.tobytes(), str(arr.dtype)
    return {
        "tensor": {
            "dtype": dtype,
            "np_dtype": np_dtype,
            "shape": list(detached.shape),
            "device": device,
            "type": type(x).__name__,
            "b64": base64.b64encode(raw).decode("ascii"),
        }
    }


def encode(value) -> dict:
    """Encode a value for a check record. Never raises: unknown things are recorded by type name."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a course requirement
        torch = None
    try:
        if torch is not None and isinstance(value, torch.Tensor):
            return _encode_tensor(value)
        if isinstance(value, np.ndarray) and type(value) is np.ndarray and value.dtype.kind in "biuf":
            arr = np.ascontiguousarray(value)
            return {"array": {"dtype": str(arr.dtype), "shape": list(arr.shape),
                              "b64": base64.b64encode(arr.tobytes()).decode("ascii")}}
        if type(value) is bool or value is None:
            return {"plain": value}
        if type(value) is int:
            return {"plain": value}
        if type(value) is float:
            if math.isfinite(value):
                return {"plain": value}
            return {"float": repr(value)}
        if type(value) is str:
            return {"plain": value}
        if type(value) in (list, tuple):
            return {"seq": [encode(v) for v in value], "tuple": type(value) is tuple}
        if type(value) is dict and all(type(k) is str for k in value):
            return {"map": {k: encode(v) for k, v in value.items()}}
        if isinstance(value, (np.floating, np.integer, np.bool_)) and type(value).__module__ == "numpy":
            return encode(value.item())
    except Exception as exc:  # a hostile object may raise from anything we touch
        return {"unsupported": f"{type(value).__name__} (unreadable: {type(exc).__name__})"}
    return {"unsupported": type(value).__name__}


def decode(data):
    """Inverse of :func:`encode`, building only NumPy arrays and plain Python values."""
    if not isinstance(data, dict) or len(data) == 0:
        return Unsupported("malformed record")
    if "tensor" in data:
        t = data["tensor"]
        shape = tuple(int(s) for s in t["shape"])
        raw = base64.b64decode(t["b64"])
        if t["device"] == "meta":
            values = np.zeros(shape, dtype=np.float64)
        else:
            values = np.frombuffer(raw, dtype=np.dtype(t["np_dtype"])).reshape(shape)
        return DecodedTensor(values, str(t["dtype"]), str(t["device"]), str(t["type"]))
    if "array" in data:
        a = data["array"]
        values = np.frombuffer(base64.b64decode(a["b64"]), dtype=np.dtype(a["dtype"]))
        return values.reshape(tuple(int(s) for s in a["shape"]))
    if "plain" in data:
        return data["plain"]
    if "float" in data:
        return float(data["float"])
    if "seq" in data:
        items = [decode(v) for v in data["seq"]]
        return tuple(items) if data.get("tuple") else items
    if "map" in data:
        return {k: decode(v) for k, v in data["map"].items()}
    if "unsupported" in data:
        return Unsupported(str(data["unsupported"]))
    return Unsupported("malformed record")
