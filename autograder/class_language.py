"""The class's language (issue 45): the language the grader writes a class's feedback pages, its check messages
and its class report in, and the lookup of the grader's own sentences.

The course configuration says it, in the file stock nbgrader and the grader both read
(``autograder/nbgrader_config.py``, loaded by :func:`autograder.late_policy.load_config`)::

    c.AttentionCourse.language = "zh_CN"   # or "zh"; "en" (the default) when unset

A value that names no language the course has reads as English. The grader never takes the language from its
environment or from a learner's kernel: the trusted process decides every check and writes every message
(:mod:`autograder.trusted`) inside :func:`attention_course.language.speaking` with the class's language, so a
notebook that sets ``ATTENTION_COURSE_LANG`` in its kernel changes its own kernel's text and nothing the grader
writes. A notebook's own language does not matter either: a class may mix English and Chinese notebooks (the
same grade_ids, the same checks), and every learner's page is in the class's language.

The grader's sentences are keyed by their English text in ``locales/<lang>/LC_MESSAGES/autograder.po`` (read with
Babel; an untranslated or fuzzy entry reads in English). ``python -m autograder messages`` keeps it in line with
the code (autograder/messages.py). Messages of the check library come from ``attention_course.po``
(:mod:`attention_course.language`). The hints of the checks (``hint=`` of the test cells) come from every chapter's
``<chapter>.checks.po``, visible and hidden ones alike: :func:`grading` makes a block speak the class's language
with them (the learner package carries only the visible ones).
"""
from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

from babel.messages.pofile import read_po

from attention_course.language import ENGLISH, HINTS_SUFFIX, chosen, hints_from, normalise, render, speaking

from .course import REPO_ROOT, Course

CONFIG_SECTION = "AttentionCourse"
CONFIG_KEY = "language"
DOMAIN = "autograder"
LOCALES = REPO_ROOT / "locales"


def class_language(course: Course) -> str:
    """The class's language from the course configuration: one of ``attention_course.language.LANGUAGES``."""
    section = course_config(course).get(CONFIG_SECTION) or {}
    return normalise(section.get(CONFIG_KEY)) or ENGLISH


def course_config(course: Course):
    """The course's nbgrader configuration, read by traitlets as nbgrader reads it: the file
    :func:`autograder.late_policy.config_file` names. Read here with traitlets alone: late_policy imports nbgrader
    (4 s on a busy machine), which a grading worker, and a grade run with nothing to grade, never load otherwise
    (tests/test_batch.py)."""
    from traitlets.config.loader import PyFileConfigLoader  # as late_policy.load_config: only when asked

    path = course.root / "autograder" / "nbgrader_config.py"
    if not path.is_file():  # a course with no configuration of its own (a bare copy) sets no language: English
        return {}
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def catalogue_path(language: str, domain: str = DOMAIN, locales: Path = LOCALES) -> Path:
    return locales / language / "LC_MESSAGES" / f"{domain}.po"


@functools.lru_cache(maxsize=None)
def translations(language: str, domain: str = DOMAIN, locales: Path = LOCALES) -> dict[str, str]:
    """``{English: translation}`` of every translated, non-fuzzy entry of the grader's catalogue."""
    if language == ENGLISH:
        return {}
    try:
        with open(catalogue_path(language, domain, locales), "rb") as fh:
            catalog = read_po(fh)
    except OSError:
        return {}
    return {m.id: m.string for m in catalog if m.id and isinstance(m.id, str) and m.string and not m.fuzzy}


def page_language() -> str:
    """The language of the page being written, as HTML's ``lang`` attribute says it (``en``, ``zh-CN``): a browser
    picks its fonts by it (a Chinese page drawn with a Japanese font's glyphs is legible but wrong)."""
    return (chosen() or ENGLISH).replace("_", "-")


def tr(msgid: str, **fields) -> str:
    """One of the grader's sentences in the language chosen for this grading (English unless a caller chose one
    with ``attention_course.language.speaking``), its named fields filled. The first argument is a literal
    (tests/test_messages.py compares every one with the catalogue)."""
    language = chosen() or ENGLISH
    return render(translations(language).get(msgid, msgid), msgid, fields)


@functools.lru_cache(maxsize=None)
def hint_translations(language: str, locales: Path = LOCALES) -> dict[str, str]:
    """``{English: translation}`` of every translated, non-fuzzy check hint of every chapter, hidden ones included:
    for the trusted side only (the learner package carries the visible ones)."""
    table: dict[str, str] = {}
    if language == ENGLISH:
        return table
    for path in sorted((locales / language / "LC_MESSAGES").glob(f"*{HINTS_SUFFIX}.po")):
        table.update(translations(language, path.name.removesuffix(".po"), locales))
    return table


def write_hint_table(language: str, path: Path) -> Path:
    """The grader's hint table for ``language`` (hidden hints included) as the file the kernels of stock nbgrader
    read (``attention_course.language.GRADER_HINTS``)."""
    path.write_text(json.dumps({"language": language, "hints": hint_translations(language)}, ensure_ascii=False),
                    encoding="utf-8")
    return path


@contextlib.contextmanager
def grading(language: str | None):
    """A block that decides checks and writes messages for a class in ``language``: its sentences and the checks'
    hints (hidden ones too) in that language."""
    with speaking(language), hints_from(hint_translations):
        yield
