"""System V IPC objects (shared memory, message queues, semaphore sets) of one uid, listed and removed.

They outlive the process that made them. The seccomp filter refuses every System V IPC call at every level
(:mod:`.seccomp`), and at the root and user levels the sandbox has an IPC namespace of its own, which the kernel
frees with it. This module is the second line at the process level as root, where the kernel runs under a
per-sandbox uid in the host's IPC namespace: after each sandbox the monitor removes whatever that uid owns or
created (``IPC_RMID``, as ``ipcrm`` does). It never runs for a uid that is a real account's.
"""
from __future__ import annotations

import ctypes

_libc = ctypes.CDLL(None, use_errno=True)
IPC_RMID = 0
KINDS = ("shm", "msg", "sem")


def objects(kind: str) -> list[dict[str, int]]:
    """The objects of ``kind`` in this IPC namespace, as ``{"id", "uid", "cuid"}`` (from /proc/sysvipc)."""
    try:
        with open(f"/proc/sysvipc/{kind}") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    if not lines:
        return []
    head = lines[0].split()
    ident = {"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind]
    out = []
    for line in lines[1:]:
        row = dict(zip(head, line.split()))
        try:
            out.append({"id": int(row[ident]), "uid": int(row["uid"]), "cuid": int(row["cuid"])})
        except (KeyError, ValueError):
            continue
    return out


def remove(kind: str, ident: int) -> bool:
    if kind == "shm":
        ret = _libc.shmctl(ctypes.c_int(ident), ctypes.c_int(IPC_RMID), None)
    elif kind == "msg":
        ret = _libc.msgctl(ctypes.c_int(ident), ctypes.c_int(IPC_RMID), None)
    else:
        ret = _libc.semctl(ctypes.c_int(ident), ctypes.c_int(0), ctypes.c_int(IPC_RMID))
    return ret == 0


def remove_owned_by(uid: int) -> list[tuple[str, int]]:
    """Remove every object ``uid`` owns or created; what was removed."""
    removed = []
    for kind in KINDS:
        for obj in objects(kind):
            if uid in (obj["uid"], obj["cuid"]) and remove(kind, obj["id"]):
                removed.append((kind, obj["id"]))
    return removed
