"""Which isolation level this account reaches on this machine, and an honest account of what it lacks.

:func:`probe` tries each mechanism for real (in throwaway child processes): namespaces as root, an
unprivileged user namespace with a tmpfs and a ``/proc`` mounted inside, seccomp (libseccomp), Landlock
and the cgroup backend (:func:`.cgroups.choose`). :func:`choose` picks the strongest level the probe
allows (``auto``), or exactly the one asked for, and refuses a level below ``require``.
"""
from __future__ import annotations

import os

from . import cgroups, landlock, policy, seccomp
from .syscalls import CLONE_NEWUSER, MS_PRIVATE, MS_REC, NAMESPACES, mount, unshare


class Unreachable(Exception):
    """The level asked for (or required) cannot be reached here; the message says why, in one line."""


def _in_child(fn) -> bool:
    """Run ``fn`` in a forked child; True when it returned without raising."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException:  # noqa: BLE001 - any failure means "not available"
            pass
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _user_namespace_works(scratch: str) -> bool:
    uid, gid = os.geteuid(), os.getegid()

    def attempt():
        unshare(CLONE_NEWUSER | NAMESPACES)
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
        mount("none", "/", None, MS_REC | MS_PRIVATE)
        mount("tmpfs", scratch, "tmpfs", 0, "size=1m")
        os.mkdir(scratch + "/proc")

        def in_pid_namespace():  # AppArmor or a masked /proc (containers) refuse this part
            mount("proc", scratch + "/proc", "proc", 0)

        if not _in_child(in_pid_namespace):
            raise OSError("cannot mount /proc in a new pid namespace")

    return _in_child(attempt)


def probe(state_dir: str) -> dict:
    """What this account can use here (each mechanism tried for real, in throwaway children)."""
    root = os.geteuid() == 0
    namespaces = root and _in_child(lambda: unshare(NAMESPACES))
    mnt = os.path.join(state_dir, "probe")
    os.makedirs(mnt, exist_ok=True)
    userns = _user_namespace_works(mnt)
    backend, cgroup_reasons = cgroups.choose()
    return {"root": root, "namespaces": namespaces, "user_namespace": userns, "seccomp": seccomp.available(),
            "landlock": landlock.abi(), "cgroup": backend, "cgroup_reasons": cgroup_reasons}


def reachable(found: dict) -> list[str]:
    out = []
    if found["root"] and found["namespaces"]:
        out.append("root")
    if found["user_namespace"]:
        out.append("user")
    out.append("process")
    return out


def describe(level: str, found: dict) -> dict:
    """``{"level", "cgroup", "label", "lacks": [...]}``: the label is short (it goes into the gradebook)."""
    backend = found["cgroup"]
    has_cgroup = backend.name != "none"
    lacks = []
    if not has_cgroup:
        lacks.append("no cgroup: memory limited by RLIMIT_AS and processes by RLIMIT_NPROC (a notebook over a "
                     "limit sees an error instead of being stopped); memory budgets are not proven, so budget cells "
                     "earn no points (autograder/memory_budget.py)")
    if level == "process":
        lacks.append("no namespaces: the kernel shares the host's network stack, process table and file "
                     "system view (seccomp refuses sockets" + (")" if found["seccomp"] else " - but seccomp is "
                                                                                        "unavailable)"))
        if found["landlock"] <= 0:
            lacks.append("no Landlock: the kernel can read whatever this account can read (the course tree "
                         "and the gradebook included) and, where it keeps the grader's uid, open the grader's own pipes "
                         "through /proc/<pid>/fd")
        elif found["landlock"] < 6:
            lacks.append(f"Landlock ABI {found['landlock']} (< 6): signals to this account's other processes "
                         "are not refused")
        pol = policy_for(level, found)
        if not found["root"]:
            lacks.append("no per-sandbox uid: the kernel runs as this account")
        elif "drop_capabilities" in pol.kernel_steps:
            lacks.append("no per-sandbox uid (Python is not readable by other accounts): the kernel keeps uid 0 "
                         "without capabilities" + ("" if has_cgroup else ", and root's processes are not "
                                                                         "limited by RLIMIT_NPROC"))
        lacks.append("scratch is a folder on disk (per-file size limit only)")
    if not found["seccomp"]:
        lacks.append("no seccomp filter (libseccomp missing)")
    cg = backend.name if has_cgroup else "rlimits"
    extra = []
    if level == "process":
        extra.append(f"landlock ABI {found['landlock']}" if found["landlock"] > 0 else "no landlock")
    if found["seccomp"]:
        extra.append("seccomp")
    label = f"{level} ({', '.join([cg, *extra])})"
    return {"level": level, "cgroup": backend.name, "label": label, "lacks": lacks,
            "cgroup_reasons": list(found["cgroup_reasons"])}


def choose(found: dict, requested: str = "auto", require: str | None = None) -> str:
    levels = reachable(found)
    if requested == "auto":
        level = levels[0]
    else:
        if requested not in policy.LEVELS:
            raise Unreachable(f"unknown isolation level {requested!r}: auto, {', '.join(policy.LEVELS)}")
        if requested not in levels:
            raise Unreachable(f"isolation level {requested!r} is not reachable here: " + why_not(requested, found))
        level = requested
    if require:
        if require not in policy.LEVELS:
            raise Unreachable(f"unknown isolation level {require!r}: {', '.join(policy.LEVELS)}")
        if policy.RANK[level] < policy.RANK[require]:
            raise Unreachable(f"isolation {level!r} is below the required {require!r}: " + why_not(require, found))
    return level


def why_not(level: str, found: dict) -> str:
    if level == "root":
        return "not running as root" if not found["root"] else "the kernel refuses new namespaces"
    if level == "user":
        return ("unprivileged user namespaces are refused (sysctl kernel.unprivileged_userns_clone or "
                "user.max_user_namespaces, an AppArmor restriction, or a container's seccomp profile)")
    return ""


def policy_for(level: str, found: dict) -> policy.Policy:
    return policy.for_level(level, root=found["root"], cgroup=found["cgroup"].name != "none",
                            landlock=found["landlock"] > 0, seccomp=found["seccomp"])
