"""``python -m autograder translations update|status``: the gettext catalogues of the chapters and the kit (issue 45).

``locales/<lang>/LC_MESSAGES/<chapter>.po`` holds the translation of each unit of the chapter's **English release**
(``chapters/<chapter>/<chapter>.ipynb``, what a learner sees: :mod:`autograder.notebook_text` says what a unit is),
keyed by its English text; ``kit.po`` holds the texts the release and the kit add around the chapters
(:mod:`autograder.kit_texts`: "Get the course kit" and the kit's README); ``<chapter>.checks.po`` holds the hints
of the chapter's test cells (:mod:`autograder.check_hints`), each entry's ``#.`` comment saying whether it is
visible (in the learner's release) or hidden (only in the grader's hidden tests), and ``update`` compiles the
visible ones' translations into the learner package. ``update`` brings every catalogue in line with its English the
way Babel's ``update_catalog`` does: a new unit comes in untranslated, a unit whose English changed comes back
*fuzzy* with its old translation and the old English (``#| msgid``) for the translator to compare, a unit that went
away becomes obsolete (``#~``) and keeps its translation for reuse (an untranslated one is dropped). ``status``
counts, per catalogue, what is translated, fuzzy, untranslated and obsolete; ``--check`` makes either command exit
1 when something is out of line (``update --check``: a catalogue whose keys differ from
its English; ``status --check``: a catalogue that is not complete).

A fuzzy or empty entry is never used: the translated release shows the English of that unit
(autograder/translated_release.py) and tests/test_translations.py fails until it is translated.

A translator checks a file with ``msgfmt --check-format -o /dev/null FILE`` (gettext's syntax check) and
``pytest tests/test_translations.py -m unit -k CHAPTER`` (complete, placeholders kept, release regenerated).
"""
from __future__ import annotations

import argparse
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat
from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import normalize, read_po, unescape, write_po

from attention_course import language as learner_language

from . import check_hints, kit_texts, notebook_text
from .course import COURSE_ID, TRANSLATED_CHAPTERS, Course

LANGUAGES = {"zh_CN": "Chinese (Simplified) <https://github.com/attention-from-scratch>"}
DEFAULT_LANGUAGE = "zh_CN"
# What a user may type for a language (``--lang zh``), by the gettext name the catalogues use.
LANGUAGE_NAMES = {"zh": "zh_CN", "zh_CN": "zh_CN", "zh-CN": "zh_CN", "zh_Hans": "zh_CN", "zh-Hans": "zh_CN"}
KIT_CATALOGUE = "kit"  # the domain of kit_texts' translations
HEADER = ("# {lang} translation of chapter {chapter} of Attention from scratch.\n"
          "# Its keys come from chapters/{chapter}/{chapter}.ipynb\n"
          "# (`python -m autograder translations update` keeps them in line).\n"
          "# Edit msgstr lines only; remove an entry's `fuzzy` flag once it is right again.\n"
          "# The terms: locales/{lang}/glossary.md. A location's number is the cell's index.\n"
          "#")
KIT_HEADER = ("# {lang} translation of the texts the release and the kit add around the chapters\n"
              "# (autograder/kit_texts.py): the first cell of every chapter and the kit's README.\n"
              "# Keep every {{field}}: it is filled in after translation.\n"
              "#")
CHECKS_SUFFIX = ".checks"  # <chapter>.checks: the hints of the chapter's test cells (autograder/check_hints.py)
CHECKS_HEADER = ("# {lang} translation of the hints of chapter {chapter}'s checks (hint= and describe= of its test\n"
                 "# cells), shown after a failed check's symptom. Keys: visible ones from\n"
                 "# chapters/{chapter}/{chapter}.ipynb, hidden ones from the hidden tests of\n"
                 "# solutions/{chapter}/{chapter}.ipynb (`python -m autograder translations update`).\n"
                 "# Each entry's `#.` comment says visible or hidden: a hidden hint's translation reaches only the\n"
                 "# grader, never a learner. Keep every {{field}} of a key. The terms: locales/{lang}/glossary.md.\n"
                 "#")
WIDTH = 100  # wider than gettext's 76: paragraphs of markdown wrap into fewer, easier-to-read lines

Translate = Callable[[str], "str | None"]


def language(name: str) -> str:
    """The gettext language ``name`` means (``zh`` -> ``zh_CN``); SystemExit for one without catalogues."""
    if name in LANGUAGE_NAMES and LANGUAGE_NAMES[name] in TRANSLATED_CHAPTERS:
        return LANGUAGE_NAMES[name]
    raise SystemExit(f"no translation into {name!r} (languages: {', '.join(sorted(LANGUAGE_NAMES))})")


def catalogue_dir(course: Course, lang: str = DEFAULT_LANGUAGE) -> Path:
    return course.locales / lang / "LC_MESSAGES"


def catalogue_path(course: Course, domain: str, lang: str = DEFAULT_LANGUAGE) -> Path:
    """``locales/<lang>/LC_MESSAGES/<domain>.po``: ``domain`` is a chapter id or :data:`KIT_CATALOGUE`."""
    return catalogue_dir(course, lang) / f"{domain}.po"


def domains(course: Course) -> list[str]:
    """The catalogues this module keeps: every chapter's, every chapter's check hints and the kit's."""
    return [*course.chapters(), *(checks_domain(ch) for ch in course.chapters()), KIT_CATALOGUE]


def checks_domain(chapter: str) -> str:
    """The catalogue of the hints of ``chapter``'s checks: ``<chapter>.checks``."""
    return chapter + CHECKS_SUFFIX


def hint_entries(course: Course, chapter: str) -> list[check_hints.Hint]:
    """The hints of the chapter's test cells: visible ones from its English release, hidden ones from the
    hidden tests of its solution notebook."""
    return check_hints.chapter_hints(check_hints.read(course.release_notebook(chapter)),
                                     check_hints.read(course.source_notebook(chapter)))


def visible_hints(course: Course, chapter: str) -> set[str]:
    """The English of the hints a learner's release of ``chapter`` shows."""
    return {h.msgid for h in hint_entries(course, chapter) if h.visibility == check_hints.VISIBLE}


def compiled_hints_path(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> Path:
    """``attention_course/data/<chapter>.checks.<lang>.json``: the visible hints' translations, package data."""
    package_data = course.root / learner_language.LOCALE_DIR.relative_to(learner_language.PACKAGE.parent)
    return learner_language.compiled_catalogue(lang, checks_domain(chapter), package_data)


def compiled_hints_text(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """What the learner package carries of the chapter's hints: every translated, non-fuzzy entry of
    ``<chapter>.checks.po`` whose English the release shows, never a hidden test's (sorted, so a diff shows what
    changed)."""
    path = catalogue_path(course, checks_domain(chapter), lang)
    table = {m.id: m.string for m in read_catalogue(path) if m.id and m.string and not m.fuzzy} \
        if path.is_file() else {}
    shown = visible_hints(course, chapter)
    return json.dumps({k: v for k, v in table.items() if k in shown}, ensure_ascii=False, indent=1,
                      sort_keys=True) + "\n"


def compile_hints(course: Course, chapter: str, lang: str = DEFAULT_LANGUAGE) -> bool:
    """Write the chapter's compiled visible hints if they changed; whether it wrote."""
    target, text = compiled_hints_path(course, chapter, lang), compiled_hints_text(course, chapter, lang)
    if target.is_file() and target.read_text(encoding="utf-8") == text:
        return False
    target.write_text(text, encoding="utf-8")
    return True


def release_entries(course: Course, chapter: str) -> list[notebook_text.Entry]:
    """The units of the chapter's English release (the cells the release adds are the kit catalogue's)."""
    nb = nbformat.read(course.release_notebook(chapter), as_version=4)
    return notebook_text.entries(nb, skip=kit_texts.ADDED_CELLS)


def kit_entries() -> list[notebook_text.Entry]:
    return [notebook_text.Entry(unit.msgid, 0, f"{name}: {unit.kind}")
            for name, text in (("Get the course kit (first cell of every chapter, the book's front page)",
                                kit_texts.INSTALL),
                               ("the kit's README.md", kit_texts.README),
                               ("the kit's README.md, where PyTorch comes from (ends the sentence before it)",
                                kit_texts.TORCH_NOTE))
            for unit in notebook_text.markdown_units(text)]


def template(course: Course, domain: str, lang: str = DEFAULT_LANGUAGE) -> Catalog:
    """The units of a chapter's release, of its checks' hints, or of the kit's texts, as an empty catalogue (a .pot)."""
    if domain == KIT_CATALOGUE:
        catalog = new_catalogue(domain, lang, KIT_HEADER.format(lang=lang))
        where, found = "autograder/kit_texts.py", kit_entries()
    elif domain.endswith(CHECKS_SUFFIX):
        chapter = domain.removesuffix(CHECKS_SUFFIX)
        catalog = new_catalogue(domain, lang, CHECKS_HEADER.format(lang=lang, chapter=chapter))
        release = course.release_notebook(chapter).relative_to(course.root).as_posix()
        source = course.source_notebook(chapter).relative_to(course.root).as_posix()
        hints = hint_entries(course, chapter)
        found = [notebook_text.Entry(h.msgid, h.cell, h.context) for h in hints]
        return add_entries(catalog, found, [release if h.visibility == check_hints.VISIBLE else source for h in hints])
    else:
        catalog = new_catalogue(domain, lang, HEADER.format(lang=lang, chapter=domain))
        where = course.release_notebook(domain).relative_to(course.root).as_posix()
        found = release_entries(course, domain)
    return add_entries(catalog, found, [where] * len(found))


def add_entries(catalog: Catalog, found: list[notebook_text.Entry], wheres: list[str]) -> Catalog:
    """``catalog`` with one entry per distinct English of ``found`` (each found in the file ``wheres[i]``)."""
    for entry, where in zip(found, wheres):
        location = (where, entry.cell or None)
        if entry.msgid in catalog:  # the same English twice: one translation, every place listed
            known = catalog[entry.msgid]
            if location not in known.locations:
                known.locations.append(location)
            if entry.context not in known.auto_comments:
                known.auto_comments.append(entry.context)
        else:
            catalog[entry.msgid] = plain_message(entry.msgid, locations=[location], auto_comments=[entry.context])
    return catalog


def plain_message(msgid: str, **kwargs) -> Message:
    """A catalogue entry as Babel makes it (with the format flags it guesses from the English, as every Babel-based
    tool a translator uses does: our writes and theirs agree, so neither rewrites the other's file)."""
    return Message(msgid, **kwargs)


def new_catalogue(domain: str, lang: str, header: str) -> Catalog:
    return Catalog(locale=lang, domain=domain, project=COURSE_ID, version="1", header_comment=header,
                   language_team=LANGUAGES.get(lang), fuzzy=False)


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
    out = io.BytesIO()
    for message in catalog:
        # Babel re-guesses python-format from a '%' in the English ("90% of the text") on every merge, and a
        # translator's no-python-format then sits beside it: msgfmt takes the last flag and rejects the entry.
        # Nothing in these catalogues is %-formatted, so the translator's word wins.
        if "no-python-format" in message.flags:
            message.flags.discard("python-format")
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


def translator(catalog: Catalog | None) -> Translate:
    """``msgid -> translation`` from a catalogue's finished entries: a fuzzy or empty entry answers None."""
    table = {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy} if catalog else {}
    return table.get


def lookup(course: Course, domain: str, lang: str) -> Translate:
    """:func:`translator` of the catalogue ``domain`` in ``lang`` (one that answers nothing where there is none)."""
    path = catalogue_path(course, domain, lang)
    return translator(read_catalogue(path) if path.is_file() else None)


def updated(course: Course, domain: str, lang: str = DEFAULT_LANGUAGE) -> Catalog:
    """The catalogue brought in line with its English (Babel's merge), without writing it."""
    fresh = template(course, domain, lang)
    path = catalogue_path(course, domain, lang)
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


def update(course: Course, domain: str, lang: str = DEFAULT_LANGUAGE) -> bool:
    """Write the updated catalogue ``domain`` if the merge changed what it says (not merely how a translator's tool
    laid it out: the file is theirs); whether it wrote."""
    path = catalogue_path(course, domain, lang)
    data = po_bytes(updated(course, domain, lang))
    if path.is_file() and po_bytes(read_catalogue(path)) == data:
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

    def __str__(self) -> str:
        return (f"{self.translated} translated, {self.fuzzy} fuzzy, {self.untranslated} untranslated, "
                f"{self.obsolete} obsolete")


def counts(catalog: Catalog) -> Counts:
    messages = [m for m in catalog if m.id]
    fuzzy = sum(1 for m in messages if m.fuzzy)
    untranslated = sum(1 for m in messages if not m.fuzzy and not m.string)
    return Counts(len(messages) - fuzzy - untranslated, fuzzy, untranslated, len(catalog.obsolete))


def stale_keys(course: Course, domain: str, lang: str = DEFAULT_LANGUAGE) -> tuple[set[str], set[str]]:
    """(units of the English the catalogue lacks, catalogue keys that are no unit of the English)."""
    path = catalogue_path(course, domain, lang)
    have = {m.id for m in read_catalogue(path) if m.id} if path.is_file() else set()
    want = {m.id for m in template(course, domain, lang) if m.id}
    return want - have, have - want


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder translations", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("update", "status"))
    parser.add_argument("domains", nargs="*", metavar="CATALOGUE",
                        help=f"chapter ids or {KIT_CATALOGUE!r} (default: every chapter and the kit)")
    parser.add_argument("--lang", default=DEFAULT_LANGUAGE, help="the language (default: zh_CN)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a catalogue is out of date (update) or incomplete (status)")
    args = parser.parse_args(argv)
    lang = language(args.lang)
    course = Course()
    failed = []
    for domain in args.domains or domains(course):
        rel = catalogue_path(course, domain, lang).relative_to(course.root)
        if args.action == "update":
            if args.check:
                missing, extra = stale_keys(course, domain, lang)
                if missing or extra:
                    failed.append(domain)
                    print(f"{rel}: {len(missing)} unit(s) of the English missing, {len(extra)} key(s) no longer "
                          "in it: run `python -m autograder translations update`")
            else:
                print(f"{rel}: {'updated' if update(course, domain, lang) else 'unchanged'}")
                if domain.endswith(CHECKS_SUFFIX):  # the learner package's share of it: the visible hints
                    chapter = domain.removesuffix(CHECKS_SUFFIX)
                    compiled = compiled_hints_path(course, chapter, lang).relative_to(course.root)
                    print(f"{compiled}: {'compiled' if compile_hints(course, chapter, lang) else 'unchanged'}")
            continue
        path = catalogue_path(course, domain, lang)
        if not path.is_file():
            failed.append(domain)
            print(f"{rel}: missing (python -m autograder translations update {domain})")
            continue
        c = counts(read_catalogue(path))
        if not c.complete:
            failed.append(domain)
        print(f"{rel}: {c}{'' if c.complete else '  (incomplete)'}")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
