"""A gradebook we create (autograder/new_gradebook.py) is the database nbgrader's own ``Gradebook`` creates:
the same tables, indexes and ``alembic_version`` stamp, so stock nbgrader, formgrader and nbgrader's migrations
treat it as theirs. Opening it never starts nbgrader's ``alembic`` process."""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import nbgrader.api
import pytest

from autograder import new_gradebook
from autograder.gradebook import GradebookWriter

pytestmark = pytest.mark.unit


def _schema(path: Path) -> tuple[list, list]:
    with sqlite3.connect(path) as con:
        objects = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        stamp = con.execute("SELECT version_num FROM alembic_version").fetchall()
    return objects, stamp


def _no_alembic(monkeypatch):
    def refuse():
        raise AssertionError("nbgrader started its alembic process")

    monkeypatch.setattr(nbgrader.api, "get_alembic_version", refuse)


def test_our_new_gradebook_is_the_one_nbgrader_makes(tmp_path, monkeypatch):
    theirs, ours = tmp_path / "theirs.db", tmp_path / "ours.db"
    # nbgrader's way: its Gradebook on an empty file runs `alembic heads` (beside this interpreter)
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    nbgrader.api.Gradebook(f"sqlite:///{theirs}").close()
    _no_alembic(monkeypatch)
    assert new_gradebook.create(f"sqlite:///{ours}") is True
    nbgrader.api.Gradebook(f"sqlite:///{ours}").close()  # nbgrader opens it as an existing gradebook
    assert _schema(ours) == _schema(theirs)
    assert _schema(ours)[1] == [(new_gradebook.alembic_head(),)]


def test_an_existing_database_is_left_as_it_is(tmp_path, monkeypatch):
    _no_alembic(monkeypatch)
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as con:  # someone else's gradebook, stamped with an older migration
        con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        con.execute("INSERT INTO alembic_version VALUES ('167914646830')")
    before = _schema(db)
    assert new_gradebook.create(f"sqlite:///{db}") is False
    assert _schema(db) == before


def test_a_missing_folder_is_made(tmp_path, monkeypatch):
    _no_alembic(monkeypatch)
    db = tmp_path / "grading" / "term" / "gradebook.db"
    assert new_gradebook.create(f"sqlite:///{db}") is True
    assert _schema(db)[1] == [(new_gradebook.alembic_head(),)]


def test_the_tables_and_the_stamp_commit_together(tmp_path, monkeypatch):
    """A creation that fails before its stamp leaves no table behind (Python's sqlite3 would have committed each
    CREATE TABLE on its own), so the next writer creates the whole gradebook."""
    _no_alembic(monkeypatch)
    db = tmp_path / "gradebook.db"
    def interrupted():
        raise OSError("interrupted")

    monkeypatch.setattr(new_gradebook, "alembic_head", interrupted)
    with pytest.raises(OSError):
        new_gradebook.create(f"sqlite:///{db}")
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT name FROM sqlite_master").fetchall() == []
    monkeypatch.undo()
    _no_alembic(monkeypatch)
    assert new_gradebook.create(f"sqlite:///{db}") is True


def _open_writer(url, start, errors):
    start.wait()
    try:
        with GradebookWriter(url):
            pass
    except Exception as exc:  # reported by the parent with the others
        errors.put(repr(exc))


def test_grading_runs_that_race_to_create_one_gradebook_all_open_it(tmp_path, monkeypatch):
    """Six processes (six grading runs) open the same new gradebook at once, on five new gradebooks: each run
    either creates it or waits for the lock and opens the one another created; every gradebook has one stamp."""
    import multiprocessing

    _no_alembic(monkeypatch)  # inherited by the forked runs
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    for n in range(5):
        url = f"sqlite:///{tmp_path / f'gradebook{n}.db'}"
        start = ctx.Barrier(6)
        runs = [ctx.Process(target=_open_writer, args=(url, start, errors)) for _ in range(6)]
        for run in runs:
            run.start()
        for run in runs:
            run.join(120)
        assert [run.exitcode for run in runs] == [0] * 6
        assert _schema(tmp_path / f"gradebook{n}.db")[1] == [(new_gradebook.alembic_head(),)]
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found


def test_an_in_memory_gradebook_still_opens(monkeypatch):
    """``sqlite://`` lives in one connection, so it is left to nbgrader's Gradebook (and its alembic process)."""
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert new_gradebook.create("sqlite://") is False
    with GradebookWriter("sqlite://") as writer:
        assert writer.gb.check_course("attention-from-scratch") is not None
