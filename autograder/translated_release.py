"""The chapters' releases in another language (issue 45): ``chapters_zh/<ch>/<ch>.ipynb`` beside ``chapters/``.

A translated release is the English release (``chapters/<ch>/<ch>.ipynb``, generated from ``solutions/``) with the
chapter's catalogue (``locales/<lang>/LC_MESSAGES/<ch>.po``) applied by :func:`autograder.notebook_text.apply_catalogue`:

- the same cells in the same order, with the same ids, metadata (grade_id, checksum, points) and stored outputs,
  and the same notebook name, so nbgrader, nbval, the self-check and the gradebook treat both alike (a class may
  mix languages);
- markdown translated unit by unit; in solution cells and ungraded unlocked cells, docstrings and comments
  translated; graded test cells and locked cells byte-identical (nbgrader checksums them);
- the first cell ("Get the course kit") from the kit's catalogue (``kit.po``, :func:`autograder.kit.texts_in`);
- a unit whose entry is empty or fuzzy stays English. :func:`write` reports how many did, and
  tests/test_translations.py fails until none does, so the release itself never blocks on a translator.

No notebook runs here: the English release already carries the reference outputs, so regenerating the translated
release is a few hundred milliseconds (``python -m autograder release --lang zh``), and it is proven in sync by
regenerating it in tests/test_translations.py.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import nbformat

from . import kit, kit_texts, notebook_text, translations
from .course import Course

GENERATED_NOTE = (
    "*This notebook is generated from `chapters/{chapter}/{chapter}.ipynb` (itself generated from "
    "`solutions/{chapter}/{chapter}.ipynb`) and `locales/{lang}/LC_MESSAGES/{chapter}.po` by "
    "`python -m autograder release`. Edit the source or the catalogue, not this file.*"
)


def translated(course: Course, chapter: str, lang: str) -> tuple[nbformat.NotebookNode, list[str]]:
    """The chapter's release in ``lang`` and the English keys that stayed English (no finished translation)."""
    english = nbformat.read(course.release_notebook(chapter), as_version=4)
    translate = translations.lookup(course, chapter, lang)
    nb, missing = notebook_text.apply_catalogue(english, translate, skip=kit_texts.ADDED_CELLS)
    texts = kit.texts_in(course, lang)
    depth = len(course.translated_release_notebook(chapter, lang).relative_to(course.root).parts) - 1
    for cell in nb.cells:
        if cell.get("id") == kit_texts.KIT_CELL_ID:
            cell.source = kit.install_markdown(kit.wheel_filename(course), "../" * depth, texts.install)
        elif cell.get("id") == kit_texts.GENERATED_NOTE_ID:
            cell.source = GENERATED_NOTE.format(chapter=chapter, lang=lang)
    meta = copy.deepcopy(dict(nb.metadata.get("attention_course", {})))
    meta.update({"language": lang, "translated_from": [f"chapters/{chapter}/{chapter}.ipynb",
                                                       f"locales/{lang}/LC_MESSAGES/{chapter}.po"]})
    nb.metadata["attention_course"] = meta
    return nb, missing + list(texts.untranslated)


def write(course: Course, chapter: str, lang: str) -> tuple[Path, list[str]]:
    """Write the chapter's release in ``lang`` (and the files released beside the English one); returns its path
    and the keys that stayed English."""
    nb, missing = translated(course, chapter, lang)
    english_dir = course.release_notebook(chapter).parent
    dest = course.translated_release_notebook(chapter, lang)
    if dest.parent.exists():
        shutil.rmtree(dest.parent)
    shutil.copytree(english_dir, dest.parent)  # data files released beside the chapter, if any
    nbformat.write(nb, dest)
    return dest, missing


def write_all(course: Course, chapters: list[str], langs=None) -> None:
    """:func:`write` every chapter in every language with catalogues, saying how much of each stayed English."""
    for lang in langs or translations.LANGUAGES:
        for chapter in chapters:
            if not course.release_notebook(chapter).is_file():
                print(f"{chapter} has no English release to translate (python -m autograder release {chapter})")
                continue
            path, missing = write(course, chapter, lang)
            rel = path.relative_to(course.root) if path.is_relative_to(course.root) else path
            note = (f" ({len(missing)} text(s) untranslated or fuzzy, shown in English: "
                    f"python -m autograder translations status {chapter})" if missing else "")
            print(f"released {chapter} in {lang} -> {rel}{note}")
