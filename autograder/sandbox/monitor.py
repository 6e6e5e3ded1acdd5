"""The monitor: one per notebook, forked by the zygote before the job is read. It builds the sandbox its
policy describes (:mod:`.jail`), forks the kernel, enforces the wall clock, and reports how the kernel
ended (result, exit status, signal, OOM kill, process limit, timeout) as one frame; the Engine turns that
into a score.

At the namespace levels the kernel is pid 1 of a new pid namespace, so killing it kills everything it
started. At the process level the monitor is a child subreaper and kills every descendant it has left.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from . import jail, runner
from .framing import ProtocolError, read_frame, write_frame


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def monitor_main(proto_in: int, proto_out: int, setup: dict) -> None:
    """The monitor: read one job, run it in a fresh sandbox, write one report frame, exit."""
    report = {"status": "error", "reason": "the monitor failed", "cells": {}, "last_cell": None}
    try:
        job = read_frame(proto_in, 1 << 30)
        if job is None:
            os._exit(0)
        report = _monitor(job, setup)
    except Exception as exc:  # noqa: BLE001 - reported to the Engine as a grader failure
        report = {"status": "error", "reason": f"sandbox error: {type(exc).__name__}: {exc}", "cells": {},
                  "last_cell": None}
    try:
        write_frame(proto_out, report)
    finally:
        os._exit(0)


def _monitor(job: dict, setup: dict) -> dict:
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
        j.res_w = res_w
        pid = os.fork()
        if pid == 0:
            try:
                os.close(go_w)
                os.close(res_r)
                _kernel_main(job, j, go_r)
            except BaseException as exc:  # noqa: BLE001 - say what broke, then die
                try:
                    import builtins

                    builtins.__dict__.update(runner._PRISTINE)
                    import traceback as _tb

                    where = "".join(_tb.format_exception(exc)[-3:])[-1500:]
                    write_frame(res_w, {"abort": f"{type(exc).__name__}: {where}"})
                except BaseException:  # noqa: BLE001
                    pass
                os._exit(4)
            os._exit(0)
        os.close(go_r)
        os.close(res_w)
        j.group.add(pid)
        os.write(go_w, b"g")
        os.close(go_w)
        if pol.level == "process":  # nothing the kernel started may hold the result pipe open after it ends
            threading.Thread(target=_reap_when_kernel_ends, args=(pid,), daemon=True).start()
        report = _watch(pid, res_r, deadline, limits, j.group, started)
        if pol.level == "process":
            jail.kill_descendants(os.getpid())
        return report
    finally:
        j.cleanup()


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
    """In the kernel: wait for the monitor (the kernel must be in its cgroup first), lock down, run the cells."""
    if os.read(go_r, 1) != b"g":
        os._exit(3)
    os.close(go_r)
    jail.run_steps(j, j.policy.kernel_steps)
    runner.run_cells(job, j.res_w)
    os._exit(0)


def _watch(pid: int, res_r: int, deadline: float, limits: dict, cgroups, started: float) -> dict:
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
        elif abort and last_cell is None:  # before the first cell: the jail failed, learner code never ran
            report.update(status="error", reason="sandbox setup failed: " + abort.strip().splitlines()[-1][:500],
                          detail=abort)
        elif abort:
            report.update(status="zero", reason="kernel died (the notebook broke the Python it runs in: "
                                                + abort.strip().splitlines()[-1][:300] + ")", detail=abort)
        else:
            report.update(status="zero", reason=f"kernel died (exited with status {os.waitstatus_to_exitcode(status)} "
                                                f"before the notebook finished)")
    else:
        report.update(status="ok", reason="", cells=done.get("cells", {}), truncated=bool(done.get("truncated")))
    return report
