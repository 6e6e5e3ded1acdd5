"""A gradebook we create (autograder/new_gradebook.py) is the database nbgrader's own ``Gradebook`` creates:
the same tables, indexes and ``alembic_version`` stamp, so stock nbgrader, formgrader and nbgrader's migrations
treat it as theirs. Opening it never starts nbgrader's ``alembic`` process."""
from __future__ import annotations

import os
import sqlite3
import sys
import threading
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


def test_writers_that_race_to_create_one_gradebook_all_open_it(tmp_path, monkeypatch):
    """Four writers open the same new gradebook at once (parallel grading runs): each one either creates it or
    waits and opens the one another created; the stamp is written once."""
    _no_alembic(monkeypatch)
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    start, errors = threading.Barrier(4), []

    def open_it():
        start.wait()
        try:
            with GradebookWriter(url):
                pass
        except Exception as exc:  # reported below with the others
            errors.append(repr(exc))

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _schema(tmp_path / "gradebook.db")[1] == [(new_gradebook.alembic_head(),)]
