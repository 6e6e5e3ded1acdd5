"""The cgroup v2 backend (autograder/sandbox/cgroups.py) against a fake cgroupfs tree.

This machine is cgroup v1 only, so the v2 logic is exercised on a temporary folder laid out like
/sys/fs/cgroup (cgroup.controllers, cgroup.subtree_control, cgroup.procs, the event files). What a fake tree
cannot show: that a real kernel accepts these writes (controller delegation, the no-internal-processes
error it raises, memory.swap.max without swap accounting) and kills at the limits. That stays unverified
here; the writes themselves, their order and the reading of the event files are what these tests check.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from autograder.sandbox import cgroups

pytestmark = pytest.mark.unit

DELEGATED = "user.slice/user-1000.slice/user@1000.service/app.slice/grade.scope"


def _group(path: Path, controllers: str, procs: str = "", subtree: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(subtree)
    (path / "cgroup.procs").write_text(procs)
    return path


class FakeKernel:
    """The cgroupfs rules the backend must obey, on a plain folder: a new group's ``cgroup.controllers`` is
    its parent's ``subtree_control``; ``+ctrl`` needs the controller offered and, below the root, no
    processes in the group (EBUSY); a process moved into a group leaves its old one; a group with
    controllers enabled for children takes no processes (EBUSY). Every write is logged in order."""

    def __init__(self, mount: Path):
        self.mount = mount
        self.log: list[tuple[str, str]] = []

    def _procs(self, d: Path) -> list[str]:
        f = d / "cgroup.procs"
        return f.read_text().split() if f.exists() else []

    def write(self, d, name, value):
        d = Path(d)
        self.log.append((os.path.join(d, name), value))
        if name == "cgroup.subtree_control":
            ctrl = value.lstrip("+")
            if ctrl not in (d / "cgroup.controllers").read_text().split():
                raise FileNotFoundError(2, "No such file or directory")
            if d != self.mount and self._procs(d):
                raise OSError(16, "Device or resource busy")
            enabled = (d / "cgroup.subtree_control").read_text().split()
            (d / "cgroup.subtree_control").write_text(" ".join(enabled + [ctrl]) + "\n")
        elif name == "cgroup.procs":
            if d != self.mount and (d / "cgroup.subtree_control").read_text().split():
                raise OSError(16, "Device or resource busy")
            for f in self.mount.rglob("cgroup.procs"):
                procs = f.read_text().split()
                if value in procs:
                    f.write_text("".join(p + "\n" for p in procs if p != value))
            (d / "cgroup.procs").write_text("".join(p + "\n" for p in self._procs(d) + [value]))
        else:
            (d / name).write_text(value)

    def mkdir(self, path, exist_ok=False):
        path = Path(path)
        if exist_ok and path.is_dir():
            return
        path.mkdir()
        (path / "cgroup.controllers").write_text((path.parent / "cgroup.subtree_control").read_text())
        (path / "cgroup.subtree_control").write_text("")
        (path / "cgroup.procs").write_text("")


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    fake = FakeKernel(tmp_path)
    monkeypatch.setattr(cgroups, "_write", fake.write)
    monkeypatch.setattr(cgroups, "_mkdir", fake.mkdir)
    monkeypatch.setattr(cgroups, "_rmdir", shutil.rmtree)  # a fake tree's "interface files" are real files
    return fake


def _rel(log, mount) -> list:
    return [(os.path.relpath(p, mount), v) for p, v in log]


def test_unified_hierarchy_is_detected_by_its_root_controllers_file(tmp_path):
    assert not cgroups.is_unified(str(tmp_path))
    _group(tmp_path, "cpu memory pids")
    assert cgroups.is_unified(str(tmp_path))
    assert cgroups.v2_own_path("0::/" + DELEGATED + "\n") == DELEGATED
    assert cgroups.v2_own_path("4:memory:/x\n1:name=systemd:/x\n") is None


def test_root_uses_the_root_cgroup_and_limits_each_sandbox(tmp_path, kernel):
    _group(tmp_path, "cpuset cpu io memory pids", procs="1\n77\n")
    backend = cgroups.CgroupV2(str(tmp_path), self_cgroup="0::/system.slice/x.service\n", root=True)
    # the root cgroup is exempt from the no-internal-processes rule: nothing is moved, no leaf
    assert not (tmp_path / cgroups.V2_LEAF).exists()
    assert _rel(kernel.log, tmp_path)[:3] == [("cgroup.subtree_control", "+memory"), ("cgroup.subtree_control", "+pids"),
                                          ("cgroup.subtree_control", "+cpu")]
    base = tmp_path / cgroups.V2_BASE
    assert ("attention-course/cgroup.subtree_control", "+memory") in _rel(kernel.log, tmp_path)
    assert backend.controllers == ["memory", "pids", "cpu"]
    kernel.log.clear()
    group = backend.group("attention-sandbox-123-1", memory_mb=1536, max_procs=64, cpus=0.5)
    d = base / "attention-sandbox-123-1"
    assert dict(_rel(kernel.log, d)) == {"memory.max": str(1536 << 20), "memory.swap.max": "0", "memory.oom.group": "1",
                                     "pids.max": "64", "cpu.max": "50000 100000"}
    assert not group.oom_killed() and not group.pids_limit_hit()
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n")
    (d / "pids.events").write_text("max 3\n")
    (d / "memory.peak").write_text(str(700 << 20) + "\n")
    assert group.oom_killed() and group.pids_limit_hit() and group.memory_peak_mb() == 700


def test_sandbox_processes_are_killed_and_the_group_removed(tmp_path, kernel):
    _group(tmp_path, "memory pids")
    backend = cgroups.CgroupV2(str(tmp_path), self_cgroup="0::/\n", root=True)
    group = backend.group("attention-sandbox-9-9", 512, 8, 0)
    sleeper = subprocess.Popen(["sleep", "60"])
    group.add(sleeper.pid)
    assert (Path(group.dir) / "cgroup.procs").read_text().split() == [str(sleeper.pid)]
    assert "cpu.max" not in dict(_rel(kernel.log, Path(group.dir)))  # no cpu controller offered: no quota
    group.cleanup()
    assert sleeper.wait(timeout=10) == -9
    assert not Path(group.dir).exists()


def test_delegated_subtree_moves_its_processes_to_a_leaf_before_enabling_controllers(tmp_path, kernel):
    _group(tmp_path, "cpu memory pids")
    own = _group(tmp_path / DELEGATED, "cpu memory pids", procs="4242\n4243\n")
    backend = cgroups.CgroupV2(str(tmp_path), self_cgroup=f"0::/{DELEGATED}\n", root=False)
    log = _rel(kernel.log, own)
    leaf = f"{cgroups.V2_LEAF}/cgroup.procs"
    # no internal processes: both processes leave the cgroup before it enables controllers for its children
    assert log[:5] == [(leaf, "4242"), (leaf, "4243"), ("cgroup.subtree_control", "+memory"),
                       ("cgroup.subtree_control", "+pids"), ("cgroup.subtree_control", "+cpu")]
    assert backend.base == str(own / cgroups.V2_BASE)
    assert ("attention-course/cgroup.subtree_control", "+pids") in log


def test_a_process_already_in_the_leaf_uses_the_delegated_parent(tmp_path, kernel):
    _group(tmp_path, "cpu memory pids")
    own = _group(tmp_path / DELEGATED, "memory pids", procs="4242\n")
    cgroups.CgroupV2(str(tmp_path), self_cgroup=f"0::/{DELEGATED}\n", root=False)
    kernel.log.clear()
    # the next run starts from the leaf the first one moved the shell into: no deeper nesting, no moves
    backend = cgroups.CgroupV2(str(tmp_path), self_cgroup=f"0::/{DELEGATED}/{cgroups.V2_LEAF}\n", root=False)
    assert backend.base == str(own / cgroups.V2_BASE) and kernel.log == []


def test_controllers_already_enabled_are_not_touched(tmp_path, kernel):
    _group(tmp_path, "cpu memory pids")
    _group(tmp_path / DELEGATED, "memory pids", procs="", subtree="memory pids\n")
    _group(tmp_path / DELEGATED / cgroups.V2_BASE, "memory pids", subtree="memory pids\n")
    backend = cgroups.CgroupV2(str(tmp_path), self_cgroup=f"0::/{DELEGATED}\n", root=False)
    assert kernel.log == [] and backend.controllers == ["memory", "pids"]


def test_missing_controllers_or_no_delegation_fall_back_to_rlimits_with_the_reason(tmp_path, kernel, monkeypatch):
    _group(tmp_path, "cpu memory pids")
    _group(tmp_path / DELEGATED, "cpu pids")  # the parent has not delegated memory
    with pytest.raises(cgroups.Unavailable, match="does not offer the memory controller"):
        cgroups.CgroupV2(str(tmp_path), self_cgroup=f"0::/{DELEGATED}\n", root=False)
    monkeypatch.setattr(cgroups, "_self_cgroup", lambda: f"0::/{DELEGATED}\n")
    backend, reasons = cgroups.choose(root=False, mount=str(tmp_path))
    assert backend.name == "none"
    assert reasons[0] == "cgroup v1: cgroup v1 needs root"
    assert "does not offer the memory controller" in reasons[1]
    monkeypatch.setattr(cgroups.os, "access", lambda path, mode: False)  # a cgroup owned by someone else
    with pytest.raises(cgroups.Unavailable, match="not delegated to this account"):
        cgroups.CgroupV2(str(tmp_path), self_cgroup=f"0::/{DELEGATED}\n", root=False)


def test_a_process_that_cannot_be_moved_makes_v2_unavailable(tmp_path, kernel, monkeypatch):
    _group(tmp_path, "memory pids")
    own = _group(tmp_path / DELEGATED, "memory pids", procs="1\n")
    real = kernel.write

    def refuse(d, name, value):
        if name == "cgroup.procs":
            raise PermissionError(1, "Operation not permitted")
        real(d, name, value)

    monkeypatch.setattr(cgroups, "_write", refuse)
    with pytest.raises(cgroups.Unavailable, match="cannot move process 1"):
        cgroups.CgroupV2(str(tmp_path), self_cgroup=f"0::/{DELEGATED}\n", root=False)
    assert (own / "cgroup.subtree_control").read_text() == ""  # nothing enabled


def test_choose_prefers_v1_for_root_on_a_v1_host_and_v2_on_a_unified_one(tmp_path, kernel):
    v1 = tmp_path / "v1"
    for c in ("memory", "pids"):
        (v1 / c / "x").mkdir(parents=True)
    backend, _ = cgroups.choose(root=True, mount=str(v1), self_cgroup="7:memory:/x\n6:pids:/x\n")
    assert backend.name == "cgroup v1" and backend.dirs["memory"] == str(v1 / "memory" / "x")
    v2 = _group(tmp_path / "v2", "memory pids")
    backend, reasons = cgroups.choose(root=True, mount=str(v2), self_cgroup="0::/\n")
    assert backend.name == "cgroup v2" and reasons == ["cgroup v1: this host has no cgroup v1 hierarchies"]


def test_stale_sandbox_groups_are_swept(tmp_path, kernel):
    _group(tmp_path, "memory pids")
    backend = cgroups.CgroupV2(str(tmp_path), self_cgroup="0::/\n", root=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(backend.base) / f"{cgroups.PREFIX}{dead.pid}-1"
    live = Path(backend.base) / f"{cgroups.PREFIX}{os.getpid()}-1"
    stale.mkdir()
    live.mkdir()
    backend.sweep()
    assert not stale.exists() and live.exists()
