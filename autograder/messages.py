"""``python -m autograder messages update|compile|status [--check]``: the catalogues of the course's own messages
(issue 45), as the chapters' catalogues are kept for their text (autograder/translations.py).

Two domains, each keyed by the English text of its messages:

- ``attention_course``: what the learner package says (check messages, the self-check's report, its commands),
  every literal passed to ``tr(...)`` or ``N_(...)`` in ``attention_course/`` (:mod:`attention_course.language`);
- ``autograder``: the grader's own sentences on feedback pages, held pages and the class report, every literal
  passed to ``tr(...)`` or ``N_(...)`` in ``autograder/`` (:mod:`autograder.class_language`).

``update`` brings ``locales/<lang>/LC_MESSAGES/<domain>.po`` in line with the code the way Babel's
``update_catalog`` does (a new message comes in untranslated, one whose English changed comes back *fuzzy* with
its old translation, one that went away leaves the catalogue), then compiles. ``compile`` writes the learner
package's compiled catalogue, ``attention_course/data/attention_course.<lang>.json``: the wheel a
learner installs carries it, without the repository (the grader reads ``autograder.po`` itself). ``status``
counts translated, fuzzy and untranslated messages. With ``--check``, ``update`` changes nothing and exits 1 when
a catalogue's keys differ from the code's messages, ``status`` exits 1 when a catalogue is not complete.
``tests/test_messages.py`` asks the same questions in CI.

A translator edits the ``msgstr`` lines of the ``.po`` (the glossary: ``locales/zh_CN/glossary.md``), keeps every
``{field}`` of the English, removes ``fuzzy`` once an entry is right again, and runs ``compile``.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from attention_course import language

from .course import REPO_ROOT

MARKERS = ("tr", "N_")  # the lookup and the mark-for-later; their first argument is the message
LANGUAGES = tuple(lang for lang in language.LANGUAGES if lang != language.ENGLISH)
HEADER = ("# {lang} translation of the course's own messages ({domain}).\n"
          "# Keys are the English messages of {domain}/ (`python -m autograder messages update` keeps them in line).\n"
          "# Edit msgstr lines only; keep every {{field}} of the English; remove `fuzzy` once an entry is right.\n"
          "# The terms: locales/{lang}/glossary.md.\n"
          "#")
WIDTH = 100


@dataclass(frozen=True)
class Domain:
    name: str
    package: Path  # the code whose messages it holds

    def catalogue(self, lang: str, root: Path = REPO_ROOT) -> Path:
        return root / "locales" / lang / "LC_MESSAGES" / f"{self.name}.po"


DOMAINS = (Domain("attention_course", REPO_ROOT / "attention_course"), Domain("autograder", REPO_ROOT / "autograder"))


def compiled_path(lang: str) -> Path:
    """Where the learner package's compiled catalogue lives (what :func:`attention_course.language.catalogue`
    reads)."""
    return language.compiled_catalogue(lang)


def messages_in_code(package: Path) -> dict[str, list[str]]:
    """``{English message: [files that use it]}``: the first argument of every ``tr(...)``/``N_(...)`` call with a
    literal string in the package's Python files (a call with anything else as its message is an error: the
    catalogue could not know it)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(package.parent).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name not in MARKERS:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                files = found.setdefault(first.value, [])
                if where not in files:
                    files.append(where)
    return found


def dynamic_lookups(package: Path) -> list[str]:
    """``file:line`` of every ``tr(x)`` whose message is not a literal: allowed only for a name or subscript whose
    text was marked with ``N_`` where it was written (the catalogue test checks that every such text exists)."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tr"
                    and node.args and not isinstance(node.args[0], ast.Constant)):
                out.append(f"{path.relative_to(package.parent).as_posix()}:{node.lineno}")
    return out


def template(domain: Domain, lang: str) -> Catalog:
    catalog = Catalog(locale=lang, project="Attention from scratch", domain=domain.name, fuzzy=False,
                      header_comment=HEADER.format(lang=lang, domain=domain.name),
                      msgid_bugs_address="https://github.com/attention-from-scratch")
    for msgid, files in messages_in_code(domain.package).items():
        catalog.add(msgid, locations=[(f, None) for f in files], flags=("python-brace-format",) if "{" in msgid else ())
    return catalog


def read(path: Path) -> Catalog | None:
    if not path.is_file():
        return None
    with open(path, "rb") as fh:
        return read_po(fh)


def updated(domain: Domain, lang: str, root: Path = REPO_ROOT) -> Catalog:
    """The catalogue as ``update`` writes it: the existing translations carried over to the code's messages."""
    fresh = template(domain, lang)
    old = read(domain.catalogue(lang, root))
    if old is None:
        return fresh
    old.header_comment = fresh.header_comment
    created = old.creation_date  # Babel's update stamps the template's time: a no-op update must change nothing
    old.update(fresh, update_header_comment=True)
    old.creation_date = created
    old.obsolete.clear()  # a message the code no longer has leaves (a changed one came back fuzzy above)
    return old


def po_text(catalog: Catalog) -> bytes:
    out = io.BytesIO()
    write_po(out, catalog, width=WIDTH, include_lineno=False, ignore_obsolete=True)
    return out.getvalue()


def translated(catalog: Catalog) -> dict[str, str]:
    """What a compiled catalogue holds: every entry with a translation that is not fuzzy."""
    return {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


def compile_catalogue(lang: str, root: Path = REPO_ROOT) -> Path:
    """Compile ``attention_course.po`` of ``lang`` into the learner package (see :mod:`attention_course.language`)."""
    domain = DOMAINS[0]
    catalog = read(domain.catalogue(lang, root))
    if catalog is None:
        raise SystemExit(f"messages: no {domain.catalogue(lang, root)} (run `python -m autograder messages update`)")
    target = compiled_path(lang)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(compiled_text(catalog), encoding="utf-8")
    return target


def compiled_text(catalog: Catalog) -> str:
    """The compiled form of a catalogue, byte for byte what ``compile`` writes (sorted: a diff shows what changed)."""
    return json.dumps(translated(catalog), ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def compiled_table(lang: str) -> dict[str, str]:
    """The messages the learner package's compiled catalogue holds (its header left out)."""
    try:
        return json.loads(compiled_path(lang).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@dataclass
class Counts:
    translated: int = 0
    fuzzy: int = 0
    untranslated: int = 0

    @property
    def complete(self) -> bool:
        return not self.fuzzy and not self.untranslated


def counts(catalog: Catalog) -> Counts:
    c = Counts()
    for m in catalog:
        if not m.id:
            continue
        if m.fuzzy:
            c.fuzzy += 1
        elif m.string:
            c.translated += 1
        else:
            c.untranslated += 1
    return c


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder messages", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("update", "compile", "status"))
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when out of line")
    args = parser.parse_args(argv)
    bad = 0
    for lang in LANGUAGES:
        for domain in DOMAINS:
            path = domain.catalogue(lang)
            if args.action == "update":
                new = updated(domain, lang)
                old = read(path)
                same = old is not None and {m.id for m in old if m.id} == {m.id for m in new if m.id}
                if args.check:
                    bad += not same
                    print(f"{path.relative_to(REPO_ROOT)}: {'in line with the code' if same else 'out of line'}")
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(po_text(new))
                print(f"{path.relative_to(REPO_ROOT)}: {len([m for m in new if m.id])} messages")
            elif args.action == "status":
                catalog = read(path)
                if catalog is None:
                    print(f"{path.relative_to(REPO_ROOT)}: missing")
                    bad += 1
                    continue
                c = counts(catalog)
                bad += args.check and not c.complete
                print(f"{path.relative_to(REPO_ROOT)}: {c.translated} translated, {c.fuzzy} fuzzy, "
                      f"{c.untranslated} untranslated")
        if args.action in ("update", "compile") and not args.check:
            print(f"compiled {compile_catalogue(lang).relative_to(REPO_ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
