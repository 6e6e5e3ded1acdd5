"""Landlock (Linux 5.13+): file-system access for the kernel process when there are no namespaces.

The kernel may then read and execute beneath the paths the policy lists (the OS, Python, the virtual
environment, the ``attention_course`` package, ``/proc``) and do anything beneath its scratch folder; every
other path, the course tree (solutions, gradebook, other learners' submissions) included, cannot even be
listed. Where the kernel's Landlock ABI has them, TCP bind/connect (ABI 4) and signals and abstract UNIX
sockets outside the sandbox (ABI 6) are refused too. Direct system calls (ctypes): three of them, no
dependency.
"""
from __future__ import annotations

import ctypes
import os

from .syscalls import syscall

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
VERSION_FLAG, RULE_PATH_BENEATH = 1, 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
READ = EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)  # + TRUNCATE (ABI 3), IOCTL_DEV (ABI 5)


def abi() -> int:
    """The Landlock ABI version this kernel offers; 0 where it has none (or it is disabled)."""
    try:
        return syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(VERSION_FLAG))
    except OSError:
        return 0


def handled_fs(version: int) -> int:
    bits = (1 << 13) - 1  # EXECUTE .. MAKE_SYM (ABI 1)
    if version >= 2:
        bits |= 1 << 13  # REFER
    if version >= 3:
        bits |= 1 << 14  # TRUNCATE
    if version >= 5:
        bits |= 1 << 15  # IOCTL_DEV
    return bits


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class Ruleset:
    """Rules built now (while the paths can still be opened), enforced later by :meth:`enforce`.

    Paths that do not exist are skipped; enforcing needs no_new_privs set first."""

    def __init__(self, read_paths, write_paths, device_files=()):
        self.version = abi()
        if self.version <= 0:
            raise OSError(38, "Landlock is not available on this kernel")
        fs = handled_fs(self.version)
        attr = _RulesetAttr(fs, 3 if self.version >= 4 else 0, 3 if self.version >= 6 else 0)
        size = 8 if self.version < 4 else (16 if self.version < 6 else 24)
        self.fd = syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        for paths, access in ((read_paths, READ), (write_paths, fs), (device_files, READ_FILE | WRITE_FILE)):
            for path in paths:
                self._add(path, access & fs)

    def _add(self, path: str, allowed: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                allowed &= FILE_ONLY
            rule = _PathBeneath(allowed, fd)
            syscall(ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule),
                    ctypes.c_uint32(0))
        finally:
            os.close(fd)

    def enforce(self) -> None:
        try:
            syscall(RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0))
        finally:
            os.close(self.fd)
