"""The monitor: one per notebook, forked by the zygote before the job is read. It builds the sandbox its
policy describes (:mod:`.jail`), forks the kernel, enforces the wall clock, and reports how the kernel
ended (result, exit status, signal, OOM kill, process limit, timeout) as one frame; the Engine turns that
into a score.

At the namespace levels the kernel is pid 1 of a new pid namespace, so killing it kills everything it
started. At the process level the monitor is a child subreaper and kills every descendant it has left.

**The result channel belongs to the grader.** Learner code runs in the kernel's process: it can write any
descriptor the kernel holds (found by number or through ``/proc/self/fd``) and read any byte of the kernel's
memory (``gc.get_objects()``, ``ctypes.string_at``). So no descriptor can be hidden from it, and no key the
kernel holds can authenticate frames (an HMAC over each frame with a per-run key would sign the learner's
forgeries just as well: the key sits in the same address space). What the monitor does instead is to decide
nothing that matters on a frame learner code could have written:

- the one statement that makes a result the *grader's* failure, "the jail could not be built", travels on a
  *setup pipe* of its own. The kernel writes ``ready`` (or why a step failed) on it after its last jail step
  and closes it before the first cell; the monitor reads that one frame and closes its end too. No learner
  code has run while that pipe was open, and no descriptor of it is left for learner code to reach (the
  monitor's own end is closed, and ``/proc/<monitor>/fd`` is out of reach: another pid namespace, or
  Landlock's ptrace restriction at the process level);
- everything on the *result pipe* is the learner's data: progress, an ``abort`` (the kernel's Python broke)
  and the result itself may all be forged, and each ends in the learner's zero with a reason at worst, never
  in status ``error``. A reason quotes no learner text: the exception a broken kernel names is said from a fixed
  list, and what it wrote is passed on as ``learner_said`` (:func:`broke_python`);
- sizes are capped on raw bytes before anything is decoded: frames above :data:`SMALL` are not decoded while
  the kernel runs, only kept (at most one, the result, under the cap from the limits). After the kernel has
  exited (its memory freed), the result is decoded once here under an address-space budget of a few times its
  size plus twice the kernel's own budgets (:func:`decode_budget`; 100 MB of ``9e15,`` needs over 600 MB of
  float objects, :func:`_decodes_within`) and then forwarded to
  the Engine as the same bytes, never re-encoded; the Engine decodes it again knowing it fits.

Forged results with valid shape are still possible, and harmless by construction: the trusted side decides
every check from the recorded values against the reference (:mod:`autograder.trusted`), so a forged record
earns only what the learner could have computed (tests/hostile: ``forge_result_channel``).
"""
from __future__ import annotations

import os
import resource
import signal
import threading
import time

from . import jail, runner
from .framing import (HEADER, ProtocolError, decode, decode_result, read_exact, read_frame, write_frame,
                      write_raw_frame)
from ..learner_text import last_line, one_line, raised_name

SMALL = 1 << 16  # frames up to this size are decoded as they arrive (progress, abort, a small result)
INTERFERED = "the notebook interfered with the grader's result channel"


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def monitor_main(proto_in: int, proto_out: int, setup: dict) -> None:
    """The monitor: read one job, run it in a fresh sandbox, write one report frame (and the result's raw bytes
    after it when the report says ``result_bytes``), exit."""
    report, raw = {"status": "error", "reason": "the monitor failed", "cells": {}, "last_cell": None}, None
    try:
        job = read_frame(proto_in, 1 << 30)
        if job is None:
            os._exit(0)
        report, raw = _monitor(job, setup)
    except Exception as exc:  # noqa: BLE001 - reported to the Engine as a grader failure
        report = {"status": "error", "reason": one_line(f"sandbox error: {type(exc).__name__}: {exc}"), "cells": {},
                  "last_cell": None}
        raw = None
    try:
        if raw is not None:
            report["result_bytes"] = len(raw)
        write_frame(proto_out, report)
        if raw is not None:
            write_raw_frame(proto_out, raw)
    finally:
        os._exit(0)


def _monitor(job: dict, setup: dict) -> tuple[dict, bytes | None]:
    limits = job["limits"]
    started = time.monotonic()
    deadline = started + float(limits["notebook_timeout_s"])
    pol = setup["policy"]
    j = jail.Jail(policy=pol, limits=limits, state_dir=setup["state_dir"], root=setup["root"],
                  cgroup_backend=setup["cgroup"], mode=job.get("grading_mode", "sandbox"))
    try:
        jail.run_steps(j, pol.monitor_steps)
        go_r, go_w = os.pipe()
        res_r, res_w = os.pipe()
        setup_r, setup_w = os.pipe()
        j.res_w, j.setup_w = res_w, setup_w
        pid = os.fork()
        if pid == 0:
            try:
                os.close(go_w)
                os.close(res_r)
                os.close(setup_r)
                _kernel_main(job, j, go_r)
            except BaseException as exc:  # noqa: BLE001 - say what broke, then die (learner code has run)
                try:
                    import builtins

                    builtins.__dict__.update(runner.PRISTINE_BUILTINS)
                    import traceback as _tb

                    where = "".join(_tb.format_exception(exc)[-3:])[-1500:]
                    write_frame(res_w, {"abort": f"{type(exc).__name__}: {where}"})
                except BaseException:  # noqa: BLE001
                    pass
                os._exit(4)
            os._exit(0)
        os.close(go_r)
        os.close(res_w)
        os.close(setup_w)
        j.group.add(pid)
        os.write(go_w, b"g")
        os.close(go_w)
        failed = _setup_failure(pid, setup_r, deadline)
        if failed is not None:
            os.close(res_r)
            return failed, None
        if pol.level == "process":  # nothing the kernel started may hold the result pipe open after it ends
            threading.Thread(target=_reap_when_kernel_ends, args=(pid,), daemon=True).start()
        report, raw = _watch(pid, res_r, deadline, limits, j.group, started)
        if pol.level == "process":
            jail.kill_descendants(os.getpid())
        return report, raw
    finally:
        j.cleanup()


def _setup_failure(pid: int, setup_r: int, deadline: float) -> dict | None:
    """None once the kernel says its jail is built (learner code runs next); else the grader's error report.

    Read before anything on the result pipe; the monitor's end is closed here, so nothing can reach the pipe
    afterwards."""
    why = ""
    try:
        frame = read_frame(setup_r, SMALL, deadline)
    except TimeoutError:
        frame, why = None, "the kernel did not finish building its jail in time"
    except ProtocolError as exc:
        frame, why = None, str(exc)
    finally:
        os.close(setup_r)
    if isinstance(frame, dict) and frame.get("ready") is True:
        return None
    if isinstance(frame, dict) and "abort" in frame:
        why = str(frame["abort"])
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    if not why:
        why = f"the kernel ended before its jail was built ({_ended(status)})"
    return {"status": "error", "reason": "sandbox setup failed: " + last_line(why, 500), "detail": one_line(why, 2000),
            "cells": {}, "last_cell": None}


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return _signal_name(os.WTERMSIG(status))
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _reap_when_kernel_ends(pid: int) -> None:
    """Process level: once the kernel has exited (a zombie not yet reaped), kill what it left behind."""
    while True:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            jail.kill_descendants(os.getpid(), spare=pid)
            return
        time.sleep(0.05)


def _kernel_main(job: dict, j: jail.Jail, go_r: int) -> None:
    """In the kernel: wait for the monitor (the kernel must be in its cgroup first), lock down, say so on the
    setup pipe and close it, run the cells."""
    if os.read(go_r, 1) != b"g":
        os._exit(3)
    os.close(go_r)
    try:
        jail.run_steps(j, j.policy.kernel_steps)
    except BaseException as exc:  # noqa: BLE001 - no learner code has run: the grader's own failure
        try:
            write_frame(j.setup_w, {"abort": f"{type(exc).__name__}: {exc}"[-1500:]})
        finally:
            os._exit(4)
    write_frame(j.setup_w, {"ready": True})
    os.close(j.setup_w)
    j.setup_w = -1
    runner.run_cells(job, j.res_w)
    os._exit(0)


def result_cap(limits: dict) -> int:
    """The largest result frame, in raw bytes: what the kernel's own budgets allow, with room for encoding."""
    return int((limits["max_output_mb"] + limits.get("max_record_mb", 64)) * (1 << 20) * 1.5) + (1 << 20)


def decode_budget(size: int, limits: dict) -> int:
    """Bytes of address space a result of ``size`` raw bytes may take to decode: four times its size, plus twice
    the kernel's own output and record budgets (which charge each output and container what it costs decoded,
    :mod:`.runner`, so an honest result always fits)."""
    return 4 * size + int(2 * (limits["max_output_mb"] + limits.get("max_record_mb", 64)) * (1 << 20))


def _vm_size() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) << 10
    return 0


def _decodes_within(raw: bytes, budget: int) -> str:
    """"" when ``raw`` is a result that decodes within ``budget`` more bytes of address space; else why not.

    RLIMIT_AS is lowered (soft limit, this process only: the kernel has exited) for the decode and restored."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_size() + budget
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        decode_result(raw)
        return ""
    except MemoryError:
        return f"the result of {len(raw)} bytes does not decode within {budget >> 20} MB"
    except ProtocolError as exc:
        return str(exc)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _read_frames(res_r: int, deadline: float, cap: int) -> dict:
    """Every frame on the result pipe until EOF, the deadline or a frame that is not one: what they said.

    Frames up to SMALL bytes are decoded (strictly); a larger one is only kept, as the result candidate."""
    got = {"done": None, "last_cell": None, "abort": "", "protocol": "", "timed_out": False}
    while True:
        try:
            header = read_exact(res_r, HEADER.size, deadline)
            if header is None:
                return got
            (size,) = HEADER.unpack(header)
            if size > cap:
                got["protocol"] = f"frame of {size} bytes exceeds the cap of {cap}"
                return got
            data = read_exact(res_r, size, deadline) if size else b""
            if data is None:
                raise ProtocolError("stream ended inside a frame")
            frame = decode(data) if size <= SMALL else {"done": True}
        except TimeoutError:
            got["timed_out"] = True
            return got
        except ProtocolError as exc:
            got["protocol"] = str(exc)
            return got
        if not isinstance(frame, dict):
            got["protocol"] = "unexpected frame"
            return got
        if frame.get("done") is True:
            if got["done"] is not None:
                got["protocol"] = "more than one result"
                return got
            got["done"] = data
        elif "progress" in frame:
            cell = frame["progress"]
            got["last_cell"] = cell if isinstance(cell, int) and not isinstance(cell, bool) else None
        elif "abort" in frame:
            got["abort"] = str(frame["abort"])[:2000]
        else:
            got["protocol"] = "unexpected frame"
            return got


def _watch(pid: int, res_r: int, deadline: float, limits: dict, cgroups, started: float) -> tuple[dict, bytes | None]:
    got = _read_frames(res_r, deadline, result_cap(limits))
    timed_out, protocol, done, abort = got["timed_out"], got["protocol"], got["done"], got["abort"]
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
    if done is not None and not protocol:  # decoded only now: the kernel has exited and its memory is free
        protocol = _decodes_within(done, decode_budget(len(done), limits))
    seconds = time.monotonic() - started
    report = {"cells": {}, "last_cell": got["last_cell"], "seconds": seconds, "memory_peak_mb": cgroups.memory_peak_mb()}
    oom, pids_hit = cgroups.oom_killed(), cgroups.pids_limit_hit()
    if timed_out:
        report.update(status="zero", reason=f"timeout: notebook exceeded {float(limits['notebook_timeout_s']):g} s")
    elif oom:
        report.update(status="zero", reason=f"kernel died (out of memory: limit {int(limits['memory_mb'])} MB)")
    elif pids_hit:
        report.update(status="zero", reason=f"process limit exceeded: the notebook tried to run more than "
                                            f"{int(limits['max_procs'])} processes or threads (fork bomb?)")
    elif protocol:
        report.update(status="zero", reason=INTERFERED, detail=one_line(protocol))
    elif done is None:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            what = "segfault" if sig == signal.SIGSEGV else _signal_name(sig)
            report.update(status="zero", reason=f"kernel died ({what})")
        elif abort:  # learner code has run (the setup pipe said so): whatever broke, it is the notebook's
            report.update(broke_python(abort))
        else:
            report.update(status="zero", reason=f"kernel died (exited with status {os.waitstatus_to_exitcode(status)} "
                                                f"before the notebook finished)")
    else:
        report.update(status="ok", reason="")
        return report, done
    return report, None


BROKE_PYTHON = "kernel died (the notebook broke the Python it runs in: {name})"
ABORT_TEXT = "what the kernel sent when it broke"


def broke_python(abort: str) -> dict:
    """The report of a kernel whose Python the notebook broke, from the ``abort`` frame it sent: learner text,
    forged or not. The reason names the exception from a fixed list (learner_text.exception_name) and quotes
    nothing else; the text goes to ``learner_said``, under a label of the grader's (issue 41, class 7)."""
    return {"status": "zero", "reason": BROKE_PYTHON.format(name=raised_name(abort)),
            "learner_said": [[ABORT_TEXT, one_line(abort, 2000)]]}


def read_report(report, raw: bytes | None) -> dict:
    """The monitor's report as the Engine uses it (``raw``: the result's bytes that followed it, if any).

    ``ok`` carries the decoded result (``cells``, ``truncated``); a result that does not decode is the learner's
    zero; every reason is one line without control characters, and the grader's own words (what the kernel said is
    only ever in ``learner_said``)."""
    if not isinstance(report, dict) or report.get("status") not in ("ok", "zero", "error"):
        report = {"status": "error", "reason": "the monitor's report is not one"}
    out = dict(report, reason=one_line(report.get("reason", ""), 1000), cells={}, truncated=False)
    out.pop("result_bytes", None)
    if out["status"] == "ok":
        try:
            if raw is None:
                raise ProtocolError("no result")
            out.update(decode_result(raw))
        except ProtocolError as exc:
            out.update(status="zero", reason=INTERFERED, detail=one_line(exc))
    return out
