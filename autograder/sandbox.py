"""The sandbox that runs one learner's notebook: a warm zygote, a fresh fork per notebook, Linux isolation.

Process tree (``python -m autograder.sandbox`` is the zygote; :class:`autograder.isolation.Engine` starts it)::

    Engine (trusted: decides, repairs structure, talks to the gradebook's writer)
      └─ zygote: has imported torch, numpy, matplotlib, IPython and attention_course; runs no learner code
          └─ monitor (one per notebook, root): reads the job, builds the sandbox, enforces the wall clock
              └─ kernel (pid 1 of a new pid namespace, unprivileged): executes the notebook's code cells

The zygote forks the monitor *before* the job is read, so no learner's notebook or output ever enters the
zygote's memory and nothing is shared between learners. The monitor, still root:

- ``unshare``s mount, network, pid, IPC and UTS namespaces (libc through ctypes; Python 3.11 has no
  ``os.unshare``). The new network namespace has only a loopback interface that is down: no network at
  all, not even to the host's 127.0.0.1.
- builds a new root on a private tmpfs holding read-only bind mounts of ``/usr``, ``/etc``, the Python
  installation, the virtual environment and the ``attention_course`` package, a few ``/dev`` nodes, and a
  size-limited tmpfs ``/scratch`` (``/tmp`` points there) owned by the kernel's uid. The course tree
  (``solutions/``, ``grading/`` with the gradebook, submissions and autograded notebooks of every
  learner), ``/root``, ``/home``, ``/work`` and the host's ``/tmp`` simply do not exist in it. Chosen over
  chmod-protecting the course tree because it does not depend on how the repository's permissions are set.
- puts the kernel into a fresh memory cgroup (``memory_mb``, no swap) and pids cgroup (``max_procs``
  tasks, threads included), cgroup v1 under the monitor's own cgroup, and where the cpu controller is
  available a CPU quota (``cpus``, default one CPU) so parallel sandboxes share the machine fairly.
- forks the kernel and waits for it with the notebook's wall-clock limit; at the deadline it SIGKILLs the
  kernel, and since the kernel is pid 1 of its namespace every process it started dies with it (a
  process that ``setsid``s its way out of the process group cannot survive).

The kernel mounts its own ``/proc``, ``chroot``s into the new root, drops to a per-sandbox uid/gid
(231000 + a slot held by ``flock`` while the sandbox lives; never a real account) with no supplementary
groups, sets ``PR_SET_NO_NEW_PRIVS`` (setuid binaries stay unprivileged), sets rlimits (``RLIMIT_NPROC``
for its uid, ``RLIMIT_CORE`` 0, ``RLIMIT_FSIZE``, ``RLIMIT_CPU``, ``RLIMIT_NOFILE``), points fds 0-2 at
``/dev/null``, clears the environment (``ATTENTION_COURSE_GRADING=sandbox``, ``ATTENTION_COURSE_DEVICE=cpu``,
``HOME=/scratch``) and runs each code cell in the zygote's pristine IPython ``InteractiveShell`` with
outputs captured as a kernel would (stream, display_data, execute_result, error). Each cell has a timeout
(SIGALRM raises :class:`CellTimeout`, a ``KeyboardInterrupt``, repeated every second if swallowed); a
notebook that ignores it runs into the wall clock and is killed. Graded test cells are seeded before they
run (so global RNG use in tests does not depend on what ran before) and are executed in the form the
trusted side rewrote them to (see :mod:`autograder.trusted`).

Results travel kernel → monitor → Engine as length-prefixed JSON frames (never pickle), size-capped at
every hop. The monitor reports how the kernel ended (result, exit status, signal, OOM kill, process
limit, timeout); the Engine turns that into a score.

Limits of this design: it needs root, cgroup v1 memory and pids controllers and namespaces (the Engine
reports what is missing and the tests fail loudly without them); the kernel runs on the CPU; learner code
shares the kernel's process with the test code, so the *decision* never happens there (see
:mod:`autograder.trusted`).
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import select
import signal
import struct
import sys
import time

from autograder.intake import MAX_DEPTH, clean_json

# ---------------------------------------------------------------------------------------------------------
# framing: 4-byte big-endian length + UTF-8 JSON

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


# ---------------------------------------------------------------------------------------------------------
# libc

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

UID_BASE, UID_SLOTS = 231000, 2000
STATE_DIR = "/run/attention-course-sandbox"


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                       ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), "prctl")


# ---------------------------------------------------------------------------------------------------------
# capabilities of this machine


def _cgroup_v1_dir(controller: str) -> str | None:
    """The directory of this process's cgroup v1 ``controller`` hierarchy, if mounted and writable."""
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            base = os.path.join("/sys/fs/cgroup", controller)
            path = os.path.join(base, parts[2].lstrip("/"))
            if os.path.isdir(path) and os.access(path, os.W_OK):
                return path
            if os.path.isdir(base) and os.access(base, os.W_OK):
                return base
    return None


def capabilities() -> dict:
    """What this machine offers the sandbox; every entry must be true for the isolation to be complete."""
    caps = {"root": os.geteuid() == 0,
            "memory_cgroup": _cgroup_v1_dir("memory") is not None,
            "pids_cgroup": _cgroup_v1_dir("pids") is not None}
    if caps["root"]:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
            except OSError:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        caps["namespaces"] = os.waitstatus_to_exitcode(status) == 0
    else:
        caps["namespaces"] = False
    return caps


# ---------------------------------------------------------------------------------------------------------
# the kernel side: executing cells in a captured IPython shell

RECORD_MIME = "application/vnd.attention-course.check+json"


class CellTimeout(KeyboardInterrupt):
    """Raised in a cell that runs past the per-cell timeout."""


class _Capture:
    """Outputs of the cell being executed, in nbformat's shape, with a byte budget for the whole notebook.

    Check records are kept whatever the output budget (they are small and they are what gets graded);
    printed text and rich output beyond ``max_bytes`` are dropped with a note.
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
        if len(text) > room:
            text = text[:room]
        self.used += len(text)
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last.get("output_type") == "stream" and last.get("name") == name:
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
            size = len(json.dumps(clean, default=str))
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
            size = len(json.dumps(record))
        except (TypeError, ValueError):
            return
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
    try:
        import attention_course.cells  # noqa: F401
    except ImportError:
        pass


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

_PRISTINE = dict(_builtins_module.__dict__)  # taken when the zygote imports this module: before any learner


class _PristineBuiltins:
    """While the kernel's own code writes a frame, builtins are what they were before any learner code ran
    (a learner who patched ``isinstance`` must not break the grader's plumbing); afterwards the learner's
    versions come back."""

    def __init__(self):
        self.module = _builtins_module
        self.pristine = _PRISTINE

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
                data = json.dumps({"done": True, "cells": capture.cells, "truncated": capture.truncated},
                                  separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                break
            except RuntimeError:
                time.sleep(0.05)
        else:
            data = json.dumps({"done": True, "cells": {}, "truncated": capture.truncated})
        raw = data.encode("utf-8", "surrogatepass")
        _write_all(res_fd, _HEADER.pack(len(raw)) + raw)


# ---------------------------------------------------------------------------------------------------------
# the monitor side: building the sandbox, running the kernel, reporting how it ended


def _bind_sources() -> list[tuple[str, bool]]:
    """(host path, read-only) pairs the kernel's root needs: the OS, Python, the venv, attention_course."""
    import attention_course

    paths = ["/usr", "/etc", os.path.realpath(sys.base_prefix), sys.prefix,
             os.path.dirname(os.path.abspath(attention_course.__file__))]
    out, seen = [], set()
    for p in sorted(paths, key=len):
        if os.path.isdir(p) and p not in seen:
            seen.add(p)
            out.append((p, True))
    return out


def _build_root(root: str, uid: int, scratch_mb: int) -> None:
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=755")
    for src, _ro in _bind_sources():
        dst = root + src
        os.makedirs(dst, exist_ok=True)
        mount(src, dst, None, MS_BIND | MS_REC)
        mount(src, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for link in ("/bin", "/lib", "/lib32", "/lib64", "/sbin"):
        if os.path.islink(link):
            os.symlink(os.readlink(link), root + link)
        elif os.path.isdir(link):
            os.makedirs(root + link, exist_ok=True)
            mount(link, root + link, None, MS_BIND | MS_REC)
            mount(link, root + link, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(root + "/dev", exist_ok=True)
    for node in ("null", "zero", "random", "urandom", "full"):
        target = root + "/dev/" + node
        open(target, "w").close()
        mount("/dev/" + node, target, None, MS_BIND)
    os.makedirs(root + "/dev/shm", exist_ok=True)
    mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    os.makedirs(root + "/proc", exist_ok=True)
    os.makedirs(root + "/scratch", exist_ok=True)
    mount("tmpfs", root + "/scratch", "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={scratch_mb}m,mode=700,uid={uid},gid={uid}")
    if not os.path.exists(root + "/tmp"):
        os.symlink("/scratch", root + "/tmp")
    # else: a bound path (a checkout or venv under /tmp) already made /tmp a read-only skeleton here;
    # TMPDIR, HOME and tempfile all point at /scratch, so nothing needs /tmp to be writable.


class _UidSlot:
    """A uid of its own for each live sandbox (so RLIMIT_NPROC and signals never cross sandboxes)."""

    def __init__(self):
        os.makedirs(STATE_DIR, mode=0o700, exist_ok=True)
        start = os.getpid() % UID_SLOTS
        for k in range(UID_SLOTS):
            slot = (start + k) % UID_SLOTS
            fd = os.open(os.path.join(STATE_DIR, f"uid-{slot}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.uid = fd, UID_BASE + slot
            return
        raise RuntimeError("no free sandbox uid")


class _Cgroups:
    def __init__(self, memory_mb: int, max_procs: int, cpus: float = 1.0):
        name = f"attention-sandbox-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        self.dirs = {}
        mem = _cgroup_v1_dir("memory")
        pids = _cgroup_v1_dir("pids")
        if not mem or not pids:
            raise RuntimeError("no writable cgroup v1 memory and pids hierarchies: memory and process limits "
                               "cannot be enforced")
        if mem:
            d = os.path.join(mem, name)
            os.mkdir(d)
            self.dirs["memory"] = d
            limit = str(int(memory_mb) << 20)
            self._write(d, "memory.limit_in_bytes", limit)
            if os.path.exists(os.path.join(d, "memory.memsw.limit_in_bytes")):
                try:
                    self._write(d, "memory.memsw.limit_in_bytes", limit)
                except OSError:
                    pass
            try:
                self._write(d, "memory.swappiness", "0")
            except OSError:
                pass
        if pids:
            d = os.path.join(pids, name)
            os.mkdir(d)
            self.dirs["pids"] = d
            self._write(d, "pids.max", str(int(max_procs)))
        cpu = _cgroup_v1_dir("cpu")
        if cpu and cpus and cpus > 0:  # fairness between parallel sandboxes, where the cpu controller exists
            d = os.path.join(cpu, name)
            try:
                os.mkdir(d)
                self.dirs["cpu"] = d
                self._write(d, "cpu.cfs_period_us", "100000")
                self._write(d, "cpu.cfs_quota_us", str(max(1000, int(100000 * float(cpus)))))
            except OSError:
                pass

    @staticmethod
    def _write(d: str, name: str, value: str) -> None:
        with open(os.path.join(d, name), "w") as fh:
            fh.write(value)

    @staticmethod
    def _read(d: str, name: str) -> str:
        try:
            with open(os.path.join(d, name)) as fh:
                return fh.read()
        except OSError:
            return ""

    def add(self, pid: int) -> None:
        for d in self.dirs.values():
            self._write(d, "cgroup.procs", str(pid))

    def oom_killed(self) -> bool:
        d = self.dirs.get("memory")
        if not d:
            return False
        for line in self._read(d, "memory.oom_control").splitlines():
            if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
                return True
        return False

    def memory_peak_mb(self) -> float:
        d = self.dirs.get("memory")
        text = self._read(d, "memory.max_usage_in_bytes").strip() if d else ""
        return int(text) / (1 << 20) if text.isdigit() else 0.0

    def pids_limit_hit(self) -> bool:
        d = self.dirs.get("pids")
        if not d:
            return False
        for line in self._read(d, "pids.events").splitlines():
            if line.startswith("max ") and int(line.split()[1]) > 0:
                return True
        return False

    def cleanup(self) -> None:
        for d in self.dirs.values():
            for _ in range(200):
                procs = self._read(d, "cgroup.procs").split()
                for p in procs:
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.01)


def sweep_stale_cgroups() -> None:
    """Remove sandbox cgroups left behind by a monitor that was killed (empty, and their monitor is gone)."""
    for controller in ("memory", "pids", "cpu"):
        base = _cgroup_v1_dir(controller)
        if not base:
            continue
        try:
            names = [n for n in os.listdir(base) if n.startswith("attention-sandbox-")]
        except OSError:
            continue
        for name in names:
            try:
                monitor = int(name.split("-")[2])
                os.kill(monitor, 0)
                continue  # its monitor is alive: not stale
            except (ValueError, IndexError):
                continue
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            try:
                os.rmdir(os.path.join(base, name))
            except OSError:
                pass


def _kernel_main(job: dict, root: str, uid: int, go_r: int, res_w: int) -> None:
    """In the kernel (pid 1 of the new pid namespace): wait for the monitor, lock down, run the cells."""
    limits = job["limits"]
    if os.read(go_r, 1) != b"g":
        os._exit(3)
    os.close(go_r)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chroot(root)
    os.chdir("/scratch")
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    # nothing of the host stays open: not the Engine's protocol pipes, not the uid lock file
    os.closerange(3, res_w)
    os.closerange(res_w + 1, 1 << 16)
    import resource

    procs = int(limits["max_procs"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # above the pids cgroup limit, so that the cgroup (which reports hitting it) is what stops a fork bomb
    resource.setrlimit(resource.RLIMIT_NPROC, (procs + 32, procs + 32))
    fsize = int(limits.get("scratch_mb", 64)) << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    cpu = int(limits["notebook_timeout_s"]) + 10
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    venv_bin = os.path.join(sys.prefix, "bin")
    os.environ.clear()
    os.environ.update({"HOME": "/scratch", "TMPDIR": "/scratch", "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
                       "LANG": "C.UTF-8", "ATTENTION_COURSE_GRADING": job.get("grading_mode", "sandbox"),
                       "ATTENTION_COURSE_DEVICE": "cpu", "MPLBACKEND": "module://matplotlib_inline.backend_inline",
                       "MPLCONFIGDIR": "/scratch/.matplotlib", "IPYTHONDIR": "/scratch/.ipython",
                       "OMP_NUM_THREADS": "1", "USER": "learner",
                       # run_cells seeds every graded test cell itself; Checks must not reseed on top
                       "ATTENTION_COURSE_CELL_SEEDING": "engine"})
    sys.path[:] = [p for p in sys.path if p and os.path.isdir(p)]
    import tempfile

    tempfile.tempdir = "/scratch"
    run_cells(job, res_w)
    os._exit(0)


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def monitor_main(proto_in: int, proto_out: int, root: str) -> None:
    """The monitor: read one job, run it in a fresh sandbox, write one report frame, exit."""
    report = {"status": "error", "reason": "the monitor failed", "cells": {}, "last_cell": None}
    try:
        job = read_frame(proto_in, 1 << 30)
        if job is None:
            os._exit(0)
        report = _monitor(job, root)
    except Exception as exc:  # noqa: BLE001 - reported to the Engine as a grader failure
        report = {"status": "error", "reason": f"sandbox error: {type(exc).__name__}: {exc}", "cells": {},
                  "last_cell": None}
    try:
        write_frame(proto_out, report)
    finally:
        os._exit(0)


def _monitor(job: dict, root: str) -> dict:
    limits = job["limits"]
    started = time.monotonic()
    deadline = started + float(limits["notebook_timeout_s"])
    slot = _UidSlot()
    cgroups = _Cgroups(int(limits["memory_mb"]), int(limits["max_procs"]), float(limits.get("cpus", 1.0)))
    try:
        unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
        _build_root(root, slot.uid, int(limits.get("scratch_mb", 64)))
        go_r, go_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(go_w)
                os.close(res_r)
                _kernel_main(job, root, slot.uid, go_r, res_w)
            except BaseException as exc:  # noqa: BLE001 - say what broke, then die
                try:
                    import builtins

                    builtins.__dict__.update(_PRISTINE)
                    import traceback as _tb

                    where = "".join(_tb.format_exception(exc)[-3:])[-1500:]
                    write_frame(res_w, {"abort": f"{type(exc).__name__}: {where}"})
                except BaseException:  # noqa: BLE001
                    pass
                os._exit(4)
            os._exit(0)
        os.close(go_r)
        os.close(res_w)
        cgroups.add(pid)
        os.write(go_w, b"g")
        os.close(go_w)
        return _watch(pid, res_r, deadline, limits, cgroups, started)
    finally:
        cgroups.cleanup()
        os.close(slot.fd)


def _watch(pid: int, res_r: int, deadline: float, limits: dict, cgroups: _Cgroups, started: float) -> dict:
    cap = int((limits["max_output_mb"] + limits.get("max_record_mb", 64)) * (1 << 20) * 1.5) + (1 << 20)
    done, last_cell, protocol, abort = None, None, "", ""
    timed_out = False
    while True:
        try:
            frame = read_frame(res_r, cap, deadline)
        except TimeoutError:
            timed_out = True
            break
        except ProtocolError as exc:
            protocol = str(exc)
            break
        if frame is None:
            break
        if not isinstance(frame, dict):
            protocol = "unexpected frame"
            break
        if "progress" in frame:
            last_cell = frame["progress"]
        elif "abort" in frame:
            abort = str(frame["abort"])[:2000]
        elif frame.get("done"):
            if done is not None:
                protocol = "more than one result"
                break
            done = frame
        else:
            protocol = "unexpected frame"
            break
    if timed_out or protocol:
        os.kill(pid, signal.SIGKILL)
    # the result is in; give the kernel a moment to exit on its own, then make sure it is gone
    status = None
    end = time.monotonic() + (0.0 if (timed_out or protocol) else 5.0)
    while status is None:
        wpid, st = os.waitpid(pid, os.WNOHANG)
        if wpid:
            status = st
        elif time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        else:
            time.sleep(0.005)
    os.close(res_r)
    seconds = time.monotonic() - started
    report = {"cells": {}, "last_cell": last_cell, "seconds": seconds, "memory_peak_mb": cgroups.memory_peak_mb()}
    oom, pids_hit = cgroups.oom_killed(), cgroups.pids_limit_hit()
    if timed_out:
        report.update(status="zero", reason=f"timeout: notebook exceeded {float(limits['notebook_timeout_s']):g} s")
    elif oom:
        report.update(status="zero", reason=f"kernel died (out of memory: limit {int(limits['memory_mb'])} MB)")
    elif pids_hit:
        report.update(status="zero", reason=f"process limit exceeded: the notebook tried to run more than "
                                            f"{int(limits['max_procs'])} processes or threads (fork bomb?)")
    elif protocol:
        report.update(status="zero", reason="the notebook interfered with the grader's result channel", detail=protocol)
    elif done is None:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            what = "segfault" if sig == signal.SIGSEGV else _signal_name(sig)
            report.update(status="zero", reason=f"kernel died ({what})")
        elif abort:
            report.update(status="zero", reason="kernel died (the notebook broke the Python it runs in: "
                                                + abort.strip().splitlines()[-1][:300] + ")", detail=abort)
        else:
            report.update(status="zero", reason=f"kernel died (exited with status {os.waitstatus_to_exitcode(status)} "
                                                f"before the notebook finished)")
    else:
        report.update(status="ok", reason="", cells=done.get("cells", {}), truncated=bool(done.get("truncated")))
    return report


# ---------------------------------------------------------------------------------------------------------
# the zygote


def zygote_main() -> int:
    global _SHELL
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # a stray print never reaches the protocol
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _warm_imports()
    _SHELL = _make_shell()
    root = os.path.join(STATE_DIR, "root")
    os.makedirs(root, mode=0o755, exist_ok=True)
    sweep_stale_cgroups()
    write_frame(proto_out, {"ready": True, "capabilities": capabilities(), "pid": os.getpid()})
    while True:
        try:
            command = read_exact(proto_in, 1)
        except ProtocolError:
            return 0
        if command is None or command == b"q":
            return 0
        pid = os.fork()
        if pid == 0:
            monitor_main(proto_in, proto_out, root)
            os._exit(0)
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue


if __name__ == "__main__":
    raise SystemExit(zygote_main())
