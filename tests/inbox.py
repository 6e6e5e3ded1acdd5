"""Submissions as nbgrader's exchange holds them, for the grading-on-submission tests and benchmark: throwaway
learner accounts, and inbox entries written the way ``nbgrader submit`` writes one (a folder
``<student>+<chapter>+<time>+<random>`` holding the notebook, then ``timestamp.txt``, then
``submission_secret.txt``, owned by the learner), without a learner process per submission."""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

COURSE_ID = "attention-from-scratch"


@contextlib.contextmanager
def accounts(n: int, tag: str = "s"):
    """``n`` throwaway system accounts (private homes), removed afterwards. Needs root: elsewhere the test is
    skipped, as the suite's other account-making tests are (tests/test_unprivileged.py)."""
    if os.geteuid() != 0:
        pytest.skip("the test makes throwaway learner accounts (useradd): run as root")
    names = [f"ag{tag}{secrets.token_hex(3)}{i:03d}" for i in range(n)]
    made = []
    try:
        for name in names:
            subprocess.run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/sh", name], check=True,
                           capture_output=True)
            made.append(name)
        yield names
    finally:
        for name in made:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


@contextlib.contextmanager
def exchange():
    """An nbgrader exchange root as nbgrader makes one (everyone may enter, the sticky bit keeps files apart),
    with the course's inbox."""
    root = Path(tempfile.mkdtemp(prefix="nbgrader-exchange-", dir="/tmp"))
    os.chmod(root, 0o1777)
    inbound = root / COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    os.chmod(root / COURSE_ID, 0o755)
    os.chmod(inbound, 0o1733)  # nbgrader's inbox: learners may add entries, not list them
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def submit(exchange_root: Path, account: str, chapter: str, nb, when: _dt.datetime | None = None) -> Path:
    """One inbox entry for ``account``, as nbgrader's submit leaves it; returns its folder. ``nb``: a notebook."""
    when = when or _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    stamp = f"{when:%Y-%m-%d %H:%M:%S.%f} UTC"
    pw = pwd.getpwnam(account)
    entry = exchange_root / COURSE_ID / "inbound" / f"{account}+{chapter}+{stamp}+{secrets.token_urlsafe(6)}"
    # written beside the inbox (same filesystem), then renamed in: the entry appears whole, never half-written
    staging = exchange_root / f".staging-{secrets.token_hex(8)}"
    staging.mkdir()
    nbformat.write(nb, staging / f"{chapter}.ipynb")
    (staging / "timestamp.txt").write_text(stamp)
    (staging / "submission_secret.txt").write_text(secrets.token_hex(64))
    for path in (staging, *staging.iterdir()):
        os.chown(path, pw.pw_uid, pw.pw_gid)
    os.rename(staging, entry)
    return entry


def secret_of(entry: Path) -> str:
    return (entry / "submission_secret.txt").read_text()
