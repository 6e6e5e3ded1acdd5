"""Every chapter has the anatomy of the course spec, read from its source notebook: a schematic (an SVG that
exists, with alt text), an exercise intro with "Done means" and a folded two-level hint before every solution
cell, then a summary, three to five questions to think about with their answers folded, and further reading. A reader notices each
of these when it is missing; the book test (tests/test_book.py) checks how they render."""
from __future__ import annotations

import re

import nbformat
import pytest

from attention_course.cells import grade_id, is_solution
from autograder.course import Course

pytestmark = pytest.mark.unit

COURSE = Course()
CHAPTERS = COURSE.chapters()
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def _markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _source(chapter):
    return nbformat.read(COURSE.source_notebook(chapter), as_version=4)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_opens_with_a_schematic(chapter):
    path = COURSE.source_notebook(chapter)
    diagrams = [(alt, src) for alt, src in IMAGE.findall(_markdown(_source(chapter))) if "assets/diagrams/" in src]
    assert diagrams, f"{chapter}: no schematic from assets/diagrams/"
    for alt, src in diagrams:
        assert len(alt.split()) >= 3, f"{chapter}: {src} needs alt text that says what it shows"
        target = (path.parent / src).resolve()
        assert target.is_file(), f"{chapter}: {src} does not exist"
        svg = target.read_text()
        assert "<title>" in svg, f"{src}: an SVG title, for screen readers"
        assert "http://" not in svg.replace("http://www.w3.org/", "") and "https://" not in svg, (
            f"{src}: loads something from the network")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_says_when_it_is_done_and_has_a_two_level_hint(chapter):
    nb = _source(chapter)
    problems = []
    for i, cell in enumerate(nb.cells):
        if not is_solution(cell):
            continue
        intro = next((c.source for c in reversed(nb.cells[:i]) if c.cell_type == "markdown"), "")
        if "Done means" not in intro:
            problems.append(f"{grade_id(cell)}: no 'Done means' line before it")
        if intro.count("<details") < 2:
            problems.append(f"{grade_id(cell)}: needs a folded two-level hint (two <details> blocks)")
    assert not problems, f"{chapter}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_closes_with_summary_questions_and_reading(chapter):
    text = _markdown(_source(chapter))
    for heading in ("Summary", "Questions to think about", "Further reading"):
        assert re.search(rf"^#+ .*{heading}", text, re.MULTILINE | re.IGNORECASE), f"{chapter}: no '{heading}' section"
    questions = re.split(r"^#+ .*Questions to think about.*$", text, flags=re.MULTILINE | re.IGNORECASE)[1]
    questions = re.split(r"^#+ ", questions, maxsplit=1, flags=re.MULTILINE)[0]
    folded = questions.find("<details")
    assert folded > 0, f"{chapter}: the answers to the questions are folded away (<details>)"
    asked = len(re.findall(r"^\s*(?:\d+\.|[-*]) ", questions[:folded], re.MULTILINE))
    if asked == 0:  # one question per fold
        asked = questions.count("<details")
    assert 3 <= asked <= 5, f"{chapter}: three to five questions to think about (found {asked})"
