"""The gradebook on a real PostgreSQL server: Debian's postgresql (installed with apt-get if absent; the test
fails, not skips, when it cannot be had) runs as an unprivileged user from a temporary directory on
127.0.0.1. Two grading commands write into it at the same time (disjoint halves of the class, one worker each),
the result equals sequential grading into SQLite, and ``nbgrader export`` reads it.

Coverage decisions (issue 44, the suite's length): the class is chapter 1's (batch_support.CLASS_CHAPTER), and each
command runs one worker, not two: a command's results are written by the command itself (its GradebookWriter),
never by its workers, so the concurrent writers into PostgreSQL are the two commands either way; a second worker per
command only added two engine starts. Several workers feeding one writer are tested by test_batch (parallel ==
sequential)."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.services

from .batch_support import (CLASS_CHAPTER, nbgrader_export, baseline, child_env, comparable, grade_cmd, make_course,
                            run_grade, snapshot, summary_counts)

CHAPTER = CLASS_CHAPTER  # chapter 1: the store's claims are the gradebook's, not a chapter's (batch_support)

PG_USER = "nobody"  # initdb and postgres refuse to run as root


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], capture_output=True, timeout=600,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.fail("PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin and `apt-get install -y "
                    "postgresql` did not provide them; run scripts/install_test_deps.sh as root")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres():
    """A throwaway PostgreSQL cluster on 127.0.0.1; yields the gradebook URL; stops and removes it after."""
    if os.geteuid() != 0:
        pytest.fail("this test starts PostgreSQL as an unprivileged user and must run as root")
    bindir = _pg_bin()
    user = pwd.getpwnam(PG_USER)
    base = Path(tempfile.mkdtemp(prefix="attention-pg-"))
    os.chown(base, user.pw_uid, user.pw_gid)
    data = base / "data"
    port = _free_port()
    as_pg = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd=base,
                 env={"PATH": f"{bindir}:/usr/bin:/bin", "LC_ALL": "C", "HOME": str(base)})
    started = False
    try:
        done = subprocess.run([bindir / "initdb", "-D", data, "-U", "grader", "--auth=trust", "-E", "UTF8"],
                              capture_output=True, text=True, timeout=120, **as_pg)
        assert done.returncode == 0, f"initdb failed:\n{done.stdout}\n{done.stderr}"
        done = subprocess.run([bindir / "pg_ctl", "-D", data, "-l", base / "server.log", "-w", "-t", "60", "-o",
                               f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c max_connections=50",
                               "start"], capture_output=True, text=True, timeout=120, **as_pg)
        log = (base / "server.log").read_text() if (base / "server.log").exists() else ""
        assert done.returncode == 0, f"pg_ctl start failed:\n{done.stdout}\n{done.stderr}\n{log}"
        started = True
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=port, user="grader", dbname="postgres")
        con.autocommit = True
        con.cursor().execute("CREATE DATABASE gradebook")
        con.close()
        yield f"postgresql+psycopg2://grader@127.0.0.1:{port}/gradebook"
    finally:
        if started:
            subprocess.run([bindir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"], capture_output=True,
                           timeout=60, **as_pg)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(600)
def test_concurrent_runs_into_postgresql(postgres, tmp_path_factory):
    _, sequential, _ = baseline(tmp_path_factory)
    course = make_course(tmp_path_factory.mktemp("postgres"), chapter=CHAPTER)
    # Two instructors' runs at the same time, each on half of the class, into the same PostgreSQL gradebook.
    halves = [course.root / "half-a", course.root / "half-b"]
    students = sorted(p.name for p in (course.grading / "submitted").iterdir())
    for i, student in enumerate(students):
        shutil.copytree(course.grading / "submitted" / student, halves[i % 2] / student)
    logs = [open(course.root / f"run-{i}.log", "w") for i in range(2)]
    runs = [subprocess.Popen(grade_cmd(course, "--workers", "1", "--db", postgres, "--submitted", str(half),
                                       chapter=CHAPTER),
                             cwd=course.root, env=child_env(), stdout=logs[i], stderr=subprocess.STDOUT,
                             start_new_session=True) for i, half in enumerate(halves)]
    try:
        for run in runs:
            run.wait(400)
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(30)
        for f in logs:
            f.close()
    outputs = [(course.root / f"run-{i}.log").read_text() for i in range(2)]
    for run, out in zip(runs, outputs):
        assert run.returncode == 0, out[-4000:]
        assert "database is locked" not in out
    assert sum(summary_counts(o)["graded"] + summary_counts(o)["zero"] for o in outputs) == len(students)

    assert comparable(snapshot(postgres)) == sequential, "PostgreSQL gradebook differs from sequential SQLite"
    counts = summary_counts(run_grade(course, "--db", postgres, chapter=CHAPTER))
    assert counts["up to date"] == len(students) and counts["graded"] + counts["zero"] == 0, counts

    out = course.root / "export.csv"
    exported = nbgrader_export(course, postgres, out)
    for key, r in sequential["results"].items():
        student, chapter = key.split("/")
        assert chapter == CHAPTER and exported[(chapter, student)] == r["score"], key
