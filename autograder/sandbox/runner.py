"""The kernel's side: executing a notebook's cells in the zygote's pristine IPython shell, outputs captured
as a Jupyter kernel would (stream, display_data, execute_result, error), check records kept apart, graded
test cells seeded and run in the form the trusted side rewrote them to (see :mod:`autograder.trusted`).

Nothing here isolates anything: this code runs inside whatever jail :mod:`.jail` built, and everything it
sends out is parsed by the monitor as untrusted data.
"""
from __future__ import annotations

import errno
import gc
import json
import os
import signal
import sys
import time

from autograder.intake import MAX_DEPTH, clean_json

from .framing import HEADER, write_all, write_frame

RECORD_MIME = "application/vnd.attention-course.check+json"


class CellTimeout(KeyboardInterrupt):
    """Raised in a cell that runs past the per-cell timeout."""


# What one more output entry costs beyond its text, charged against the budgets: an entry decodes to a few dicts
# on the trusted side (hundreds of bytes each), so a notebook that displays a million tiny values must not make
# a result whose decoded size is many times its bytes (the monitor decodes within a few times the raw size).
OUTPUT_OVERHEAD = 256


class _Capture:
    """Outputs of the cell being executed, in nbformat's shape, with a byte budget for the whole notebook.

    Check records are kept whatever the output budget (they are small and they are what gets graded);
    printed text and rich output beyond ``max_bytes`` are dropped with a note. Each new output entry is charged
    ``OUTPUT_OVERHEAD`` bytes on top of its text.
    """

    def __init__(self, max_bytes: int, max_record_bytes: int):
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self.used = 0
        self.record_bytes = 0
        self.truncated = False
        self.cells: dict[str, dict] = {}
        self.outputs: list | None = None
        self.execution_count = None
        self.site = None

    def start(self, index: int, execution_count: int) -> None:
        self.outputs = []
        self.execution_count = execution_count
        self.cells[str(index)] = {"outputs": self.outputs, "execution_count": execution_count}

    def _note_truncated(self) -> None:
        if not self.truncated:
            self.truncated = True
            if self.outputs is not None:
                self.outputs.append({"output_type": "stream", "name": "stderr",
                                     "text": f"[output truncated: the notebook printed more than "
                                             f"{self.max_bytes // (1 << 20)} MB]\n"})

    def stream(self, name: str, text: str) -> None:
        if self.outputs is None or not text:
            return
        room = self.max_bytes - self.used
        if room <= 0:
            self._note_truncated()
            return
        last = self.outputs[-1] if self.outputs else None
        extend = last is not None and last.get("output_type") == "stream" and last.get("name") == name
        if not extend:
            room -= OUTPUT_OVERHEAD
            if room <= 0:
                self.used = self.max_bytes
                self._note_truncated()
                return
            self.used += OUTPUT_OVERHEAD
        if len(text) > room:
            text = text[:room]
        self.used += len(text)
        if extend:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})
        if self.used >= self.max_bytes:
            self._note_truncated()

    def rich(self, output_type: str, data: dict, metadata: dict | None = None, **extra) -> None:
        if self.outputs is None:
            return
        try:
            # bounded depth, so the frame always encodes; the engine cuts deeper still and flags it
            clean, _ = clean_json({str(k): v for k, v in data.items()}, max_depth=2 * MAX_DEPTH, fix_text=False)
            size = len(json.dumps(clean, default=str)) + OUTPUT_OVERHEAD
        except Exception:  # noqa: BLE001 - learner objects can do anything in their reprs
            return
        if size > self.max_bytes - self.used:
            self._note_truncated()
            return
        self.used += size
        out = {"output_type": output_type, "data": clean, "metadata": metadata or {}}
        out.update(extra)
        self.outputs.append(out)

    def record(self, record: dict, text: str) -> None:
        """A check record: kept outside the printed-output budget, within its own."""
        if self.outputs is None:
            return
        if self.site is not None:
            record = dict(record, site=self.site)
        try:
            text_ = json.dumps(record)
        except (TypeError, ValueError):
            return
        # what it costs decoded: a list of 100k small values is 1.8 MB of JSON and 22 MB of objects (each value
        # is a dict of its own); charging every container 200 bytes keeps the charge within 1.2x of that
        size = len(text_) + OUTPUT_OVERHEAD + 200 * (text_.count("{") + text_.count("["))
        if self.record_bytes + size > self.max_record_bytes:
            self.stream("stderr", "[check record dropped: records exceed their size budget]\n")
            return
        self.record_bytes += size
        self.outputs.append({"output_type": "display_data", "data": {RECORD_MIME: record, "text/plain": text},
                             "metadata": {}})

    def error(self, ename: str, evalue: str, traceback: list[str]) -> None:
        if self.outputs is None:
            return
        tb = [line[:4000] for line in traceback[-40:]]
        self.outputs.append({"output_type": "error", "ename": ename[:200], "evalue": evalue[:2000],
                             "traceback": tb})


class _Stream:
    """A text stream that feeds the capture (what ``sys.stdout``/``sys.stderr`` become in the kernel)."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, capture: _Capture, name: str):
        self._capture, self.name = capture, name

    def write(self, text) -> int:
        if not isinstance(text, str):
            text = str(text)
        self._capture.stream(self.name, text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "captured stream has no file descriptor")

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


_SHELL = None
_CAPTURE: _Capture | None = None


def _make_shell():
    """The pristine shell every kernel starts from (created once in the zygote, copied by fork)."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            if _CAPTURE is None or not isinstance(data, dict):
                return
            if RECORD_MIME in data and isinstance(data[RECORD_MIME], dict):
                _CAPTURE.record(data[RECORD_MIME], str(data.get("text/plain", ""))[:500])
            else:
                _CAPTURE.rich("display_data", data, metadata if isinstance(metadata, dict) else {})

        def clear_output(self, wait=False):
            pass

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            if _CAPTURE is not None:
                _CAPTURE.rich("execute_result", format_dict, md_dict or {},
                              execution_count=_CAPTURE.execution_count)

    class Shell(InteractiveShell):
        display_pub_class = Publisher
        displayhook_class = Hook

        def _showtraceback(self, etype, evalue, stb):
            if _CAPTURE is not None:
                try:
                    text = str(evalue)
                except Exception:  # noqa: BLE001
                    text = "<unprintable>"
                _CAPTURE.error(getattr(etype, "__name__", "Error"), text, [str(s) for s in stb])

        def enable_gui(self, gui=None):
            pass

    cfg = Config()
    cfg.HistoryManager.enabled = False
    cfg.InteractiveShell.colors = "nocolor"
    cfg.InteractiveShell.autocall = 0
    cfg.InteractiveShell.cache_size = 0
    shell = Shell.instance(config=cfg)
    shell.enable_matplotlib("inline")
    return shell


def _warm_imports() -> None:
    """Everything a notebook of this course imports, loaded once in the zygote (fork shares it)."""
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import matplotlib

    matplotlib.use("module://matplotlib_inline.backend_inline")
    import matplotlib.pyplot  # noqa: F401
    import matplotlib.font_manager

    matplotlib.font_manager.fontManager.findfont("DejaVu Sans")
    import attention_course.checks  # noqa: F401
    import attention_course.encoding  # noqa: F401
    import attention_course.expected  # noqa: F401
    import attention_course.plots  # noqa: F401
    import attention_course.runtime  # noqa: F401
    import attention_course.verdicts  # noqa: F401
    import inspect, linecache, tokenize, traceback, warnings, math, random, pickle  # noqa: F401,E401
    import tqdm.auto  # noqa: F401 - chapter 8's training loop
    try:
        import attention_course.cells  # noqa: F401
    except ImportError:
        pass


def _warm_optimizer() -> None:
    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # starts no thread


def _warm_symbolic_shapes() -> None:
    import torch.fx.experimental.symbolic_shapes  # noqa: F401


# Imports that a chapter's code starts lazily, and that every fork making them pays again: an optimizer's first
# construction imports torch._dynamo and sympy (0.9 s of CPU), a tensor on the meta device sympy (0.4 s). The
# zygote starts without them, since most grading never needs them (chapter 3's class, the hostile corpus), and
# makes one once a kernel's result says it made it (the Engine then sends "w": zygote.py), so the notebooks after
# the first find it made. {module a kernel's run added to sys.modules: how the zygote makes it}
WARM_UPS = {"torch._dynamo": _warm_optimizer, "sympy": _warm_symbolic_shapes}


def warm(names) -> None:
    """In the zygote: make the imports ``names`` asks for, those of :data:`WARM_UPS` only."""
    for name in WARM_UPS:
        if name in names and name not in sys.modules:
            try:
                WARM_UPS[name]()
            except Exception as exc:  # noqa: BLE001 - the zygote must live on: kernels then import it themselves,
                # which costs time, and inside a memory budget the budget too: said on the zygote's log
                print(f"zygote: warming {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    gc.freeze()


def _trusted_encoder():
    """The kernel's encoder for recorded values: the wire format's own (exact types only, size-capped, never
    raises, reading tensors through C-level accessors captured now, before any learner code runs)."""
    from attention_course.encoding import make_encoder

    return make_encoder()


def _make_recorders(capture: _Capture, current: dict):
    """``__ac_record__`` / ``__ac_raises__`` / ``__ac_site__``: what rewritten test cells call. Made once,
    before any learner code runs; ``current["grade_id"]`` is the test cell being run."""
    from attention_course.kinds import call_outcome

    enc = _trusted_encoder()
    getframe = sys._getframe

    def from_test_cell(name: str, fn) -> bool:
        """Called by the test cell's own top-level code through the grader's binding, not by a wrapper
        (a learner's function that rebinds ``__ac_record__`` and forwards to it is refused: the check is then
        missing and fails). See autograder/TRUST.md for what this does not stop."""
        caller = getframe(2)
        code = caller.f_code
        if (code.co_name == "<module>" and code.co_filename.startswith("<ipython-input-")
                and caller.f_globals.get(name) is fn):
            return True
        capture.stream("stderr", "[check record refused: the grader's recorder was not called by the test cell]\n")
        return False

    def record(site, kind, check_id, got, *want):
        if not from_test_cell("__ac_record__", record):
            return
        rec = {"cell": current["grade_id"], "check": str(check_id), "kind": str(kind), "site": int(site),
               "got": enc(got)}
        if want:
            rec["want"] = enc(want[0])
        capture.record(rec, f"recorded: {check_id}")

    def raises(site, check_id, fn, *args, **kwargs):
        if not from_test_cell("__ac_raises__", raises):
            return
        capture.record({"cell": current["grade_id"], "check": str(check_id), "kind": "raises", "site": int(site),
                        "got": enc(call_outcome(fn, args, kwargs))}, f"recorded: {check_id}")

    def site(site_index, checks):
        """Profile runs: tag the records of the check call that follows with its site."""
        capture.site = int(site_index)
        return checks

    return record, raises, site


def _seed(seed: int, torch_seed, np_seed, py_seed) -> None:
    py_seed(seed)
    np_seed(seed % (2 ** 32))
    torch_seed(seed)


import builtins as _builtins_module

PRISTINE_BUILTINS = dict(_builtins_module.__dict__)  # taken when the zygote imports this module: before any learner


class _PristineBuiltins:
    """While the kernel's own code writes a frame, builtins are what they were before any learner code ran
    (a learner who patched ``isinstance`` must not break the grader's plumbing); afterwards the learner's
    versions come back."""

    def __init__(self):
        self.module = _builtins_module
        self.pristine = PRISTINE_BUILTINS

    def __enter__(self):
        self.saved = dict(self.module.__dict__)
        self.module.__dict__.update(self.pristine)

    def __exit__(self, *exc):
        self.module.__dict__.clear()
        self.module.__dict__.update(self.saved)


def run_cells(job: dict, res_fd: int) -> None:
    """Execute the job's cells in the pristine shell; stream progress and the final result to res_fd."""
    global _CAPTURE
    import random

    import numpy as np
    import torch

    limits = job["limits"]
    cold = [name for name in WARM_UPS if name not in sys.modules]  # what the zygote has not made yet
    shell = _SHELL
    capture = _Capture(int(limits["max_output_mb"] * (1 << 20)), int(limits.get("max_record_mb", 64) * (1 << 20)))
    _CAPTURE = capture
    sys.stdout = _Stream(capture, "stdout")
    sys.stderr = _Stream(capture, "stderr")
    torch.set_num_threads(1)
    import warnings

    warnings.resetwarnings()
    warnings.simplefilter("default")
    cell_timeout = float(limits["cell_timeout_s"])
    torch_seed, np_seed, py_seed = torch.manual_seed, np.random.seed, random.seed

    def on_alarm(signum, frame):
        signal.setitimer(signal.ITIMER_REAL, 1.0)  # keep interrupting a cell that swallows the first one
        raise CellTimeout(f"the cell did not finish within {cell_timeout:g} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    pristine = _PristineBuiltins()
    current = {"grade_id": None}
    record, raises, site = _make_recorders(capture, current)
    for n, cell in enumerate(job["cells"], start=1):
        t0 = time.monotonic()
        try:
            with pristine:  # the kernel's own steps run with the builtins it started with
                write_frame(res_fd, {"progress": cell["index"]})
                capture.start(cell["index"], n)
                current["grade_id"] = cell.get("grade_id")
                if cell.get("test"):
                    shell.user_ns["__ac_record__"] = record
                    shell.user_ns["__ac_raises__"] = raises
                    shell.user_ns["__ac_site__"] = site
                    _seed(int(cell["seed"]), torch_seed, np_seed, py_seed)
            signal.setitimer(signal.ITIMER_REAL, cell_timeout)
            try:
                shell.run_cell(cell["code"], store_history=False, silent=False)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except CellTimeout as exc:
            with pristine:
                capture.error("CellTimeout", str(exc), [])
        except BaseException as exc:  # noqa: BLE001 - a cell must never take the runner down
            signal.setitimer(signal.ITIMER_REAL, 0)
            with pristine:
                capture.error(type(exc).__name__, "raised outside the cell's code", [])
        with pristine:
            capture.cells[str(cell["index"])]["seconds"] = round(time.monotonic() - t0, 4)
            capture.site = None
            sys.stdout, sys.stderr = _Stream(capture, "stdout"), _Stream(capture, "stderr")
        if _CAPTURE is not capture:  # learner code rebound the module global
            _CAPTURE = capture
    capture.outputs = None
    _CAPTURE = None
    with pristine:
        for attempt in range(5):  # a learner's thread may still be touching the outputs: retry
            try:
                data = json.dumps({"done": True, "cells": capture.cells, "truncated": capture.truncated,
                                   "warm": [name for name in cold if name in sys.modules]},
                                  separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                break
            except RuntimeError:
                time.sleep(0.05)
        else:
            data = json.dumps({"done": True, "cells": {}, "truncated": capture.truncated})
        raw = data.encode("utf-8", "surrogatepass")
        write_all(res_fd, HEADER.pack(len(raw)) + raw)




def init_shell() -> None:
    """In the zygote, once: the imports every notebook needs, and the pristine shell each kernel copies.

    Everything made here is then frozen (``gc.freeze``, and again after each :func:`warm`): a kernel's garbage
    collector would otherwise walk every object the zygote made, writing to their pages, and a forked kernel pays
    for each page it writes. In a memory budget's cgroup (64 MiB) the walk a cell's traceback set off cost about
    70 MB: a budget cell that raised any error was reported as having gone past its budget (that job peaked at
    106 MB; frozen, with the traceback formatter warmed here, at 39 MB)."""
    global _SHELL
    _warm_imports()
    _SHELL = _make_shell()
    _warm_traceback(_SHELL)
    gc.freeze()


def _warm_traceback(shell) -> None:
    """Format one traceback in the zygote: a kernel's first one imports stack_data, executing, asttokens and
    pygments, which every kernel would pay again (a memory budget's job within its budget)."""
    try:
        raise ValueError("warming the traceback formatter")
    except ValueError:
        shell.showtraceback()  # _CAPTURE is None in the zygote: formatted, recorded nowhere
