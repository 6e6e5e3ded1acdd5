"""The check record's wire format: how a value travels from a kernel to the trusted grader (never pickle).

This module is the one owner of that format, both ends of it:

- :func:`make_encoder` (the kernel side) turns a value into plain JSON. Tensors become ``{"tensor": {...}}``
  with dtype, shape, device, exact type name and the raw bytes in base64; NumPy arrays become
  ``{"array": {...}}``; plain numbers, strings, lists, tuples and string-keyed dicts are kept; anything
  else is recorded only by its type name, so a rigged object cannot smuggle behaviour into the grader.
- :func:`validate` (the trusted side) accepts a record that came out of a process the learner controls and
  returns one that is safe to decode and to quote: every size within its cap, every name one of ours, and a
  tensor's dtype and shape *proved by its buffer* (the bytes must be exactly ``prod(shape)`` items of that
  dtype), so a forged or bent record can claim nothing its bytes do not show.
- :func:`decode` builds NumPy arrays and plain Python values, nothing else.

Why the encoder captures what it uses
-------------------------------------
The kernel runs learner code in the same process. A learner can replace ``torch.Tensor.dtype`` with a
property that says ``float32`` for a float64 tensor, patch ``numpy`` or ``base64`` functions, or rebind the
globals of this module. :func:`make_encoder` therefore takes, when it is called (before any learner code
runs), the C-level methods of ``torch._C.TensorBase`` and ``numpy.ndarray`` (types whose attributes cannot
be reassigned) and the few functions it needs, and reads every fact about a tensor from those: the dtype
and shape it records are those of the NumPy array made from the tensor's own storage. Whatever the kernel
says is still only a claim; :func:`validate` is what the decision relies on.
"""
from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass

import numpy as np

# Size caps of a record (the kernel applies them; validate() enforces them again on the trusted side).
MAX_ELEMENTS = 1_000_000  # per tensor or array
MAX_ITEMS = 100_000  # per list, tuple or dict
MAX_TEXT = 100_000  # per string
MAX_DEPTH = 20  # nesting of lists, tuples and dicts
MAX_DIMS = 32

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64", "complex128", "uint16", "uint32", "uint64")
# float16/bfloat16 are widened so NumPy can hold them; the original dtype name is kept.
WIDEN = {"bfloat16": "float32", "float16": "float32"}
DEVICES = ("cpu", "cuda", "meta", "mps", "xpu")
TENSOR_TYPES = ("Tensor", "Parameter")

# What the encoder itself writes as an ``unsupported`` note (the trusted side lets these through verbatim).
SUBCLASS = "tensor subclass"
ARRAY_SUBCLASS = "ndarray subclass"
TOO_LARGE = "value too large to record"
TOO_DEEP = "nesting too deep"
NON_STRING_KEYS = "dict with non-string keys"
UNREADABLE = "value the grader could not read"
MALFORMED = "malformed record"
MISMATCH = "tensor whose bytes do not match its dtype and shape"
OWN_CLASS = "value of its own class"
NOTES = frozenset({SUBCLASS, ARRAY_SUBCLASS, TOO_LARGE, TOO_DEEP, NON_STRING_KEYS, UNREADABLE, MALFORMED,
                   MISMATCH, OWN_CLASS})


@dataclass(frozen=True)
class DecodedTensor:
    """A tensor as the grader sees it: values plus the facts the checks look at."""

    values: np.ndarray
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "float32"
    device: str  # device type, e.g. "cpu", "cuda", "meta"
    type_name: str  # "Tensor" or "Parameter"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


@dataclass(frozen=True)
class Unsupported:
    type_name: str


def _builtin_type_names() -> frozenset[str]:
    import builtins

    return frozenset(n for n, v in vars(builtins).items() if isinstance(v, type))


# Type names a record may carry as they are: Python's own. Any other name (a learner's class, which can be
# named with text read from a hidden test) becomes OWN_CLASS on the trusted side.
PYTHON_NAMES = _builtin_type_names() | {"CellTimeout", "NoneType", "function", "builtin_function_or_method",
                                        "method", "generator", "module", "ndarray", "Tensor", "Parameter",
                                        "Module"}


def make_encoder():
    """The kernel's encoder: ``enc(value) -> record``. Never raises; exact types only; size-capped.

    Call it before any learner code runs: it captures the C-level accessors it reads values through.
    """
    import torch

    tensor_base = torch._C.TensorBase.__dict__
    get_dtype = tensor_base["dtype"].__get__
    get_device = tensor_base["device"].__get__
    get_shape = tensor_base["shape"].__get__
    detach, cpu, to, numel = (tensor_base[n] for n in ("detach", "cpu", "to", "numel"))
    to_numpy = tensor_base["numpy"]
    no_torch_function = torch._C.DisableTorchFunction
    widen_to = {getattr(torch, name): torch.float32 for name in WIDEN}
    dtype_names = {getattr(torch, name): name for name in DTYPES if hasattr(torch, name)}
    device_type = type(torch.device("cpu")).__dict__["type"].__get__
    plain_tensor, parameter = torch.Tensor, torch.nn.Parameter
    ndarray = np.ndarray
    nd = ndarray.__dict__
    nd_dtype, nd_shape, nd_size, nd_tobytes = (nd[n].__get__ if n != "tobytes" else nd[n]
                                               for n in ("dtype", "shape", "size", "tobytes"))
    np_dtype_name = np.dtype.__dict__["name"].__get__
    np_scalars = (np.floating, np.integer, np.bool_)
    b64 = base64.b64encode
    is_finite = math.isfinite
    type_of, is_instance, to_list, to_str, length = type, isinstance, list, str, len
    plain_types = (bool, int, str, type(None))
    prod = math.prod

    def extent(shape) -> int:  # what validate() caps: the product of the dims, a 0 counted as 1
        return prod(s if s > 1 else 1 for s in shape)

    def array_record(arr) -> dict:  # tobytes() writes C order whatever the layout
        return {"dtype": np_dtype_name(nd_dtype(arr)), "shape": [int(s) for s in nd_shape(arr)],
                "b64": b64(nd_tobytes(arr)).decode("ascii")}

    def tensor_record(x, kind: str) -> dict:
        with no_torch_function():
            t = detach(x)
            torch_dtype = get_dtype(t)
            name = dtype_names.get(torch_dtype)
            if name is None:
                return {"unsupported": UNREADABLE}
            device = device_type(get_device(t))
            if device == "meta":  # a device audit: only where results live is checked
                return {"tensor": {"dtype": name, "np_dtype": name, "shape": [int(s) for s in get_shape(t)],
                                   "device": "meta", "type": kind, "b64": ""}}
            if numel(t) > MAX_ELEMENTS or extent(get_shape(t)) > MAX_ELEMENTS:
                return {"unsupported": TOO_LARGE}
            host = cpu(t)
            if torch_dtype in widen_to:
                host = to(host, widen_to[torch_dtype])
            arr = array_record(to_numpy(host))
        # dtype and shape as the bytes show them; the torch name only says which torch dtype they came from
        return {"tensor": {"dtype": name, "np_dtype": arr["dtype"], "shape": arr["shape"], "device": device,
                           "type": kind, "b64": arr["b64"]}}

    def enc(value, depth: int = 0) -> dict:
        t = type_of(value)
        try:
            if depth > MAX_DEPTH:
                return {"unsupported": TOO_DEEP}
            if t is plain_tensor or t is parameter:
                return tensor_record(value, "Tensor" if t is plain_tensor else "Parameter")
            if is_instance(value, plain_tensor):
                return {"unsupported": SUBCLASS}
            if t is ndarray:
                if nd_size(value) > MAX_ELEMENTS or extent(nd_shape(value)) > MAX_ELEMENTS:
                    return {"unsupported": TOO_LARGE}
                if nd_dtype(value).kind not in "biuf":
                    return {"unsupported": "ndarray"}
                return {"array": array_record(value)}
            if is_instance(value, ndarray):
                return {"unsupported": ARRAY_SUBCLASS}
            if t in plain_types:
                if t is str and length(value) > MAX_TEXT:
                    return {"unsupported": TOO_LARGE}
                return {"plain": value}
            if t is float:
                return {"plain": value} if is_finite(value) else {"float": repr(value)}
            if t is list or t is tuple:
                if length(value) > MAX_ITEMS:
                    return {"unsupported": TOO_LARGE}
                return {"seq": [enc(v, depth + 1) for v in value], "tuple": t is tuple}
            if t is dict:
                if length(value) > MAX_ITEMS:
                    return {"unsupported": TOO_LARGE}
                if not all(type_of(k) is str for k in to_list(value)):
                    return {"unsupported": NON_STRING_KEYS}
                return {"map": {k: enc(v, depth + 1) for k, v in value.items()}}
            if is_instance(value, np_scalars) and t.__module__ == "numpy":
                return enc(value.item(), depth + 1)
        except Exception:  # noqa: BLE001 - a hostile object may raise from anything we touch
            return {"unsupported": UNREADABLE}
        return {"unsupported": to_str(getattr(t, "__name__", "object"))[:200]}

    return enc


_default_encoder = None


def encode(value) -> dict:
    """Encode a value for a check record (the check library's entry point; see :func:`make_encoder`)."""
    global _default_encoder
    if _default_encoder is None:
        _default_encoder = make_encoder()
    return _default_encoder(value)


# ---------------------------------------------------------------------------------------------------------
# the trusted side


def _buffer(b64, np_dtype: str, shape: list) -> bytes | None:
    """The raw bytes of a tensor or array record, if they are exactly ``prod(shape)`` items of ``np_dtype``."""
    if not isinstance(b64, str) or len(b64) > (MAX_ELEMENTS * 16 * 4) // 3 + 8:
        return None
    try:
        raw = binascii.a2b_base64(b64.encode("ascii"), strict_mode=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None
    return raw if len(raw) == math.prod(shape) * np.dtype(np_dtype).itemsize else None


def _shape(value) -> list[int] | None:
    """A claimed shape, if it is within the caps; else None.

    Its *claimed extent*, the product of its dimensions with every 0 counted as 1, must be at most
    ``MAX_ELEMENTS`` too, not only its size: a zero-size tensor shaped ``(15000, 15000, 0)`` holds no bytes,
    yet a reduction over its last axis would allocate 15000 x 15000 on the trusted side. With this cap
    anything a verdict derives from a record's shape (a sum over an axis, a broadcast) has at most
    ``MAX_ELEMENTS`` items, whatever the record claims.
    """
    if (not isinstance(value, list) or len(value) > MAX_DIMS
            or not all(type(s) is int and 0 <= s <= MAX_ELEMENTS for s in value)
            or math.prod(max(s, 1) for s in value) > MAX_ELEMENTS):
        return None
    return value


def validate(data, depth: int = 0) -> dict:
    """A record from an untrusted kernel, made safe to decode and to quote (see the module docstring).

    Never raises. What cannot be proved becomes an ``unsupported`` note in the grader's own words.
    """
    if depth > MAX_DEPTH + 1 or not isinstance(data, dict) or len(data) == 0:
        return {"unsupported": MALFORMED}
    if "tensor" in data:
        t = data["tensor"]
        if not isinstance(t, dict) or t.get("dtype") not in DTYPES:
            return {"unsupported": MALFORMED}
        if t.get("type") not in TENSOR_TYPES:
            return {"unsupported": SUBCLASS}
        dtype, device, shape = t["dtype"], t.get("device"), _shape(t.get("shape"))
        if device not in DEVICES or shape is None:
            return {"unsupported": MALFORMED}
        if device == "meta":
            return {"tensor": {"dtype": dtype, "np_dtype": dtype, "shape": shape, "device": "meta",
                               "type": t["type"], "b64": ""}}
        np_dtype = WIDEN.get(dtype, dtype)
        if t.get("np_dtype") != np_dtype or _buffer(t.get("b64"), np_dtype, shape) is None:
            return {"unsupported": MISMATCH}
        return {"tensor": {"dtype": dtype, "np_dtype": np_dtype, "shape": shape, "device": device,
                           "type": t["type"], "b64": t["b64"]}}
    if "array" in data:
        a = data["array"]
        shape = _shape(a.get("shape")) if isinstance(a, dict) else None
        if shape is None or a.get("dtype") not in DTYPES or a["dtype"] in WIDEN:
            return {"unsupported": MALFORMED}
        if _buffer(a.get("b64"), a["dtype"], shape) is None:
            return {"unsupported": MISMATCH}
        return {"array": {"dtype": a["dtype"], "shape": shape, "b64": a["b64"]}}
    if "plain" in data:
        v = data["plain"]
        if v is None or type(v) in (bool, int) or (type(v) is float and math.isfinite(v)):
            return {"plain": v}
        if type(v) is str and len(v) <= MAX_TEXT:
            return {"plain": v}
        return {"unsupported": MALFORMED}
    if "float" in data:
        text = data["float"]
        return {"float": text} if text in ("nan", "inf", "-inf") else {"unsupported": MALFORMED}
    if "seq" in data:
        seq = data["seq"]
        if not isinstance(seq, list) or len(seq) > MAX_ITEMS:
            return {"unsupported": MALFORMED}
        return {"seq": [validate(v, depth + 1) for v in seq], "tuple": data.get("tuple") is True}
    if "map" in data:
        m = data["map"]
        if not isinstance(m, dict) or len(m) > MAX_ITEMS or not all(isinstance(k, str) for k in m):
            return {"unsupported": MALFORMED}
        return {"map": {k[:200]: validate(v, depth + 1) for k, v in m.items()}}
    if "unsupported" in data:
        text = data["unsupported"]
        return {"unsupported": text if (text in NOTES or text in PYTHON_NAMES) else OWN_CLASS}
    return {"unsupported": MALFORMED}


def decode(data):
    """Inverse of the encoder, building only NumPy arrays and plain Python values."""
    if not isinstance(data, dict) or len(data) == 0:
        return Unsupported(MALFORMED)
    if "tensor" in data:
        t = data["tensor"]
        shape = tuple(int(s) for s in t["shape"])
        if t["device"] == "meta":  # no values: a read-only view of one zero, never an allocation by shape
            values = np.broadcast_to(np.zeros((), dtype=np.float64), shape)
        else:
            values = np.frombuffer(base64.b64decode(t["b64"]), dtype=np.dtype(t["np_dtype"])).reshape(shape)
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
    return Unsupported(MALFORMED)
