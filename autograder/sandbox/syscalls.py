"""The few Linux system calls the jail needs that Python 3.11's ``os`` lacks, through libc (ctypes)."""
from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x04000000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP = 0x20000000, 0x40000000, 0x02000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24

PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 24, 28
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
# securebits: NOROOT and NO_SETUID_FIXUP (uid 0 gains no capabilities), each locked, and KEEP_CAPS locked off
SECURE_ALL = 0x2F  # NOROOT, NOROOT_LOCKED, NO_SETUID_FIXUP, NO_SETUID_FIXUP_LOCKED, KEEP_CAPS_LOCKED


def check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)), "prctl")


def syscall(number: int, *args) -> int:
    """A raw system call; returns the result or raises OSError."""
    ret = _libc.syscall(ctypes.c_long(number), *args)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def locked_flags(path: str) -> int:
    """The mount flags of ``path`` a user namespace may not clear on a bind remount (the kernel locks them)."""
    st = os.statvfs(path).f_flag
    flags = 0
    for st_bit, ms_bit in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                           (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                           (getattr(os, "ST_RELATIME", 4096), MS_RELATIME)):
        if st & st_bit:
            flags |= ms_bit
    return flags


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    """Empty bounding set, no securebit exemptions for uid 0, and no effective/permitted/inheritable caps.

    In a user namespace the kernel is uid 0 of that namespace; without this it would hold every capability
    over its own mounts (and could remount the read-only binds writable)."""
    last = 40
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        pass
    for cap in range(last + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            pass
    prctl(PR_SET_SECUREBITS, SECURE_ALL)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    check(_libc.capset(ctypes.byref(header), data), "capset")
