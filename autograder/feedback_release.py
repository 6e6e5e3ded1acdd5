"""Release one learner's feedback page into nbgrader's exchange, where ``nbgrader fetch_feedback`` and the
Assignments tab's "Fetch Feedback" find it: the sink of ``serve`` (autograder/serve.py) after each result.

nbgrader's ``release_feedback`` walks every learner's page of a chapter in one process; the service releases one
page as soon as it is graded, so it writes the same file that command would: the page under
``<exchange>/<course>/feedback/<name>.html``, where the name is nbgrader's ``notebook_hash`` of the submission's
secret (``submission_secret.txt``, which the learner's own submit wrote and which ``fetch_feedback`` reads from the
learner's cache of that submission) and the notebook's id. Only the exchange files that discovery read and
validated are used (``learner_files.feedback_exchange_files``: without a valid secret the page goes under a name
nobody fetches). The copy is atomic (a temporary name, then a rename), as nbgrader's is, so a learner fetching
at that moment gets the old page or the new one, never half of one.

A submission the feedback budget holds (autograder/feedback_budget.py) gets a notice page under the same name,
saying when it arrived and when it will be graded; the graded page replaces it.
"""
from __future__ import annotations

import datetime as _dt
import html
import os
import stat
from pathlib import Path

from nbgrader.utils import notebook_hash

from . import learner_files
from .atomic_files import write_atomic_bytes
from .class_language import page_language, tr
from .course import COURSE_ID

# The mode nbgrader's release_feedback leaves on a page (its copy inherits the source's 0644): the learner's fetch
# runs under the learner's own account and must read it; the folder (0711, as nbgrader makes it) lets nobody list the names.
PAGE_MODE = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH
FOLDER_MODE = stat.S_IRWXU | stat.S_IXGRP | stat.S_IXOTH


def feedback_folder(exchange: Path) -> Path:
    return Path(exchange) / COURSE_ID / "feedback"


def page_name(exchange_files: dict[str, bytes], chapter: str) -> str:
    """The file name ``fetch_feedback`` looks for: nbgrader's hash of the submission's secret and notebook id."""
    secret = learner_files.feedback_exchange_files(exchange_files)["submission_secret.txt"]
    return notebook_hash(secret=secret.decode("utf-8", "replace"), notebook_id=chapter) + ".html"


def release(exchange: Path, exchange_files: dict[str, bytes], chapter: str, page: bytes) -> Path:
    """Put ``page`` where this submission's learner fetches it; returns its path."""
    folder = feedback_folder(exchange)
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, FOLDER_MODE)
    path = folder / page_name(exchange_files, chapter)
    write_atomic_bytes(path, page)
    os.chmod(path, PAGE_MODE)
    return path


def graded_page(course_grading: Path, student: str, chapter: str) -> bytes | None:
    """The feedback page the grader wrote for this learner and chapter (outputs.write_outputs), or None."""
    path = course_grading / "feedback" / student / chapter / f"{chapter}.html"
    try:
        return path.read_bytes()
    except OSError:
        return None


def held_page(chapter: str, arrived: str, used: int, budget: str, until: _dt.datetime, reason: str) -> bytes:
    """The notice a held submission's learner fetches: when it arrived, why it waits, and until when (UTC)."""
    when = f"{until:%Y-%m-%d %H:%M} UTC"
    esc = html.escape
    # Written in the class's language (the caller's attention_course.language.speaking); ``reason`` is one of
    # feedback_budget's sentences, in English.
    text = (f"<!DOCTYPE html>\n<html lang=\"{page_language()}\"><head><meta charset=\"utf-8\"><title>"
            + esc(tr("{chapter}: feedback later", chapter=chapter)) + "</title></head>\n<body>\n<h1>"
            + esc(tr("{chapter}: your submission is kept", chapter=chapter)) + "</h1>\n<p>"
            + (esc(tr("Your submission arrived {arrived}.", arrived=arrived)) if arrived
               else esc(tr("Your submission arrived at the exchange."))) + "</p>\n<p>"
            + esc(tr(reason)) + " " + esc(tr("You have had {used} graded feedback page(s) for this chapter within "
                                             "the course's budget of {budget}.", used=used, budget=budget))
            + "</p>\n<p>" + tr("It will be graded at about <strong>{when}</strong>; fetch feedback again after that "
                                "time and this page is replaced by your graded feedback. A newer submission before "
                                "then takes its place.", when=esc(when)) + "</p>\n</body></html>\n")
    return text.encode("utf-8")
