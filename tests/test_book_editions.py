"""The book's Chinese edition, what needs no build (tests/test_book.py builds both editions and opens them):
book.po is complete and in line with the book's pages, keeps every placeholder, a changed English paragraph comes
back fuzzy and reads in English until it is translated again, the generated source tree is the English book's with
its language, title, captions and front page translated, and the language switch links a page to its translation."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from autograder import book_editions, notebook_text, translations
from autograder.book_editions import CHINESE, ENGLISH
from autograder.course import Course

pytestmark = pytest.mark.unit

COURSE = Course()


def problems_of(course: Course) -> list[str]:
    """What keeps the Chinese book from being a translation of the current English one, one line each."""
    have = book_editions.catalogue(course, CHINESE)
    want = book_editions.book_template(course, CHINESE)
    problems = [f"no entry for {m.id[:70]!r}" for m in want if m.id and m.id not in have]
    problems += [f"an entry for text the book no longer has: {m.id[:70]!r}" for m in have if m.id and m.id not in want]
    problems += [f"fuzzy (its English changed): {m.id[:70]!r}" for m in have if m.id and m.fuzzy]
    problems += [f"untranslated: {m.id[:70]!r}" for m in have if m.id and not m.fuzzy and not m.string]
    problems += [f"obsolete entry left: {m.id[:70]!r}" for m in have.obsolete.values()]
    return problems


def test_book_po_translates_every_unit_of_the_current_pages_and_nothing_else():
    assert book_editions.catalogue_path(COURSE, CHINESE).is_file(), "no book.po: python -m autograder.book_editions update"
    problems = problems_of(COURSE)
    assert not problems, ("locales/zh_CN/LC_MESSAGES/book.po lags the book (python -m autograder.book_editions update, "
                          "then translate):\n  " + "\n  ".join(problems))


def test_book_po_keeps_every_placeholder_and_reads_as_chinese():
    for message in book_editions.catalogue(COURSE, CHINESE):
        if not message.id or not message.string:
            continue
        assert notebook_text.placeholders(message.string) == notebook_text.placeholders(message.id), (
            f"math, code, tags or links differ between {message.id[:60]!r} and its translation")
        # A diagram's label that is code or a formula (KVCache, "A = softmax") is its own translation.
        assert any("\u4e00" <= ch <= "\u9fff" for ch in message.string) or (
            message.string == message.id and all(loc.startswith(book_editions.DIAGRAMS) for loc, _ in message.locations)
        ), f"not Chinese: {message.string[:60]!r}"


@pytest.fixture
def book_copy(tmp_path) -> Course:
    """The book's own sources (pages, config, toc, catalogues) in a folder of their own, to change."""
    for name in ("index.md", "_config.yml", "_toc.yml", "pyproject.toml"):
        shutil.copy(COURSE.root / name, tmp_path / name)
    shutil.copytree(COURSE.root / "locales", tmp_path / "locales")
    return Course(tmp_path)


def test_a_changed_paragraph_comes_back_fuzzy_and_reads_in_english_until_translated(book_copy):
    """The Chinese edition never lags silently: the update marks the entry fuzzy (with its old translation, for the
    translator to compare), the completeness check names it, and the page shows the new English, not the
    translation of what the English used to say."""
    page = book_copy.root / "index.md"
    old = "Results live on the inputs' device with the inputs' dtype."
    new = "Results live on the inputs' device, with the inputs' dtype."
    page.write_text(page.read_text().replace(old, new))
    assert book_editions.update_catalogue(book_copy, CHINESE)
    entry = book_editions.catalogue(book_copy, CHINESE).get(new)
    assert entry is not None and entry.fuzzy and "dtype" in entry.string
    assert any("fuzzy" in p and "Results live" in p for p in problems_of(book_copy))
    shown = book_editions.translated_page(page, book_editions.catalogue(book_copy, CHINESE))
    assert new in shown and entry.string not in shown
    assert "从零实现注意力机制" in shown  # the rest still translated


def test_a_new_paragraph_comes_in_untranslated_and_a_removed_one_is_not_kept_silently(book_copy):
    page = book_copy.root / "index.md"
    text = page.read_text()
    page.write_text(text.replace("## Chapters", "A new paragraph about the chapters.\n\n## Chapters")
                    .replace("- Functions that compute attention return `(output, weights)`.\n", ""))
    book_editions.update_catalogue(book_copy, CHINESE)
    problems = problems_of(book_copy)
    assert "untranslated: 'A new paragraph about the chapters.'" in problems, problems
    assert any(p.startswith("obsolete entry left") and "(output, weights)" in p for p in problems), problems


def test_the_generated_source_is_the_english_book_in_chinese(tmp_path):
    source = book_editions.write_source(COURSE, CHINESE, tmp_path / "src")
    english = yaml.safe_load((COURSE.root / "_config.yml").read_text())
    config = yaml.safe_load((source / "_config.yml").read_text())
    sphinx = config["sphinx"]["config"]
    assert sphinx["language"] == "zh_CN" and sphinx["course_root"] == str(COURSE.root)
    assert config["title"] == "从零实现注意力机制" and config["only_build_toc_files"] is True
    assert config["execute"] == english["execute"] and sphinx["extensions"] == english["sphinx"]["config"]["extensions"]
    for folder in sphinx["html_static_path"] + sphinx["templates_path"]:
        assert Path(folder).is_absolute() and Path(folder).is_dir(), folder
    assert sphinx["mathjax_path"] == "tex-chtml.js"  # the vendored MathJax: the edition is offline too
    toc = yaml.safe_load((source / "_toc.yml").read_text())
    assert book_editions.toc_pages(COURSE) == [toc["root"], *(e["file"] for p in toc["parts"] for e in p["chapters"])]
    assert [p["caption"] for p in toc["parts"]] == ["各章"]
    for page in book_editions.toc_pages(COURSE)[1:]:
        chapter = Path(page).name
        assert (source / f"{page}.ipynb").read_bytes() == book_editions.release_for(COURSE, CHINESE, chapter).read_bytes()
    front = (source / "index.md").read_text()
    english_front = (COURSE.root / "index.md").read_text()
    assert front.startswith("# 从零实现注意力机制\n")
    # The skeleton is the English page's: the same code blocks and directives, in the same order.
    fences = lambda text: [s for s in notebook_text.markdown_segments(text.split("\n"))  # noqa: E731
                           if isinstance(s, str) and s.lstrip().startswith("```")]
    assert fences(front) == fences(english_front) and "```{course-kit}" in front and "```{tableofcontents}" in front
    assert sum(1 for ch in front if "\u4e00" <= ch <= "\u9fff") > 500


def test_the_chinese_diagrams_are_the_english_ones_with_their_labels_translated(tmp_path):
    """Every label with a word goes through book.po; the drawing itself (shapes, positions, symbols) is unchanged."""
    source = book_editions.write_source(COURSE, CHINESE, tmp_path / "src")
    entries = book_editions.catalogue(COURSE, CHINESE)
    drawings = book_editions.diagrams(COURSE)
    assert len(drawings) >= 10
    for svg in drawings:
        english, chinese = svg.read_text(), (source / svg.relative_to(COURSE.root)).read_text()
        assert book_editions.SVG_TEXT.sub("", english) == book_editions.SVG_TEXT.sub("", chinese), svg.name
        left = [label for label in book_editions.diagram_labels(chinese)  # an English label still there
                if book_editions.translated(entries, label) not in (None, label)]
        assert not left, f"{svg.name}: labels left in English: {left[:5]}"
    assert ">逐行 softmax</text>" in (source / book_editions.DIAGRAMS / "03-scoring-pipeline.svg").read_text()


@pytest.mark.parametrize("edition, page, href", [
    (ENGLISH, "index.html", "zh/index.html"),
    (ENGLISH, "chapters/03_x/03_x.html", "../../zh/chapters/03_x/03_x.html"),
    (CHINESE, "index.html", "../index.html"),
    (CHINESE, "chapters/03_x/03_x.html", "../../../chapters/03_x/03_x.html"),
    (CHINESE, "search.html", "../search.html"),
])
def test_the_switch_links_a_page_to_the_same_page_in_the_other_edition(edition, page, href):
    assert book_editions.switch_href(edition, page) == href
    # Followed from where the page lies in the site, it lands on the other edition's page of the same name.
    here = Path(edition.site_dir) / page
    other = book_editions.other_edition(edition)
    assert Path(os.path.normpath(here.parent / href)) == Path(other.site_dir) / page


def test_each_sphinx_language_is_one_edition():
    assert book_editions.edition_of(None) is ENGLISH and book_editions.edition_of("en") is ENGLISH
    assert book_editions.edition_of("zh_CN") is CHINESE
    with pytest.raises(ValueError):
        book_editions.edition_of("fr")
