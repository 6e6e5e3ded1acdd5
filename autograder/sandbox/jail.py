"""The steps that build a sandbox, one function per name in :class:`.policy.Policy` (monitor and kernel side).

:func:`run_steps` applies a policy's steps in order to a :class:`Jail` (the state they share). A step that
fails raises: the monitor reports a grader error, the kernel aborts before any learner code ran (and says why on
its setup pipe, which it closes before the first cell: :mod:`.monitor`).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field

from . import cgroups, landlock, policy, seccomp, sysv
from .syscalls import (CLONE_NEWUSER, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC,
                       MS_REMOUNT, NAMESPACES, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG,
                       drop_all_capabilities, locked_flags, mount, prctl, unshare)

UID_BASE, UID_SLOTS = 231000, 2000


@dataclass
class Jail:
    policy: policy.Policy
    limits: dict
    state_dir: str  # the zygote's private state folder (uid locks, the mount point of private roots)
    root: str  # where a private root is built (namespace levels)
    cgroup_backend: object = None
    mode: str = "sandbox"
    uid: int | None = None  # the per-sandbox uid (root levels)
    uid_fd: int | None = None
    group: cgroups.Group = field(default_factory=cgroups.Group)
    scratch: str = policy.SCRATCH  # the scratch folder as the kernel sees it
    host_scratch: str | None = None  # a scratch folder on the host (process level), removed afterwards
    landlock_ruleset: object = None
    res_w: int = -1  # the kernel's result pipe (learner code can write it: its frames are data)
    setup_w: int = -1  # the kernel's setup pipe: "ready" or why the jail failed; closed before learner code
    nproc_base: int = 0
    host_uid: int = field(default_factory=os.geteuid)
    host_gid: int = field(default_factory=os.getegid)

    def cleanup(self) -> None:
        self.group.cleanup()
        if self.uid_fd is not None:  # a per-sandbox uid (no account's): nothing it made in System V IPC may stay
            sysv.remove_owned_by(self.uid)
            os.close(self.uid_fd)
        if self.host_scratch:
            shutil.rmtree(self.host_scratch, ignore_errors=True)


# -- monitor steps (before the kernel is forked) -------------------------------------------------------------


def uid_slot(j: Jail) -> None:
    """A uid of its own for each live sandbox (so RLIMIT_NPROC and signals never cross sandboxes)."""
    start = os.getpid() % UID_SLOTS
    for k in range(UID_SLOTS):
        slot = (start + k) % UID_SLOTS
        fd = os.open(os.path.join(j.state_dir, f"uid-{slot}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        j.uid_fd, j.uid = fd, UID_BASE + slot
        return
    raise RuntimeError("no free sandbox uid")


def cgroup(j: Jail) -> None:
    name = f"{cgroups.PREFIX}{os.getpid()}-{int(time.time() * 1000) % 100000}"
    lim = j.limits
    j.group = j.cgroup_backend.group(name, int(lim["memory_mb"]), int(lim["max_procs"]), float(lim.get("cpus", 1.0)))


def namespaces(j: Jail) -> None:
    unshare(NAMESPACES)


def user_namespace(j: Jail) -> None:
    """A user namespace mapping this account's uid and gid to 0 (nothing else), with the other namespaces."""
    unshare(CLONE_NEWUSER | NAMESPACES)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {j.host_uid} 1"), ("gid_map", f"0 {j.host_gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    j.uid = 0
    # ucounts are per user namespace since Linux 5.14: only this namespace's tasks (the monitor) count
    j.nproc_base = 1 if _kernel_at_least(5, 14) else _tasks_of(j.host_uid)


def _bind_read_only(src: str, dst: str) -> None:
    mount(src, dst, None, MS_BIND | MS_REC)
    # a user namespace may not clear flags the host mount has (nosuid, noexec, atime...): keep them
    mount(src, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(src))


def root_filesystem(j: Jail) -> None:
    """A private root on a tmpfs: read-only binds of the policy's paths, a few /dev nodes, a tmpfs /scratch."""
    root = j.root
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=755")
    for src in j.policy.binds:
        if os.path.isdir(src):
            os.makedirs(root + src, exist_ok=True)
        else:  # a single file (/etc/passwd): the mount point is an empty file
            os.makedirs(os.path.dirname(root + src), exist_ok=True)
            open(root + src, "a").close()
        _bind_read_only(src, root + src)
    for link in j.policy.links:
        if os.path.islink(link):
            os.symlink(os.readlink(link), root + link)
        elif os.path.isdir(link):
            os.makedirs(root + link, exist_ok=True)
            _bind_read_only(link, root + link)
    os.makedirs(root + "/dev", exist_ok=True)
    for node in j.policy.devices:
        target = root + "/dev/" + node
        open(target, "w").close()
        mount("/dev/" + node, target, None, MS_BIND)
    os.makedirs(root + "/dev/shm", exist_ok=True)
    mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    os.makedirs(root + "/proc", exist_ok=True)
    os.makedirs(root + policy.SCRATCH, exist_ok=True)
    owner = j.uid if j.uid is not None else 0
    mount("tmpfs", root + policy.SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={int(j.limits.get('scratch_mb', 64))}m,mode=700,uid={owner},gid={owner}")
    if not os.path.exists(root + "/tmp"):
        os.symlink(policy.SCRATCH, root + "/tmp")
    # else: a bound path (a checkout or venv under /tmp) already made /tmp a read-only skeleton here;
    # TMPDIR, HOME and tempfile all point at /scratch, so nothing needs /tmp to be writable.
    # Every mount point exists now: the private root itself becomes read-only (at the user level the kernel is
    # its namespace's root and owns this tmpfs). /scratch and /dev/shm are mounts of their own and stay writable.
    mount("none", root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    j.scratch = policy.SCRATCH


def scratch_folder(j: Jail) -> None:
    """Process level: a fresh folder of the host's (in the zygote's private state folder) for the kernel."""
    parent = os.path.join(j.state_dir, "scratch")  # traversable, not listable: the sandbox uid gets to its own
    os.makedirs(parent, mode=0o711, exist_ok=True)
    os.chmod(parent, 0o711)
    path = os.path.join(parent, f"{os.getpid()}-{int(time.time() * 1000) % 100000}")
    os.mkdir(path, 0o700)
    j.host_scratch = j.scratch = path
    if j.uid is not None and os.geteuid() == 0:
        os.chown(path, j.uid, j.uid)
    else:
        j.nproc_base = _tasks_of(os.getuid())


def subreaper(j: Jail) -> None:
    """Process level: orphans of the kernel become the monitor's children, so none can outlive the sandbox."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


# -- kernel steps (in the kernel, before any learner code) ---------------------------------------------------


def proc(j: Jail) -> None:
    mount("proc", j.root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def chroot(j: Jail) -> None:
    os.chroot(j.root)
    os.chdir("/")


def session(j: Jail) -> None:
    os.setsid()


def descriptors(j: Jail) -> None:
    """fds 0-2 on /dev/null; nothing of the host stays open (the Engine's pipes, the uid lock file)."""
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    keep = sorted(fd for fd in (j.res_w, j.setup_w) if fd >= 3)
    low = 3
    for fd in keep:
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def rlimits(j: Jail) -> None:
    import resource

    has_cgroup = type(j.group) is not cgroups.Group
    for name, value in policy.rlimits(j.limits, nproc_base=j.nproc_base,
                                      as_base_mb=None if has_cgroup else _address_space_mb()).items():
        resource.setrlimit(getattr(resource, name), value)


def slot_uid(j: Jail) -> None:
    os.setgroups([])
    os.setgid(j.uid)
    os.setuid(j.uid)


def drop_capabilities(j: Jail) -> None:
    drop_all_capabilities()


def no_new_privs(j: Jail) -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def landlock_rules(j: Jail) -> None:
    """Opened while the kernel still has the grader's identity (the paths may be closed to the sandbox uid)."""
    j.landlock_ruleset = landlock.Ruleset(
        read_paths=(*j.policy.binds, *j.policy.links, *j.policy.read_only_extra),
        write_paths=(j.scratch,), device_files=tuple("/dev/" + d for d in j.policy.devices))


def landlock_enforce(j: Jail) -> None:
    j.landlock_ruleset.enforce()


def allocator(j: Jail) -> None:
    """glibc's allocator set as the job's limits say (policy.allocator_options), before any learner code runs."""
    options = policy.allocator_options(j.limits)
    if options:
        import ctypes

        libc = ctypes.CDLL(None)
        for parameter, value in options.items():
            if libc.mallopt(parameter, value) != 1:
                raise OSError(f"mallopt({parameter}, {value}) was refused")


def seccomp_filter(j: Jail) -> None:
    seccomp.load(**policy.seccomp_options(j.limits))


def single_process(j: Jail) -> None:
    """No seccomp filter and no cgroup: a job that may start no process (a memory budget's) is not run."""
    if policy.seccomp_options(j.limits)["refuse_processes"]:
        raise RuntimeError("this job may start no process, and without a seccomp filter (libseccomp) or a cgroup "
                           "nothing here can hold it to that")


def environment(j: Jail) -> None:
    os.chdir(j.scratch)
    os.environ.clear()
    os.environ.update(policy.environment(j.scratch, j.mode))
    sys.path[:] = [p for p in sys.path if p and os.path.isdir(p)]
    import tempfile

    tempfile.tempdir = j.scratch


STEPS = {"uid_slot": uid_slot, "cgroup": cgroup, "namespaces": namespaces, "user_namespace": user_namespace,
         "root_filesystem": root_filesystem, "scratch_folder": scratch_folder, "subreaper": subreaper,
         "proc": proc, "chroot": chroot, "session": session, "descriptors": descriptors, "rlimits": rlimits,
         "slot_uid": slot_uid, "drop_capabilities": drop_capabilities, "no_new_privs": no_new_privs,
         "landlock_rules": landlock_rules, "landlock": landlock_enforce, "allocator": allocator,
         "seccomp": seccomp_filter,
         "single_process": single_process, "environment": environment}


def run_steps(j: Jail, names) -> None:
    for name in names:
        try:
            STEPS[name](j)
        except Exception as exc:
            raise RuntimeError(f"sandbox step {name!r} failed: {type(exc).__name__}: {exc}") from exc


# -- helpers ------------------------------------------------------------------------------------------------


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        parts = os.uname().release.split(".")
        return (int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)) >= (major, minor)
    except (ValueError, IndexError):
        return False


def _tasks_of(uid: int) -> int:
    """Processes and threads of ``uid`` now (RLIMIT_NPROC counts them all against the kernel's limit)."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as fh:
                text = fh.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            n += int(fields.get("Threads", "1").strip() or 1)
    return n


def _address_space_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) / 1024
    return 0.0


def kill_descendants(pid: int, spare: int | None = None) -> None:
    """SIGKILL every process below ``pid`` (the monitor, a subreaper) but ``spare``, until none is left."""
    for _ in range(100):
        children = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
        below, todo = [], [pid]
        while todo:
            for child in children.get(todo.pop(), []):
                if child != spare:
                    below.append(child)
                todo.append(child)
        if not below:
            return
        for p in below:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
        for p in below:  # reap those reparented to us (the spare is left to whoever waits for it)
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
