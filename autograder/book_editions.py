"""The book's two editions (issue 45): English at the site's root (``_build/html/``), Chinese in ``zh/`` beside it.

One site, two Sphinx builds of the same book:

- The English edition is the repository itself (``_config.yml``, ``_toc.yml``, ``index.md``, ``chapters/``).
- The Chinese edition is built from a source tree generated here (:func:`write_source`), never edited by hand:
  a ``_config.yml`` derived from the English one (Sphinx's ``language``, the title and author from the
  catalogue), the same ``_toc.yml`` (the same page names, so a page and its translation sit at the same path under
  each edition's root), the Chinese releases ``chapters_zh/<ch>/<ch>.ipynb`` under ``chapters/`` (the English
  release where a chapter has none yet) and the book's own Markdown pages translated through
  ``locales/zh_CN/LC_MESSAGES/book.po`` (a paragraph with no translation stays English).
- Every page of each edition links to the same page of the other (:func:`switch_href`, rendered by
  ``book_templates/language-switch.html``), and each edition hands out its own kit (autograder/book_site.py).

``python -m autograder.book_editions build`` builds the Chinese edition into ``_build/html/zh`` after the English
one (scripts/build_book.sh, README command 1); ``... update`` brings ``book.po`` in line with the pages (a new
paragraph comes in untranslated, a changed one fuzzy: tests/test_book_editions.py fails on both).
"""
from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from babel.messages.catalog import Catalog

from . import notebook_text, translations
from .course import COURSE_ID, Course


@dataclass(frozen=True)
class Edition:
    code: str  # the course's language code (ATTENTION_COURSE_LANG, kit --lang)
    sphinx_language: str  # Sphinx's ``language``: the theme's own words and the search index's word splitting
    site_dir: str  # where the edition lies in the site, relative to the English edition's root
    label: str  # what the switch to this edition says, in its own language
    switch_title: str  # the switch's tooltip, in the same language
    hreflang: str  # BCP 47, for the link's hreflang and lang attributes
    locale: str = ""  # the catalogues' folder under locales/ (none for English, the source language)


ENGLISH = Edition(code="en", sphinx_language="en", site_dir="", label="English",
                  switch_title="Read this page in English", hreflang="en")
CHINESE = Edition(code="zh", sphinx_language="zh_CN", site_dir="zh", label="中文",
                  switch_title="阅读本页的中文版", hreflang="zh-CN", locale="zh_CN")
EDITIONS = (ENGLISH, CHINESE)
# The book's own pages that are not notebooks: translated through the book's catalogue (book.po).
BOOK_CATALOGUE = "book.po"
# Entries of book.po that are not a page's paragraph: the _config.yml values a reader sees (and _toc.yml's captions).
TRANSLATED_CONFIG_KEYS = ("title", "author")
BOOK_HEADER = ("# {lang} translation of the book's own pages of Attention from scratch: index.md, the title.\n"
               "# Generated from the pages by `python -m autograder.book_editions update`:\n"
               "# edit msgstr lines only (and remove a `fuzzy` flag once the entry is right again);\n"
               "# locales/{lang}/glossary.md gives the terms.\n"
               "#")
# The book's schematic diagrams (SVG, linked from the chapters' text): every label with a word in it (three or more
# letters) goes through book.po, a name from the code (``KVCache``, ``k_proj``) translated as itself; a symbol or a
# shape ("Q", "(Tq, d)") stays as drawn. (The chapters' plots are stored outputs, the same PNGs in both editions:
# they keep their short English axis names.)
DIAGRAMS = "assets/diagrams"
SVG_TEXT = re.compile(r"(<text\b[^>]*>)([^<]*)(</text>)")
WORD = re.compile(r"[A-Za-z]{3,}")
# Sphinx config values that name files relative to the English book's folder: absolute in the generated source.
PATH_SETTINGS = ("html_static_path", "templates_path", "html_favicon")


def edition_of(sphinx_language: str | None) -> Edition:
    """The edition a build with Sphinx's ``language`` setting is (English when unset)."""
    for edition in EDITIONS:
        if edition.sphinx_language == (sphinx_language or "en"):
            return edition
    raise ValueError(f"the book has no {sphinx_language!r} edition (editions: "
                     f"{', '.join(e.sphinx_language for e in EDITIONS)})")


def other_edition(edition: Edition) -> Edition:
    return CHINESE if edition is ENGLISH else ENGLISH


def switch_href(edition: Edition, target_uri: str) -> str:
    """The link, relative to the page at ``target_uri`` (its path in its edition: ``chapters/x/x.html``), to the same
    page in the other edition: up to this edition's root, up to the site's (from a translation), down into the
    other's folder."""
    to_root = "../" * target_uri.count("/")
    other = other_edition(edition)
    up = "../" * len(Path(edition.site_dir).parts)
    down = f"{other.site_dir}/" if other.site_dir else ""
    return f"{to_root}{up}{down}{target_uri}"


# ---------------------------------------------------------------- the book's catalogue (book.po)


def catalogue_path(course: Course, edition: Edition) -> Path:
    return translations.catalogue_dir(course, edition.locale) / BOOK_CATALOGUE


def markdown_pages(course: Course) -> list[Path]:
    """The book's own pages that are not notebooks (the ``_toc.yml`` entries with a ``.md`` file: the front page)."""
    return [course.root / f"{page}.md" for page in toc_pages(course) if (course.root / f"{page}.md").is_file()]


def diagram_labels(svg: str) -> list[str]:
    """The labels of an SVG diagram that go through the catalogue (:data:`DIAGRAMS`), as a reader sees them."""
    labels = (" ".join(html.unescape(m.group(2)).split()) for m in SVG_TEXT.finditer(svg))
    return [label for label in labels if WORD.search(label)]


def translated_diagram(svg: str, entries: Catalog) -> str:
    """The SVG with each label ``entries`` translates replaced; everything else (layout, symbols) as drawn."""
    def label(m: re.Match) -> str:
        text = " ".join(html.unescape(m.group(2)).split())
        found = translated(entries, text) if WORD.search(text) else None
        return m.group(1) + html.escape(found, quote=False) + m.group(3) if found else m.group(0)

    return SVG_TEXT.sub(label, svg)


def diagrams(course: Course) -> list[Path]:
    return sorted((course.root / DIAGRAMS).glob("*.svg"))


def new_catalogue(edition: Edition) -> Catalog:
    return Catalog(locale=edition.locale, domain="book", project=COURSE_ID, version="1",
                   header_comment=BOOK_HEADER.format(lang=edition.locale),
                   language_team=translations.LANGUAGES.get(edition.locale), fuzzy=False)


def book_template(course: Course, edition: Edition) -> Catalog:
    """book.po's keys: every unit of the book's Markdown pages, then the ``_config.yml`` values and ``_toc.yml``
    captions a reader sees. One English text is one entry (the title and the front page's heading share theirs),
    its locations saying where it occurs."""
    catalog = new_catalogue(edition)

    def add(msgid: str, where: str, comment: str) -> None:
        if msgid in catalog:
            catalog[msgid].locations.append((where, None))
            catalog[msgid].auto_comments.append(comment)
        else:
            catalog[msgid] = translations.plain_message(msgid, locations=[(where, None)], auto_comments=[comment])

    for page in markdown_pages(course):
        where = page.relative_to(course.root).as_posix()
        for unit in notebook_text.markdown_units(page.read_text()):  # split as a notebook's markdown cell is
            add(unit.msgid, where, f"{where}: {unit.kind}")
    config = yaml.safe_load((course.root / "_config.yml").read_text())
    for key in TRANSLATED_CONFIG_KEYS:
        add(config[key], "_config.yml", f"_config.yml: {key}")
    for part in toc(course).get("parts", []):
        if part.get("caption"):
            add(part["caption"], "_toc.yml", "_toc.yml: a part's caption (the navigation's heading over its chapters)")
    for svg in diagrams(course):
        where = svg.relative_to(course.root).as_posix()
        for label in diagram_labels(svg.read_text()):
            add(label, where, f"{where}: a diagram's label (keep it about as wide as the English: it sits in a drawing)")
    return catalog


def catalogue(course: Course, edition: Edition) -> Catalog:
    """``edition``'s book.po (an empty catalogue before the first ``update``)."""
    path = catalogue_path(course, edition)
    return translations.read_catalogue(path) if path.is_file() else new_catalogue(edition)


def update_catalogue(course: Course, edition: Edition) -> bool:
    """book.po brought in line with the pages and the config (Babel's merge, as ``python -m autograder translations
    update`` does for a chapter: a changed paragraph comes back fuzzy); whether the file changed."""
    path = catalogue_path(course, edition)
    merged = catalogue(course, edition)
    merged.update(book_template(course, edition), update_creation_date=False)
    data = translations.po_bytes(merged)
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def translated(entries: Catalog, text: str) -> str | None:
    """The translation of ``text`` in ``entries``, or None while it has none (or only a fuzzy one: a translation
    of an older English text). tests/test_book_editions.py fails on both, so a lag is never silent."""
    entry = entries.get(text)
    if entry is None or entry.fuzzy or not entry.string:
        return None
    return entry.string


def translated_page(page: Path, entries: Catalog) -> str:
    """The Markdown page with every unit ``entries`` translates replaced (the rest, code included, as it is)."""
    return notebook_text.translate_markdown(page.read_text(), lambda msgid: translated(entries, msgid))[0]


def release_for(course: Course, edition: Edition, chapter: str) -> Path:
    """The chapter's release in ``edition``: the Chinese one where it has been generated, else the English one."""
    if edition.locale:
        own = course.translated_release_notebook(chapter, edition.locale)
        if own.is_file():
            return own
    return course.release_notebook(chapter)


def source_config(course: Course, edition: Edition, entries: Catalog) -> dict:
    """The English ``_config.yml`` for ``edition``: its language, its title and author translated, every path
    setting absolute (the generated tree has no book_static/ or node_modules/ of its own), and the course's root
    for autograder/book_site.py (the kit it hands out is built from the course, not from the generated tree)."""
    config = yaml.safe_load((course.root / "_config.yml").read_text())
    for key in TRANSLATED_CONFIG_KEYS:
        config[key] = translated(entries, config[key]) or config[key]
    sphinx = config["sphinx"]["config"]
    for key in PATH_SETTINGS:
        value = sphinx.get(key)
        if isinstance(value, list):
            sphinx[key] = [str(course.root / v) for v in value]
        elif value:
            sphinx[key] = str(course.root / value)
    sphinx["language"] = edition.sphinx_language
    sphinx["course_root"] = str(course.root)
    return config


def toc(course: Course) -> dict:
    return yaml.safe_load((course.root / "_toc.yml").read_text())


def toc_pages(course: Course) -> list[str]:
    found = toc(course)
    return [found["root"], *(entry["file"] for part in found.get("parts", []) for entry in part["chapters"])]


def source_toc(course: Course, entries: Catalog) -> dict:
    """The English ``_toc.yml`` with its captions translated: the same page names (a chapter's translated release
    is laid out where the English one is, so a page and its translation have the same path in their editions)."""
    translated_toc = toc(course)
    for part in translated_toc.get("parts", []):
        if part.get("caption"):
            part["caption"] = translated(entries, part["caption"]) or part["caption"]
    return translated_toc


def write_source(course: Course, edition: Edition, out: Path) -> Path:
    """The source tree of ``edition`` in ``out`` (emptied first): see the module's docstring."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    entries = catalogue(course, edition)
    (out / "_config.yml").write_text(yaml.safe_dump(source_config(course, edition, entries), allow_unicode=True,
                                                    sort_keys=False))
    (out / "_toc.yml").write_text(yaml.safe_dump(source_toc(course, entries), allow_unicode=True, sort_keys=False))
    shutil.copytree(course.root / "assets", out / "assets")
    for svg in diagrams(course):
        (out / svg.relative_to(course.root)).write_text(translated_diagram(svg.read_text(), entries))
    pages = markdown_pages(course)
    for page in pages:
        dest = out / page.relative_to(course.root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(translated_page(page, entries))
    for page in toc_pages(course):
        if course.root / f"{page}.md" not in pages:  # a chapter: its release, with what is released beside it
            chapter = Path(page).name
            shutil.copytree(release_for(course, edition, chapter).parent, out / Path(page).parent)
    return out


def build_edition(course: Course, edition: Edition, site: Path, work: Path, timeout: int = 900) -> Path:
    """Build ``edition`` with -W (warnings are errors) into ``site/<its folder>``; ``work`` holds its generated
    source and Sphinx's working files. Raises with the build's warnings if it does not build clean."""
    source = write_source(course, edition, work / "src")
    jb = Path(sys.executable).parent / "jupyter-book"
    done = subprocess.run([str(jb), "build", str(source), "--path-output", str(work / "out"), "-W", "--keep-going"],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        problems = [l for l in (done.stdout + done.stderr).splitlines() if "WARNING" in l or "ERROR" in l]
        raise RuntimeError(f"the {edition.label} edition does not build with -W:\n"
                           + "\n".join(problems or [done.stdout[-3000:], done.stderr[-3000:]]))
    target = site / edition.site_dir
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(work / "out" / "_build" / "html", target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.book_editions", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("build", "update"),
                        help="build: the translated editions into the English site's folder (after the English "
                             "build); update: bring each edition's book.po in line with the book's pages")
    parser.add_argument("--site", type=Path, default=Path("_build/html"),
                        help="the English edition's built site, the translations go into its folders")
    parser.add_argument("--work", type=Path, default=Path("_build/editions"),
                        help="the generated sources and Sphinx's working files")
    args = parser.parse_args(argv)
    course = Course()
    for edition in EDITIONS:
        if not edition.site_dir:
            continue
        if args.action == "update":
            changed = update_catalogue(course, edition)
            print(f"{catalogue_path(course, edition).relative_to(course.root)}: {'updated' if changed else 'unchanged'}")
        else:
            built = build_edition(course, edition, args.site.resolve(), args.work.resolve() / edition.code)
            print(f"{edition.label} edition built: {built / 'index.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
