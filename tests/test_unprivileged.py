"""Grading as an ordinary account: a throwaway unprivileged user grades a fresh copy of the course.

The test (root) creates the account (``useradd``), gives it a copy of the course it owns, and runs the
grader as it with ``su``; the repository and its virtual environment are only read. Where the Python
installation sits under a folder other accounts cannot enter (here ``/root/.pyenv``), the account's commands
run in a private mount namespace in which that folder is a tmpfs holding only the Python installation: the
host is not changed. Without root the test skips (creating an account needs root).

What it proves on this machine (cgroup v1, so the account has no cgroup: limits are rlimits):
- ``grade`` as the account reaches the user-namespace level, says so, and gives the reference full marks,
  the blank zero and sampled catalogued mistakes exactly the per-cell scores the root level gives;
- the hostile corpus holds at ``user-rlimits`` and ``process-rlimits`` (tests/hostile/levels.py: every case but
  the level-independent ones, which tests/test_isolation.py grades at the root level only); the
  ``process-rlimits`` corpus is graded with namespaces refused by a seccomp filter (as Docker's default profile
  does), where ``auto`` falls back to the process level, which holds on every case, those that attack the file
  system, the network, the process table, the grader's own pipes and System V IPC (nothing is left in the host's
  IPC namespace) among them; ``HOSTILE_RUNS=N`` grades
  each of these levels' corpus N times in a row, each beside one spinning process per core (tests/load.py);
- a gradebook the account cannot write gives one clear line, not a traceback.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import contextlib

import pytest

from autograder import submissions
from autograder.course import Course
from autograder.isolation import Engine, Limits
from autograder.results import GradingResult

from .hostile import run
from .hostile.cases import CASES, CHAPTER, Ctx
from .hostile.levels import expected
from .load import CpuBurner, batch_params
from .test_isolation import CorpusBatches, _course_copy, _Server, _snapshot, assert_contained, case_params

pytestmark = pytest.mark.sandbox

REPO = Course().root
PYTHON = sys.executable
SAMPLED_MISTAKES = ("softmax-over-queries", "additive-without-tanh", "sdpa-missing-scale", "variance-not-scaled")
# with namespaces refused: the cases that attack what namespaces would have hidden
REFUSED_NAMESPACE_CASES = ("read_solutions", "write_gradebook", "network", "fork_bomb", "grader_pipes_via_proc",
                           "sysv_ipc", "__after__")


def _blocking_dir(path: str) -> tuple[str, str] | None:
    """(a folder others cannot enter on the way to ``path``, its child on that way), or None."""
    parts = Path(path).resolve().parts
    for i in range(2, len(parts)):
        folder = os.path.join(*parts[:i])
        if not os.stat(folder).st_mode & 0o001:
            return folder, os.path.join(folder, parts[i])
    return None


def _owner(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


class Account:
    def __init__(self):
        self.name = f"attn-{uuid.uuid4().hex[:8]}"
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", self.name], check=True)
        self.uid = int(subprocess.run(["id", "-u", self.name], capture_output=True, text=True, check=True).stdout)
        self.home = Path(f"/home/{self.name}")
        self.hide = [b for b in {_blocking_dir(os.path.realpath(sys.base_prefix)), _blocking_dir(sys.prefix),
                                 _blocking_dir(str(REPO))} if b]

    def own(self, path: Path) -> None:
        subprocess.run(["chown", "-R", f"{self.name}:{self.name}", str(path)], check=True)

    def run(self, command: str, timeout: float) -> subprocess.CompletedProcess:
        """``command`` as the account (a shell line, run in the repository)."""
        inner = f"cd {shlex.quote(str(REPO))} && OMP_NUM_THREADS=1 {command}"
        su = f"exec su -s /bin/sh {self.name} -c {shlex.quote(inner)}"
        if not self.hide:
            argv = ["sh", "-c", su]
        else:  # a private mount namespace in which the closed folder holds only what the grader needs
            hold = self.home / ".hold"
            lines = ["set -e"]
            for k, (folder, child) in enumerate(sorted(self.hide)):
                lines += [f"mkdir -p {hold}/{k}", f"mount --bind {shlex.quote(child)} {hold}/{k}",
                          f"mount -t tmpfs -o mode=0711 tmpfs {shlex.quote(folder)}",
                          f"mkdir -p {shlex.quote(child)}", f"mount --move {hold}/{k} {shlex.quote(child)}"]
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines + [su])]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def remove(self) -> None:
        for entry in os.listdir("/proc"):  # only this account's processes, by pid
            try:
                if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == self.uid:
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.5)
        subprocess.run(["userdel", "-r", self.name], capture_output=True)


@pytest.fixture(scope="module")
def account():
    if os.geteuid() != 0:
        pytest.skip("creating a throwaway unprivileged account needs root (useradd, su); run as root")
    acct = Account()
    try:
        yield acct
    finally:
        acct.remove()


def _course_for(account: Account, name: str) -> Course:
    course = _course_copy(account.home / name)
    account.own(course.root)
    return course


@pytest.mark.timeout(1500)
def test_grade_as_an_ordinary_account_gives_the_root_scores(account, tmp_path):
    course = _course_for(account, "class")
    mistakes = {m.id: m for m in submissions.load_mistakes(course, CHAPTER)}
    notebooks = {"reference": submissions.reference(course, CHAPTER), "blank": submissions.blank(course, CHAPTER)}
    notebooks |= {m: submissions.with_mistake(course, CHAPTER, mistakes[m]) for m in SAMPLED_MISTAKES}
    paths = {s: submissions.write_submission(course, s, CHAPTER, nb) for s, nb in notebooks.items()}
    account.own(course.root)
    done = account.run(f"{PYTHON} -m autograder grade {CHAPTER} --course {course.root} --workers 2 --no-progress",
                       timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "isolation: user (rlimits, seccomp)" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    with sqlite3.connect(course.grading / "gradebook.db") as db:
        rows = {s: (status, score, json.loads(cells)["cells"], iso) for s, status, score, cells, iso in db.execute(
            "select student, status, score, cells, isolation from autograder_result")}
    assert set(rows) == set(notebooks)
    with Engine(course.root, Limits()) as engine:  # the same notebooks at the root level
        assert engine.isolation["level"] == "root"
        for student, path in paths.items():
            r = engine.grade(CHAPTER, path, student)
            status, score, cells, iso = rows[student]
            assert iso == "user (rlimits, seccomp)"
            assert (status, score) == (r.status, r.score), student
            assert {g: c["score"] for g, c in cells.items()} == {c.grade_id: c.score for c in r.cells}, student
    assert rows["reference"][1] == 27 and rows["blank"][1] == 0
    assert all(rows[m][1] < 27 for m in SAMPLED_MISTAKES)


def _hostile_as(account: Account, level: str, wrapper: str = "", names=None, spinners: int = 0) -> dict:
    """The hostile corpus (the cases ``names`` and the reference, or every case) graded by the account at ``level``
    (beside a CpuBurner of ``spinners`` processes, if any); what changed outside, what the server got."""
    course = _course_for(account, f"hostile-{level}-{uuid.uuid4().hex[:4]}")
    gradebook = course.grading / "gradebook.db"
    with sqlite3.connect(gradebook) as db:
        db.execute("create table grade (student text, score real)")
        db.execute("insert into grade values ('someone', 12.5)")
    other = submissions.write_submission(course, "other-learner", CHAPTER, submissions.reference(course, CHAPTER))
    canary = account.home / f"canary-{level}.txt"  # the account's own file: only the sandbox is kept off it
    canary.write_text("nobody writes here")
    server = _Server()
    ctx = Ctx(course=course, repo=REPO, port=server.port, canary=canary, other_student=other)
    try:
        paths = run.write_cases(ctx, set(names) if names else None)  # only those built: the rest are never read
        account.own(course.root)
        account.own(canary)
        out = account.home / f"results-{level}.json"
        protected = (course.root, REPO / "solutions", canary)
        skip = (course.grading / "expected", course.grading / "submitted" / "hostile")
        before = _snapshot(*protected, skip=skip)
        ipc_before = run.sysv_ipc_objects()  # the host's: the account's process-level kernels share it
        started = time.monotonic()
        burner = CpuBurner(spinners) if spinners else None
        with burner or contextlib.nullcontext():
            done = account.run(f"{wrapper}{PYTHON} -m tests.hostile.run {course.root} {level} {out}"
                               + (" " + " ".join(names) if names else ""), timeout=1300)
            burning = burner.running() if burner else 0
        after = _snapshot(*protected, skip=skip)
        ipc_left = run.ipc_left_by_grading(ipc_before)
    finally:
        server.close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    time.sleep(1)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _owner(p) == account.uid]
    assert left == [], f"processes of the account outlived the grader: {left}"  # e.g. a fork bomb's children
    data = json.loads(out.read_text())
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return {"results": {name: GradingResult.from_json(r) for name, r in data["results"].items()},
            "isolation": data["isolation"], "changed": changed, "server": server.received, "course": course,
            "seconds": time.monotonic() - started, "ipc_left": ipc_left,
            "burners": (burner.processes, burning) if burner else None,
            "burner_cpu_s": burner.cpu_seconds if burner else 0.0}


# the levels' keys are what the account reaches plus "-rlimits" (no cgroup: tests/hostile/levels.py)
HOSTILE_BATCHES, HOSTILE_BATCH_IDS = batch_params(("user-rlimits", "process-rlimits"), loaded=())
# a filter like a container runtime's default: unshare, setns and clone with CLONE_NEW* refused
NAMESPACES_REFUSED = (f"{PYTHON} -c \"import os, sys; from autograder.sandbox import seccomp; "
                      "seccomp.load(seccomp.NAMESPACE_REFUSAL); os.execv(sys.argv[1], sys.argv[1:])\" ")


@pytest.fixture(scope="module")
def corpus(request, account):
    return CorpusBatches(request, lambda params, names: _ordinary_batch(account, params, names))


@pytest.fixture
def batch(request, corpus):
    """The batch of ``request.param`` graded by the account, once (tests/test_isolation.py, CorpusBatches)."""
    yield from corpus.lend(request)


def _ordinary_batch(account: Account, params: tuple, names: set[str]) -> dict:
    """The account's batch at ``user-rlimits`` (asked for), or at ``process-rlimits`` as ``auto`` reaches it with
    namespaces refused by a seccomp filter (NAMESPACES_REFUSED).

    Coverage decision: the process level asked for by name as an ordinary account is not graded as a batch of its
    own any more; its corpus is graded once, as the fallback reaches it, which proves the fallback on every case
    (before: six) and costs one account batch less. Asked for or fallen back to, it is the same policy
    (policy.for_level("process", root=False, cgroup=False, ...)); choosing "process" when asked is levels.choose's
    (tests/test_isolation.py, test_the_strongest_reachable_level_is_chosen_and_nothing_below_the_required_one), and
    root grades the process level by name. What the outer filter adds (no new namespaces) the process level never
    uses. To grade it by name again, add a batch with ``_hostile_as(account, "process", ...)``."""
    level, attempt, spinners = params
    reached = level.removesuffix("-rlimits")
    wrapper, ask = (NAMESPACES_REFUSED, "auto") if reached == "process" else ("", reached)
    batch = _hostile_as(account, ask, wrapper, names=[*sorted(names), "__after__"], spinners=spinners)
    batch["level"] = level
    print(f"hostile corpus as an ordinary account, {level} level, run {attempt}: {len(names)} cases in "
          f"{batch['seconds']:.1f} s" + (f" beside {batch['burners'][1]} spinning processes "
                                        f"({batch['burner_cpu_s']:.1f} CPU s)" if spinners else ""))
    assert batch["isolation"]["level"] == reached and batch["isolation"]["cgroup"] == "none"
    return batch


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("batch, case", case_params(HOSTILE_BATCHES, HOSTILE_BATCH_IDS), indirect=["batch"])
def test_hostile_notebook_as_an_ordinary_account(batch, case):
    assert_contained(batch, expected(case, batch["level"]))


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("batch", [b for b in HOSTILE_BATCHES if b[0] == "process-rlimits"],
                         ids=[i for b, i in zip(HOSTILE_BATCHES, HOSTILE_BATCH_IDS) if b[0] == "process-rlimits"],
                         indirect=True)
def test_namespaces_refused_by_seccomp_fall_back_to_the_process_level(batch):
    """``auto`` with namespaces refused (the process-rlimits batch is graded so: _ordinary_batch) reaches the process
    level, which holds on the cases that attack what namespaces would have hidden."""
    assert batch["isolation"]["level"] == "process", batch["isolation"]
    by_name = {c.name: c for c in CASES}
    failures = []
    for name in REFUSED_NAMESPACE_CASES[:-1]:  # every case asserted, so one failure does not hide another
        try:
            assert_contained(batch, expected(by_name[name], "process-rlimits"))
        except AssertionError as exc:
            failures.append(f"{name}: {str(exc)[:500]}")
    assert not failures, "\n".join(failures)


@pytest.mark.timeout(300)
def test_unwritable_gradebook_gives_one_clear_line(account):
    course = Course(_course_copy(account.home / "readonly").root)
    submissions.write_submission(course, "someone", CHAPTER, submissions.blank(course, CHAPTER))
    (course.grading / "gradebook.db").write_bytes(b"")  # root's, mode 644: the account cannot write it
    subprocess.run(["chown", "-R", f"{account.name}:{account.name}", str(course.grading / "submitted")], check=True)
    done = account.run(f"{PYTHON} -m autograder grade {CHAPTER} --course {course.root} --workers 1 --no-progress",
                       timeout=280)
    assert done.returncode == 2
    assert "Traceback" not in done.stdout + done.stderr
    err = [line for line in done.stderr.splitlines() if line.strip()]
    assert err == [f"grading stopped: cannot write the gradebook {course.grading / 'gradebook.db'}: permission denied "
                   f"for this account (uid {account.uid}); give it write access to {course.grading / 'gradebook.db'} "
                   "and its folder, or pass --db with a gradebook it can write"], done.stderr
