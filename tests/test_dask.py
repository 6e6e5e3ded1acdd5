"""Grading through a real Dask distributed cluster on loopback (a ``dask scheduler`` and two ``dask worker``
processes): the same scores as sequential grading, and the workers grade from the bytes they were sent
(course files materialised in the workers' own temporary directory), not from the instructor's tree."""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.services

from autograder import submissions
from autograder.course import Course
from autograder.feedback_release import page_name

from . import inbox
from .batch_support import (CLASS_CHAPTER, baseline, child_env, comparable, make_course, run_grade, snapshot,
                            summary_counts)
from .conftest import copy_reference_cache

CHAPTER = CLASS_CHAPTER  # chapter 1: the cluster's claims are the backend's, not a chapter's (batch_support)

DASK = str(Path(sys.executable).with_name("dask"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two single-threaded workers on 127.0.0.1; yields (address, workers' TMPDIR). One cluster for
    the file's two tests (its start, three processes importing distributed and two warm engines, is most of a
    test's cost). Both tests assert that the workers hold the shipped course files: whichever runs first proves
    that its run shipped them; the second finds them already materialised (same bytes, same hash), as a long-lived
    cluster does, so it no longer proves a shipment of its own."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    worker_tmp = tmp_path / "worker-tmp"
    worker_tmp.mkdir()
    env = child_env()
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = []
    try:
        procs.append(subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                       "--no-dashboard"], cwd=tmp_path, env=env, start_new_session=True,
                                      stdout=open(logs / "scheduler.log", "w"), stderr=subprocess.STDOUT))
        wenv = dict(env, TMPDIR=str(worker_tmp))
        for i in range(2):
            procs.append(subprocess.Popen([DASK, "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                                           "--no-dashboard", "--name", f"grader-{i}", "--local-directory",
                                           str(tmp_path / f"w{i}")],
                                          cwd=worker_tmp, env=wenv, start_new_session=True,
                                          stdout=open(logs / f"worker{i}.log", "w"), stderr=subprocess.STDOUT))
        from distributed import Client

        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        yield address, worker_tmp
    finally:
        _stop(procs[::-1])


def _shipped(worker_tmp: Path, course: Course) -> list[Path]:
    """The chapter's source notebooks the workers materialised that are byte for byte the course's."""
    source = course.source_notebook(CHAPTER).read_bytes()
    return [p for p in worker_tmp.glob(f"attention-course-grader-*/*/solutions/{CHAPTER}/{CHAPTER}.ipynb")
            if p.read_bytes() == source]


@pytest.mark.timeout(600)
def test_dask_cluster_scores_equal_sequential(cluster, tmp_path_factory):
    _, sequential, _ = baseline(tmp_path_factory)
    address, worker_tmp = cluster
    course = make_course(tmp_path_factory.mktemp("dask"), chapter=CHAPTER)
    out = run_grade(course, "--scheduler", address, chapter=CHAPTER)
    counts = summary_counts(out)
    assert counts["graded"] + counts["zero"] == len(sequential["results"]) and counts["failed"] == 0, out[-3000:]
    assert comparable(snapshot(course.db_url)) == sequential, "scores differ between the Dask cluster and 1 worker"
    assert _shipped(worker_tmp, course), "the workers did not grade from shipped course files"
    # Resuming works the same way on the cluster: nothing left to do.
    counts = summary_counts(run_grade(course, "--scheduler", address, chapter=CHAPTER))
    assert counts["graded"] + counts["zero"] == 0 and counts["up to date"] == len(sequential["results"]), counts


@pytest.mark.timeout(600)
def test_serve_grades_on_the_cluster_and_releases_each_learners_page(cluster, tmp_path):
    """``serve --scheduler``: the same service, its notebooks graded by the cluster's workers (issue 42, item 3)."""
    address, worker_tmp = cluster
    course = Course().copy_to(tmp_path / "course")
    copy_reference_cache(course.root)
    mistake = submissions.load_mistakes(course, CHAPTER)[0]
    with inbox.accounts(2, "d") as (good, bad), inbox.exchange() as exchange:
        entries = {good: inbox.submit(exchange, good, CHAPTER, submissions.reference(course, CHAPTER)),
                   bad: inbox.submit(exchange, bad, CHAPTER, submissions.with_mistake(course, CHAPTER, mistake))}
        done = subprocess.run([sys.executable, "-m", "autograder", "serve", "--once", "--no-similarity",
                               "--scheduler", address, "--course", str(course.root), "--exchange", str(exchange),
                               "--chapters", CHAPTER], capture_output=True, text=True, timeout=500,
                              cwd=course.root, env=child_env())
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        with sqlite3.connect(course.root / "grading" / "gradebook.db") as db:
            rows = {s: (score, top) for s, score, top in db.execute(
                "SELECT student, score, max_score FROM autograder_result")}
        assert rows[good][0] == rows[good][1] > rows[bad][0], rows
        for name, entry in entries.items():
            page = exchange / inbox.COURSE_ID / "feedback" / page_name(
                {"submission_secret.txt": inbox.secret_of(entry).encode()}, CHAPTER)
            assert f"{rows[name][0]:g} / {rows[name][1]:g}" in page.read_text(), name
    assert _shipped(worker_tmp, course), "the workers did not grade from shipped course files"
