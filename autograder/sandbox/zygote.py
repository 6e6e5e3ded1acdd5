"""The zygote: imports torch, numpy, matplotlib, IPython and attention_course once, probes which isolation
level it can reach, then forks one monitor per job (``j`` on stdin) until ``q`` or EOF. It runs no learner
code; the monitor is forked before the job is read, so no learner's notebook ever enters its memory. ``w`` and a
frame listing module names: make those of runner.WARM_UPS, imports a kernel made lazily, once for the kernels after.

``python -m autograder.sandbox [--isolation auto|root|user|process] [--require LEVEL]``
"""
from __future__ import annotations

import argparse
import os
import signal
import stat

from . import levels, runner
from .framing import ProtocolError, read_exact, read_frame, write_frame
from .monitor import monitor_main

ROOT_STATE_DIR = "/run/attention-course-sandbox"


def state_dir() -> str:
    """This account's private folder for uid locks, the private root's mount point and scratch folders."""
    if os.geteuid() == 0:
        path = ROOT_STATE_DIR
    else:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        base = runtime if runtime and os.access(runtime, os.W_OK) else "/tmp"
        path = os.path.join(base, f"attention-course-sandbox-{os.geteuid()}")
    os.makedirs(path, mode=0o711, exist_ok=True)
    st = os.lstat(path)  # in a shared /tmp: ours, a real folder, not listable by others
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise RuntimeError(f"{path} is not a folder owned by this account")
    os.chmod(path, 0o711)  # traversable: a process-level kernel under a sandbox uid reaches its scratch folder
    return path


def zygote_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.sandbox")
    parser.add_argument("--isolation", default="auto")
    parser.add_argument("--require", default=None)
    args = parser.parse_args(argv)
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # a stray print never reaches the protocol
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    runner.init_shell()
    state = state_dir()
    root = os.path.join(state, "root")
    os.makedirs(root, mode=0o755, exist_ok=True)
    found = levels.probe(state)
    try:
        level = levels.choose(found, args.isolation, args.require)
    except levels.Unreachable as exc:
        write_frame(proto_out, {"ready": False, "error": str(exc), "reachable": levels.reachable(found)})
        return 0
    found["cgroup"].sweep()
    setup = {"policy": levels.policy_for(level, found), "state_dir": state, "root": root, "cgroup": found["cgroup"]}
    write_frame(proto_out, {"ready": True, "isolation": levels.describe(level, found),
                            "reachable": levels.reachable(found), "pid": os.getpid()})
    while True:
        try:
            command = read_exact(proto_in, 1)
        except ProtocolError:
            return 0
        if command is None or command == b"q":
            return 0
        if command == b"w":  # the Engine: a kernel made these lazy imports; make them here once (runner.WARM_UPS)
            try:
                names = read_frame(proto_in, 4096)
            except (ProtocolError, ValueError):
                return 0
            runner.warm(names if isinstance(names, list) else [])
            continue
        pid = os.fork()
        if pid == 0:
            monitor_main(proto_in, proto_out, setup)
            os._exit(0)
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
