"""Per-sandbox resource limits through cgroups: backends for cgroup v1, cgroup v2 and none.

A backend is chosen once, in the zygote (:func:`choose`), and makes one :class:`Group` per sandbox:

- **v1** (root on a legacy/hybrid host): a memory cgroup (``memory.limit_in_bytes``, memsw where swap is
  accounted, swappiness 0), a pids cgroup (``pids.max``) and, where present, a cpu cgroup (CFS quota), each
  under this process's own cgroup of that hierarchy.
- **v2** (the unified hierarchy: every current distribution): one child cgroup per sandbox with
  ``memory.max``, ``memory.swap.max`` 0, ``memory.oom.group`` 1, ``pids.max`` and ``cpu.max``. The parent must
  have the controllers in its ``cgroup.subtree_control``, and a non-root cgroup that enables controllers may
  hold no processes (the *no internal processes* rule): so the sandboxes live under ``attention-course/``,
  created in the root cgroup by root, or in the account's own cgroup when it is delegated (a systemd user
  service or ``systemd-run --user --scope -p Delegate=yes``), whose processes first move into a leaf
  ``attention-course-leaf/``.
- **none**: no cgroup; the jail's rlimits are all there is (see :mod:`.policy`), and a kernel killed by
  the memory limit or a fork bomb cannot be told apart from one that crashed.

Everything takes the cgroupfs mount point and this process's ``/proc/self/cgroup`` text as arguments, so
the v2 logic is tested against a fake tree (tests/test_cgroup_v2.py).
"""
from __future__ import annotations

import os
import signal
import time

MOUNT = "/sys/fs/cgroup"
PREFIX = "attention-sandbox-"  # v1 group names; v2 uses the same names under attention-course/
V2_BASE, V2_LEAF = "attention-course", "attention-course-leaf"
V2_REQUIRED, V2_OPTIONAL = ("memory", "pids"), ("cpu",)


class Unavailable(Exception):
    """This backend cannot work here; the message says why (it ends up in the isolation report)."""


def _write(d: str, name: str, value: str) -> None:
    with open(os.path.join(d, name), "w") as fh:
        fh.write(value)


def _read(d: str, name: str) -> str:
    try:
        with open(os.path.join(d, name)) as fh:
            return fh.read()
    except OSError:
        return ""


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


# cgroupfs makes a new group's interface files and removes them with it; tests on a fake tree swap these
_rmdir = os.rmdir


def _mkdir(path: str, exist_ok: bool = False) -> None:
    if exist_ok and os.path.isdir(path):
        return
    os.mkdir(path)


def _self_cgroup() -> str:
    try:
        with open("/proc/self/cgroup") as fh:
            return fh.read()
    except OSError:
        return ""


def _kill_and_remove(d: str) -> None:
    for _ in range(200):
        if os.path.exists(os.path.join(d, "cgroup.kill")):
            try:
                _write(d, "cgroup.kill", "1")
            except OSError:
                pass
        for p in _read(d, "cgroup.procs").split():
            try:
                os.kill(int(p), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        try:
            _rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def _stale(name: str) -> bool:
    """A sandbox group whose monitor (the pid in its name) is gone."""
    try:
        os.kill(int(name[len(PREFIX):].split("-")[0]), 0)
        return False
    except (ValueError, IndexError, PermissionError):
        return False
    except ProcessLookupError:
        return True


class Group:
    """One sandbox's cgroup(s): put the kernel in, read how it ended, remove."""

    def add(self, pid: int) -> None: ...
    def oom_killed(self) -> bool: return False
    def pids_limit_hit(self) -> bool: return False
    def memory_peak_mb(self) -> float: return 0.0
    def cleanup(self) -> None: ...


# -- none ---------------------------------------------------------------------------------------------------


class NoCgroup:
    name = "none"

    def group(self, name: str, memory_mb: int, max_procs: int, cpus: float) -> Group:
        return Group()

    def sweep(self) -> None:
        pass


# -- v1 -----------------------------------------------------------------------------------------------------


def v1_dir(controller: str, mount: str = MOUNT, self_cgroup: str | None = None) -> str | None:
    """The directory of this process's cgroup v1 ``controller`` hierarchy, if mounted and writable."""
    for line in (self_cgroup if self_cgroup is not None else _self_cgroup()).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            base = os.path.join(mount, controller)
            path = os.path.join(base, parts[2].lstrip("/"))
            if os.path.isdir(path) and os.access(path, os.W_OK):
                return path
            if os.path.isdir(base) and os.access(base, os.W_OK):
                return base
    return None


class _V1Group(Group):
    def __init__(self, dirs: dict[str, str], name: str, memory_mb: int, max_procs: int, cpus: float):
        self.dirs = {}
        try:
            d = self._make(dirs["memory"], name, "memory")
            limit = str(int(memory_mb) << 20)
            _write(d, "memory.limit_in_bytes", limit)
            for optional, value in (("memory.memsw.limit_in_bytes", limit), ("memory.swappiness", "0")):
                try:
                    _write(d, optional, value)
                except OSError:  # no swap accounting on this kernel
                    pass
            _write(self._make(dirs["pids"], name, "pids"), "pids.max", str(int(max_procs)))
            if dirs.get("cpu") and cpus and cpus > 0:  # fairness between parallel sandboxes
                try:
                    d = self._make(dirs["cpu"], name, "cpu")
                    _write(d, "cpu.cfs_period_us", "100000")
                    _write(d, "cpu.cfs_quota_us", str(max(1000, int(100000 * float(cpus)))))
                except OSError:
                    pass
        except BaseException:
            self.cleanup()
            raise

    def _make(self, base: str, name: str, controller: str) -> str:
        d = os.path.join(base, name)
        os.mkdir(d)
        self.dirs[controller] = d
        return d

    def add(self, pid: int) -> None:
        for d in self.dirs.values():
            _write(d, "cgroup.procs", str(pid))

    def oom_killed(self) -> bool:
        d = self.dirs.get("memory")
        return bool(d) and _counter(_read(d, "memory.oom_control"), "oom_kill") > 0

    def memory_peak_mb(self) -> float:
        d = self.dirs.get("memory")
        text = _read(d, "memory.max_usage_in_bytes").strip() if d else ""
        return int(text) / (1 << 20) if text.isdigit() else 0.0

    def pids_limit_hit(self) -> bool:
        d = self.dirs.get("pids")
        return bool(d) and _counter(_read(d, "pids.events"), "max") > 0

    def cleanup(self) -> None:
        for d in self.dirs.values():
            _kill_and_remove(d)


class CgroupV1:
    name = "cgroup v1"

    def __init__(self, mount: str = MOUNT, self_cgroup: str | None = None):
        self.dirs = {c: v1_dir(c, mount, self_cgroup) for c in ("memory", "pids", "cpu")}
        missing = [c for c in ("memory", "pids") if not self.dirs[c]]
        if missing:
            raise Unavailable("no writable cgroup v1 " + " and ".join(missing) + " hierarchy")

    def group(self, name: str, memory_mb: int, max_procs: int, cpus: float) -> Group:
        return _V1Group(self.dirs, name, memory_mb, max_procs, cpus)

    def sweep(self) -> None:
        for base in filter(None, self.dirs.values()):
            _sweep(base)


def _sweep(base: str) -> None:
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        if _stale(name):
            try:
                _rmdir(os.path.join(base, name))
            except OSError:
                pass


# -- v2 -----------------------------------------------------------------------------------------------------


def is_unified(mount: str = MOUNT) -> bool:
    """True where ``mount`` is the cgroup v2 unified hierarchy (its root has ``cgroup.controllers``)."""
    return os.path.isfile(os.path.join(mount, "cgroup.controllers"))


def v2_own_path(self_cgroup: str) -> str | None:
    """This process's cgroup in the unified hierarchy (the ``0::/path`` line), relative to the mount."""
    for line in self_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip().lstrip("/")
    return None


def _enable(parent: str, is_root: bool, wanted: tuple[str, ...], optional: tuple[str, ...]) -> list[str]:
    """Enable controllers in ``parent/cgroup.subtree_control`` (moving its processes to a leaf first when the
    no-internal-processes rule requires); the controllers now enabled for its children."""
    available = _read(parent, "cgroup.controllers").split()
    missing = [c for c in wanted if c not in available]
    if missing:
        raise Unavailable(f"the cgroup {parent} does not offer the {' and '.join(missing)} controller "
                          "(its parent has not delegated it)")
    want = [c for c in wanted + optional if c in available]
    enabled = _read(parent, "cgroup.subtree_control").split()
    todo = [c for c in want if c not in enabled]
    if not todo:
        return want
    procs = _read(parent, "cgroup.procs").split()
    if procs and not is_root:  # no internal processes: a cgroup with controllers for its children has none
        leaf = os.path.join(parent, V2_LEAF)
        _mkdir(leaf, exist_ok=True)
        for pid in procs:
            try:
                _write(leaf, "cgroup.procs", pid)
            except ProcessLookupError:
                pass
            except OSError as exc:
                raise Unavailable(f"cannot move process {pid} out of {parent} into {leaf} ({exc.strerror}), so "
                                  "controllers cannot be enabled there") from None
    for c in todo:
        try:
            _write(parent, "cgroup.subtree_control", f"+{c}")
        except OSError as exc:
            if c in wanted:
                raise Unavailable(f"cannot enable the {c} controller in {parent} ({exc.strerror})") from None
            want.remove(c)
    return want


class _V2Group(Group):
    def __init__(self, base: str, controllers: list[str], name: str, memory_mb: int, max_procs: int, cpus: float):
        self.dir = os.path.join(base, name)
        _mkdir(self.dir)
        try:
            _write(self.dir, "memory.max", str(int(memory_mb) << 20))
            try:
                _write(self.dir, "memory.swap.max", "0")
            except OSError:  # a kernel without swap accounting has no swap to limit
                pass
            try:
                _write(self.dir, "memory.oom.group", "1")  # an OOM kill takes the whole sandbox
            except OSError:
                pass
            _write(self.dir, "pids.max", str(int(max_procs)))
            if "cpu" in controllers and cpus and cpus > 0:
                _write(self.dir, "cpu.max", f"{max(1000, int(100000 * float(cpus)))} 100000")
        except BaseException:
            self.cleanup()
            raise

    def add(self, pid: int) -> None:
        _write(self.dir, "cgroup.procs", str(pid))

    def oom_killed(self) -> bool:
        events = _read(self.dir, "memory.events")
        return _counter(events, "oom_kill") > 0 or _counter(events, "oom_group_kill") > 0

    def pids_limit_hit(self) -> bool:
        return _counter(_read(self.dir, "pids.events"), "max") > 0

    def memory_peak_mb(self) -> float:
        text = _read(self.dir, "memory.peak").strip()  # Linux 5.19+
        return int(text) / (1 << 20) if text.isdigit() else 0.0

    def cleanup(self) -> None:
        _kill_and_remove(self.dir)


class CgroupV2:
    name = "cgroup v2"

    def __init__(self, mount: str = MOUNT, self_cgroup: str | None = None, root: bool | None = None):
        if not is_unified(mount):
            raise Unavailable(f"{mount} is not a cgroup v2 (unified) hierarchy")
        root = os.geteuid() == 0 if root is None else root
        if root:  # the root cgroup is exempt from the no-internal-processes rule
            parent, is_root = mount, True
        else:
            own = v2_own_path(self_cgroup if self_cgroup is not None else _self_cgroup())
            if own is None:
                raise Unavailable("this process is in no cgroup v2 group")
            while own.rsplit("/", 1)[-1] == V2_LEAF:  # moved there by an earlier run: its parent is ours
                own = own.rpartition("/")[0]
            parent, is_root = os.path.join(mount, own), own == ""
            if not (os.access(os.path.join(parent, "cgroup.procs"), os.W_OK)
                    and os.access(os.path.join(parent, "cgroup.subtree_control"), os.W_OK)):
                raise Unavailable(f"the cgroup /{own} is not delegated to this account (run the grader in a "
                                  "systemd scope with Delegate=yes)")
        _enable(parent, is_root, V2_REQUIRED, V2_OPTIONAL)
        self.base = os.path.join(parent, V2_BASE)
        _mkdir(self.base, exist_ok=True)
        self.controllers = _enable(self.base, False, V2_REQUIRED, V2_OPTIONAL)

    def group(self, name: str, memory_mb: int, max_procs: int, cpus: float) -> Group:
        return _V2Group(self.base, self.controllers, name, memory_mb, max_procs, cpus)

    def sweep(self) -> None:
        _sweep(self.base)


def choose(root: bool | None = None, mount: str = MOUNT, self_cgroup: str | None = None):
    """The strongest backend this account can use here, and why the stronger ones could not be used."""
    reasons = []
    for backend in (CgroupV1, CgroupV2):
        try:
            if backend is CgroupV1 and (os.geteuid() != 0 if root is None else not root):
                raise Unavailable("cgroup v1 needs root")
            if backend is CgroupV1 and is_unified(mount):
                raise Unavailable("this host has no cgroup v1 hierarchies")
            return backend(mount, self_cgroup) if backend is CgroupV1 else backend(mount, self_cgroup, root), reasons
        except Unavailable as exc:
            reasons.append(f"{backend.name}: {exc}")
        except OSError as exc:
            reasons.append(f"{backend.name}: {exc}")
    return NoCgroup(), reasons
