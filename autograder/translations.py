"""``python -m autograder translations update|status``: the chapters' gettext catalogues (issue 45).

``locales/<lang>/LC_MESSAGES/<chapter>.po`` holds the translation of each unit of the chapter's **English release**
(``chapters/<chapter>/<chapter>.ipynb``, what a learner sees: :mod:`autograder.notebook_text` says what a unit is),
keyed by its English text. ``update`` brings every catalogue in line with its release the way Babel's
``update_catalog`` does: a new unit comes in untranslated, a unit whose English changed comes back *fuzzy* with
its old translation and the old English (``#| msgid``) for the translator to compare, a unit that went away becomes
obsolete (``#~``) and keeps its translation for reuse (an untranslated one is dropped). ``status`` counts, per catalogue, what is translated, fuzzy,
untranslated and obsolete; ``--check`` makes either command exit 1 when something is out of line (CI's question:
``update --check``, a catalogue whose keys differ from its release's units; ``status --check``, a catalogue that
is not complete).

A translator checks a file with ``msgfmt --check-format -o /dev/null FILE`` (gettext) or, for everything the course
demands (complete, no fuzzy entry, placeholders kept), ``pytest tests/test_translations.py -m unit -k CHAPTER``.
"""
from __future__ import annotations

import argparse
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import normalize, read_po, unescape, write_po

from . import notebook_text
from .course import COURSE_ID, Course

LANGUAGES = {"zh_CN": "Chinese (Simplified) <https://github.com/attention-from-scratch>"}
DEFAULT_LANGUAGE = "zh_CN"
HEADER = ("# {lang} translation of chapter {chapter} of Attention from scratch.\n"
          "# Its keys come from chapters/{chapter}/{chapter}.ipynb\n"
          "# (`python -m autograder translations update` keeps them in line).\n"
          "# Edit msgstr lines only; remove an entry's `fuzzy` flag once it is right again.\n"
          "# The terms: locales/{lang}/glossary.md. A location's number is the cell's index.\n"
          "#")
# Babel guesses these from the English; our units are prose and markdown, not format strings.
GUESSED_FLAGS = {"python-format", "python-brace-format"}
WIDTH = 100  # wider than gettext's 76: paragraphs of markdown wrap into fewer, easier-to-read lines


def catalogue_dir(course: Course, lang: str = DEFAULT_LANGUAGE) -> Path:
    return course.root / "locales" / lang / "LC_MESSAGES"


def catalogue_path(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> Path:
    return catalogue_dir(course, lang) / f"{chapter}.po"


def release_entries(course: Course, chapter: str) -> list[notebook_text.Entry]:
    return notebook_text.entries(nbformat.read(course.release_notebook(chapter), as_version=4))


def template(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> Catalog:
    """The chapter's units as an empty catalogue (what ``pybabel extract`` would write as a .pot)."""
    catalog = new_catalogue(chapter, lang)
    where = course.release_notebook(chapter).relative_to(course.root).as_posix()
    for entry in release_entries(course, chapter):
        if entry.msgid in catalog:  # the same English twice: one translation, every place listed
            known = catalog[entry.msgid]
            if (where, entry.cell) not in known.locations:
                known.locations.append((where, entry.cell))
            if entry.context not in known.auto_comments:
                known.auto_comments.append(entry.context)
        else:
            catalog[entry.msgid] = plain_message(entry.msgid, locations=[(where, entry.cell)],
                                                 auto_comments=[entry.context])
    return catalog


def plain_message(msgid: str, **kwargs) -> Message:
    """A message without Babel's guessed format flags: a ``%`` in prose ("50% of") or braces in LaTeX
    (``\\sqrt{d_k}``) are no format, and the flag would make ``msgfmt --check-format`` misjudge the translation
    (tests/test_translations.py checks what must survive translation)."""
    message = Message(msgid, **kwargs)
    message.flags -= GUESSED_FLAGS
    return message


def new_catalogue(chapter: str, lang: str) -> Catalog:
    return Catalog(locale=lang, domain=chapter, project=COURSE_ID, version="1",
                   header_comment=HEADER.format(lang=lang, chapter=chapter), language_team=LANGUAGES.get(lang),
                   fuzzy=False)


def read_catalogue(path: Path) -> Catalog:
    """The catalogue at ``path``, with each fuzzy entry's previous English (``#| msgid``), which Babel's reader
    would take for a translator's comment, back in ``previous_id``."""
    with path.open("rb") as f:
        catalog = read_po(f)
    for message in [*catalog, *catalog.obsolete.values()]:
        previous = [c[1:].strip() for c in message.user_comments if c.startswith("|")]
        if previous:
            message.user_comments = [c for c in message.user_comments if not c.startswith("|")]
            quoted = re.findall(r'"(?:[^"\\]|\\.)*"', " ".join(previous).removeprefix("msgid"))
            message.previous_id = ["".join(unescape(q) for q in quoted)]
    return catalog


def po_bytes(catalog: Catalog) -> bytes:
    """The catalogue as a .po file, each fuzzy entry with the English it was translated from (``#| msgid``)."""
    for message in catalog:
        message.flags -= GUESSED_FLAGS
    out = io.BytesIO()
    # Not write_po's include_previous: Babel 2.19 wraps a long previous msgid as a comment, splitting its quoted
    # string across lines, which gettext's tools and Babel's own reader reject.
    write_po(out, catalog, width=WIDTH)
    text = out.getvalue().decode("utf-8")
    for message in catalog:
        if message.id and message.fuzzy and message.previous_id:
            entry = f"\nmsgid {normalize(message.id, width=WIDTH)}\n"
            previous = f"\n#| msgid {normalize(message.previous_id[0], prefix='#| ', width=WIDTH)}"
            assert text.count(entry) == 1, f"cannot place the previous English of {message.id[:60]!r}"
            text = text.replace(entry, previous + entry)
    return text.encode("utf-8")


def updated(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> Catalog:
    """The chapter's catalogue brought in line with its release (Babel's merge), without writing it."""
    fresh = template(course, chapter, lang)
    path = catalogue_path(course, chapter, lang)
    if not path.is_file():
        return fresh
    catalog = read_catalogue(path)
    earlier = {m.id: m.previous_id for m in catalog if m.id and m.fuzzy and m.previous_id}
    catalog.update(fresh, update_creation_date=False)
    for message in catalog:  # still fuzzy from an earlier update: Babel's merge forgets what it was translated from
        if message.fuzzy and not message.previous_id and message.id in earlier:
            message.previous_id = earlier[message.id]
    for msgid in [k for k, m in catalog.obsolete.items() if not m.string]:
        del catalog.obsolete[msgid]  # nothing translated, nothing to keep for reuse
    return catalog


def update(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> bool:
    """Write the updated catalogue of ``chapter``; whether its file changed."""
    path = catalogue_path(course, chapter, lang)
    data = po_bytes(updated(course, chapter, lang))
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


@dataclass(frozen=True)
class Counts:
    translated: int
    fuzzy: int
    untranslated: int
    obsolete: int

    @property
    def complete(self) -> bool:
        return not (self.fuzzy or self.untranslated or self.obsolete)


def counts(catalog: Catalog) -> Counts:
    messages = [m for m in catalog if m.id]
    fuzzy = sum(1 for m in messages if m.fuzzy)
    untranslated = sum(1 for m in messages if not m.fuzzy and not m.string)
    return Counts(len(messages) - fuzzy - untranslated, fuzzy, untranslated, len(catalog.obsolete))


def stale_keys(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> tuple[set[str], set[str]]:
    """(units of the release the catalogue lacks, catalogue keys that are no unit of the release)."""
    path = catalogue_path(course, chapter, lang)
    have = {m.id for m in read_catalogue(path) if m.id} if path.is_file() else set()
    want = {e.msgid for e in release_entries(course, chapter)}
    return want - have, have - want


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder translations", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("update", "status"))
    parser.add_argument("chapters", nargs="*", help="chapter ids (default: all)")
    parser.add_argument("--lang", default=DEFAULT_LANGUAGE, choices=sorted(LANGUAGES))
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a catalogue is out of date (update) or incomplete (status)")
    args = parser.parse_args(argv)
    course = Course()
    chapters = args.chapters or course.chapters()
    failed = []
    for chapter in chapters:
        rel = catalogue_path(course, chapter, args.lang).relative_to(course.root)
        if args.action == "update":
            if args.check:
                missing, extra = stale_keys(course, chapter, args.lang)
                if missing or extra:
                    failed.append(chapter)
                    print(f"{rel}: {len(missing)} unit(s) of the release missing, {len(extra)} key(s) no longer "
                          "in it: run `python -m autograder translations update`")
            else:
                print(f"{rel}: {'updated' if update(course, chapter, args.lang) else 'unchanged'}")
            continue
        path = catalogue_path(course, chapter, args.lang)
        if not path.is_file():
            failed.append(chapter)
            print(f"{rel}: missing")
            continue
        c = counts(read_catalogue(path))
        if not c.complete:
            failed.append(chapter)
        print(f"{rel}: {c.translated} translated, {c.fuzzy} fuzzy, {c.untranslated} untranslated, "
              f"{c.obsolete} obsolete{'' if c.complete else '  (incomplete)'}")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
