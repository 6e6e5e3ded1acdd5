"""A seccomp filter for the kernel process, built with libseccomp (through ctypes; no Python binding needed).

What it refuses (EPERM, so learner code sees an ordinary ``PermissionError``):

- sockets: ``socket`` for every address family (``socketpair`` stays: it reaches nothing outside);
- tracing other processes: ``ptrace``, ``process_vm_readv``/``writev``, ``pidfd_getfd``;
- new namespaces and mounts: ``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*`` flag, ``mount``,
  ``umount2``, ``pivot_root``, ``chroot`` and the new mount API (``open_tree``, ``move_mount``, ``fsopen``...);
- kernel surfaces a notebook never needs: ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``,
  keyrings, module loading, ``kexec``, ``open_by_handle_at``, ``reboot``, ``swapon``/``swapoff``, ``acct``;
- System V IPC, every call (``shmget``, ``shmat``, ``shmdt``, ``shmctl``, ``msgget``, ``msgsnd``, ``msgrcv``,
  ``msgctl``, ``semget``, ``semop``, ``semtimedop``, ``semctl``, and the ``ipc`` multiplexer where an
  architecture has one). Its objects outlive the process that made them and are charged to no cgroup: at the
  process level, which has no IPC namespace, a notebook left 3 GB of shared memory on the host. Refused at
  every level, not only the process level, so that a notebook behaves the same wherever it is graded, and so
  that no level lets a kernel attach to (``shmat``) or read (``msgrcv``) the host's existing objects by id.
  Nothing a notebook of this course imports uses it (torch and multiprocessing use POSIX shared memory,
  files under ``/dev/shm``).

A job whose limits say it may start no process (a memory budget's: ``refuse_processes``, from
:func:`.policy.seccomp_options`) also has every new process and every new program refused: ``fork``, ``vfork``,
``clone`` without ``CLONE_THREAD`` (what glibc's ``fork``, ``posix_spawn`` and ``subprocess`` use), ``execve``
and ``execveat``. Threads are still made (``clone`` with ``CLONE_THREAD``; torch uses them) and share the
process's limits. An rlimit such as ``RLIMIT_AS`` is per process: without this, a child process (a fresh Python,
or a fork) would have a budget of its own.

``clone3`` answers ENOSYS: its flags live in memory a filter cannot read, and ENOSYS makes glibc fall back to
``clone``, whose flags the filter does check. libseccomp resolves syscall names and the architecture (so the
same code works on x86-64 and arm64); chosen over a hand-assembled BPF program for that reason, and over the
PyPI bindings because the system library (a dependency of systemd, present on every distribution) is all
that is needed.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno

ACT_ALLOW = 0x7FFF0000
CMP_MASKED_EQ = 7
CLONE_THREAD = 0x00010000
NAMESPACE_FLAGS = (0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x02000000,
                   0x00000080)  # NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWCGROUP, NEWTIME

SYSV_IPC = ("shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
            "semtimedop", "semctl", "ipc")
DENIED = ("socket", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
          "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
          "fsconfig", "fsmount", "fspick", "mount_setattr",
          "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
          "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
          "kexec_file_load", "open_by_handle_at", "reboot", "swapon", "swapoff", "acct",
          *SYSV_IPC)


# every way to a new process or a new program, where a job may start none (clone: without CLONE_THREAD, in build)
PROCESSES = ("fork", "vfork", "execve", "execveat")


def act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _lib():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def available() -> bool:
    return _lib() is not None


def build(denied=DENIED, refuse_namespaces: bool = True, lib=None, refuse_processes: bool = False):
    """A libseccomp context holding the policy; the caller loads it (:func:`load`). ``refuse_processes``: no new
    process and no new program either (:data:`PROCESSES`, and ``clone`` without ``CLONE_THREAD``)."""
    lib = lib or _lib()
    if lib is None:
        raise OSError(errno.ENOENT, "libseccomp is not installed")
    ctx = lib.seccomp_init(ACT_ALLOW)
    if not ctx:
        raise OSError(errno.EINVAL, "seccomp_init failed")

    def rule(action: int, name: str, cmps=()) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # unknown on this architecture or libseccomp version: nothing to refuse
            return
        arr = (_ArgCmp * max(1, len(cmps)))(*cmps)
        ret = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
        if ret < 0:
            raise OSError(-ret, f"seccomp rule for {name}: {errno.errorcode.get(-ret, ret)}")

    for name in denied:
        rule(act_errno(errno.EPERM), name)
    if refuse_namespaces:
        for flag in NAMESPACE_FLAGS:
            rule(act_errno(errno.EPERM), "clone", [_ArgCmp(0, CMP_MASKED_EQ, flag, flag)])
    if refuse_namespaces or refuse_processes:
        rule(act_errno(errno.ENOSYS), "clone3")
    if refuse_processes:
        for name in PROCESSES:
            rule(act_errno(errno.EPERM), name)
        # (flags & CLONE_THREAD) == 0: a new process, whatever else it shares; a thread stays in this one
        rule(act_errno(errno.EPERM), "clone", [_ArgCmp(0, CMP_MASKED_EQ, CLONE_THREAD, 0)])
    return lib, ctx


def load(denied=DENIED, refuse_namespaces: bool = True, refuse_processes: bool = False) -> None:
    """Install the filter on this thread (and everything it starts). Sets no_new_privs itself."""
    lib, ctx = build(denied, refuse_namespaces, refuse_processes=refuse_processes)
    try:
        ret = lib.seccomp_load(ctx)
        if ret < 0:
            raise OSError(-ret, f"seccomp_load: {errno.errorcode.get(-ret, ret)}")
    finally:
        lib.seccomp_release(ctx)


NAMESPACE_REFUSAL = ("unshare", "setns")  # what a container runtime's default profile refuses (Docker's does)
