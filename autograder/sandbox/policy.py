"""The jail as data: what each isolation level gives, as a :class:`Policy` of named steps and their inputs.

:mod:`.jail` owns the steps (one function per name); the monitor runs ``monitor_steps`` before it forks
the kernel, the kernel runs ``kernel_steps`` on itself, in order, before any learner code. The levels,
strongest first (``LEVELS``):

``root``
    root on the host. Mount, network, pid, IPC and UTS namespaces; a private root file system of read-only
    binds (``binds``) with a size-limited tmpfs ``/scratch``; a per-sandbox uid that is no real account;
    memory, process and CPU limits from cgroup v1 or v2 (:mod:`.cgroups`); rlimits; the seccomp filter.
``user``
    an ordinary account with unprivileged user namespaces: the same namespaces and private root inside a
    user namespace that maps the account's uid to 0 and nothing else; the kernel then drops every
    capability (uid 0 of that namespace holds none). Limits from a delegated cgroup v2 subtree when the
    account has one, else rlimits only. Seccomp filter.
``process``
    no namespaces at all (refused by seccomp, AppArmor or gVisor, or asked for): a separate process per
    notebook in a session of its own, rlimits, the seccomp filter, and Landlock for the file system
    (read-only beneath ``binds``, writable beneath a scratch folder, nothing else readable) where the kernel
    offers it; as root also a per-sandbox uid and cgroups.

Without a memory cgroup the address space is capped by ``RLIMIT_AS`` (the zygote's size plus
``memory_mb``): the learner's allocation fails with MemoryError/RuntimeError instead of the kernel being
killed. Without a pids cgroup ``RLIMIT_NPROC`` caps processes and threads: ``fork`` fails with EAGAIN.

A job whose limits say ``processes: False`` (a memory budget's job: autograder/memory_budget.py) may start no
process and no program, at every level: the seccomp step refuses them (:func:`seccomp_options`). An rlimit
holds per process, so this is what makes ``RLIMIT_AS`` the budget of everything the job runs; a cgroup already
counts the whole tree, and gets the same refusal so that a notebook behaves the same at every level. Where
there is no seccomp filter and no cgroup, nothing could hold such a job to its budget: the
``single_process`` step refuses to start it (the grader's failure, with that reason), never runs it unbounded.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

LEVELS = ("root", "user", "process")  # strongest first
RANK = {name: len(LEVELS) - i for i, name in enumerate(LEVELS)}
DEVICES = ("null", "zero", "random", "urandom", "full")
SCRATCH = "/scratch"  # where the scratch folder is, inside a private root
# The only parts of /etc a kernel sees (bound into the private root at the root and user levels, readable
# under Landlock at the process level). A kernel whose uid is host root's (the user level run by root maps
# its namespace's root to uid 0; the process level may keep uid 0) would otherwise read /etc/shadow and the
# like through the owner's permission bits.
ETC_READABLE = tuple("/etc/" + name for name in (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "passwd", "group",
    "hosts", "host.conf", "gai.conf", "mime.types", "ssl", "ca-certificates", "fonts", "matplotlibrc",
    "alternatives"))


def bind_sources() -> tuple[str, ...]:
    """Host paths the kernel may read: the OS, Python, the venv, attention_course and the allowed files of /etc
    (never the course tree, never the rest of /etc)."""
    import attention_course

    paths = ["/usr", os.path.realpath(sys.base_prefix), sys.prefix,
             os.path.dirname(os.path.abspath(attention_course.__file__))]
    out = []
    for p in sorted(paths, key=len):
        if os.path.isdir(p) and p not in out:
            out.append(p)
    return (*out, *(p for p in ETC_READABLE if os.path.exists(p)))


@dataclass(frozen=True)
class Policy:
    level: str
    monitor_steps: tuple[str, ...]
    kernel_steps: tuple[str, ...]
    binds: tuple[str, ...] = ()  # read-only (bind mounts or Landlock read rules)
    links: tuple[str, ...] = ("/bin", "/lib", "/lib32", "/lib64", "/sbin")  # symlinks or extra read-only binds
    devices: tuple[str, ...] = DEVICES
    read_only_extra: tuple[str, ...] = ()  # Landlock only: readable, never bound (e.g. /proc)


def environment(scratch: str, mode: str) -> dict:
    """The kernel's whole environment (nothing of the grader's leaks in)."""
    venv_bin = os.path.join(sys.prefix, "bin")
    return {"HOME": scratch, "TMPDIR": scratch, "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8", "ATTENTION_COURSE_GRADING": mode, "ATTENTION_COURSE_DEVICE": "cpu",
            "MPLBACKEND": "module://matplotlib_inline.backend_inline", "MPLCONFIGDIR": f"{scratch}/.matplotlib",
            "IPYTHONDIR": f"{scratch}/.ipython", "OMP_NUM_THREADS": "1", "USER": "learner",
            # run_cells seeds every graded test cell itself; Checks must not reseed on top
            "ATTENTION_COURSE_CELL_SEEDING": "engine"}


def rlimits(limits: dict, *, nproc_base: int, as_base_mb: float | None) -> dict[str, tuple[int, int]]:
    """The rlimits of a kernel: ``nproc_base`` tasks it does not own count against RLIMIT_NPROC;
    ``as_base_mb`` is the address space it starts with where no cgroup limits it (None: a cgroup does)."""
    import resource

    procs = int(limits["max_procs"])
    fsize = int(limits.get("scratch_mb", 64)) << 20
    cpu = int(float(limits["notebook_timeout_s"])) + 10
    out = {"RLIMIT_CORE": (0, 0), "RLIMIT_FSIZE": (fsize, fsize), "RLIMIT_CPU": (cpu, cpu + 5),
           "RLIMIT_NOFILE": (1024, 1024),
           "RLIMIT_NPROC": (nproc_base + procs, nproc_base + procs)}
    if as_base_mb is None:
        # a cgroup limits memory and processes, and reports hitting them; stay above its pids limit
        out["RLIMIT_NPROC"] = (nproc_base + procs + 32, nproc_base + procs + 32)
    else:
        cap = int((as_base_mb + float(limits["memory_mb"])) * (1 << 20))
        out["RLIMIT_AS"] = (cap, cap)
    return {k: v for k, v in out.items() if hasattr(resource, k)}


def others_can_reach(path: str) -> bool:
    """True when an account that is not the owner can traverse to ``path`` and read it (mode bits only)."""
    import stat

    parts = os.path.abspath(path).split("/")
    for i in range(2, len(parts) + 1):
        try:
            mode = os.stat("/".join(parts[:i]) or "/").st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH or (i == len(parts) and not mode & stat.S_IROTH):
            return False
    return True


def seccomp_options(limits: dict) -> dict:
    """The seccomp step's inputs for a job: ``refuse_processes`` where its limits say it may start no process."""
    return {"refuse_processes": not limits.get("processes", True)}


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
RELEASE_FROM_BYTES = 64 << 10


def allocator_options(limits: dict) -> dict[int, int]:
    """The ``allocator`` step's mallopt settings for a job: none, unless its limits say freed memory must go back to
    the operating system at once (a memory budget's job: ``release_freed_memory``).

    glibc serves a large block with mmap and unmaps it on free, but only until the first such block is freed: from
    then on its threshold rises to that block's size and blocks of that size come from the heap, which keeps the
    pages a freed block leaves between blocks still in use. A correct tiled attention that kept its small output
    tiles in a list between 512 KiB score tiles (issue 43) left the heap at 49 to over 64 MiB in a budget job whose
    tensors never held 5 MiB at once (the reference, writing each tile into one preallocated output: 25 MiB), and
    a budget's cgroup counts those pages. Fixed thresholds keep every block of 64 KiB or more out of the heap."""
    if not limits.get("release_freed_memory", False):
        return {}
    return {M_MMAP_THRESHOLD: RELEASE_FROM_BYTES, M_TRIM_THRESHOLD: RELEASE_FROM_BYTES}


def for_level(level: str, root: bool, cgroup: bool, landlock: bool, seccomp: bool) -> Policy:
    """The policy of ``level`` for this account (root or not) and what this kernel offers.

    At the process level as root the kernel takes a sandbox uid when that uid can read Python and the
    venv; where it cannot (a Python under /root), it keeps uid 0 with every capability dropped, and
    Landlock is what keeps it to its paths."""
    if level not in LEVELS:
        raise ValueError(f"unknown isolation level {level!r}: one of {', '.join(LEVELS)}")
    # without seccomp or a cgroup, a job that may start no process cannot be held to that (policy docstring)
    tail = (("no_new_privs", "allocator") + (("seccomp",) if seccomp else () if cgroup else ("single_process",))
            + ("environment",))
    cg = ("cgroup",) if cgroup else ()
    if level == "root":
        return Policy(level, ("uid_slot", *cg, "namespaces", "root_filesystem"),
                      ("proc", "chroot", "descriptors", "rlimits", "slot_uid", *tail), binds=bind_sources())
    if level == "user":
        return Policy(level, (*cg, "user_namespace", "root_filesystem"),
                      ("proc", "chroot", "descriptors", "rlimits", "drop_capabilities", *tail), binds=bind_sources())
    binds = bind_sources()
    identity = ()
    if root:
        identity = ("slot_uid",) if all(others_can_reach(p) for p in binds) else ("drop_capabilities",)
    return Policy(level, (*(("uid_slot",) if identity == ("slot_uid",) else ()), *cg, "scratch_folder", "subreaper"),
                  ("session", "descriptors", "rlimits", *(("landlock_rules",) if landlock else ()), *identity,
                   "no_new_privs", *(("landlock",) if landlock else ()), *tail[1:]),
                  binds=tuple(p for p in binds if not p.startswith("/etc/")), read_only_extra=("/proc", *ETC_READABLE))
