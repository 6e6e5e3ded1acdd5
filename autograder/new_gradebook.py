"""Creating an empty nbgrader gradebook, exactly as nbgrader's ``Gradebook`` would, without its subprocess.

When nbgrader opens a database with no tables, it creates its schema and stamps the ``alembic_version`` table
with the newest migration of the installed nbgrader, which it learns by running ``alembic heads`` in a new
process (``nbgrader.api.get_alembic_version``). That process imports nbgrader again: about 2 CPU seconds per
new gradebook, and it fails where ``alembic`` is not on ``PATH``. Here the same head is read in this process
from nbgrader's own migration folder (``alembic.script.ScriptDirectory``, under 0.1 s), and the same tables
(``nbgrader.api.Base.metadata``) are created in one transaction with the stamp. nbgrader then finds a database
that exists and only opens it. tests/test_new_gradebook.py proves the result is the database nbgrader makes.

A database that already has tables is left exactly as it is: its schema and stamp are whoever made it.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

from sqlalchemy import create_engine, event, insert, inspect, text
from sqlalchemy.engine import make_url


@functools.lru_cache(maxsize=1)
def alembic_head() -> str:
    """The newest migration of the installed nbgrader (what ``alembic heads`` prints first)."""
    import nbgrader
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory(os.path.join(os.path.dirname(nbgrader.__file__), "alembic")).get_heads()
    if len(heads) != 1:  # nbgrader's migrations are one line; two heads would need alembic's own merge
        raise RuntimeError(f"nbgrader's migrations have {len(heads)} heads: {heads}")
    return heads[0]


def in_memory(db_url: str) -> bool:
    """An in-memory SQLite database lives in one connection: nothing made in another one would be seen."""
    url = make_url(db_url)
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def create(db_url: str, course_id: str | None = None) -> bool:
    """Give the database at ``db_url`` nbgrader's empty schema if it has no tables, with the row of ``course_id``
    if one is given (as nbgrader's ``Gradebook(url, course_id)`` adds it); True if it was created.

    The tables, the stamp and the course row commit together, so no one ever sees a gradebook with some tables,
    without its stamp or without its course (writers opening one new gradebook at once then never race to add the
    course row, where nbgrader's check_course would fail the loser with a logged traceback). On SQLite that needs
    the write lock from the start (``BEGIN IMMEDIATE``; Python's sqlite3 would otherwise commit each CREATE TABLE
    on its own): a second creator waits for the lock, then finds the tables. Elsewhere (PostgreSQL) DDL is
    transactional; a creator that loses the race gets the database's error (``already exists``), which callers
    retry (gradebook.retrying). An in-memory database is left to nbgrader."""
    from nbgrader.api import Base, Course

    url = make_url(db_url)
    if in_memory(db_url):
        return False
    sqlite = url.get_backend_name() == "sqlite"
    if sqlite:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    if sqlite:
        @event.listens_for(engine, "connect")
        def _driver_leaves_transactions_to_us(dbapi_connection, record):
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _take_the_write_lock(connection):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
    try:
        with engine.begin() as con:
            if inspect(con).get_table_names():  # looked at under the lock on SQLite
                return False
            Base.metadata.create_all(bind=con)
            # nbgrader's own statements (nbgrader.api.Gradebook.__init__), so the stamp is byte for byte the same
            con.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL);"))
            con.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": alembic_head()})
            if course_id:
                con.execute(insert(Course.__table__).values(id=course_id))
        return True
    finally:
        engine.dispose()
