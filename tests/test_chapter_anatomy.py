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


HINT = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.S)
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|\*\*|//|==|!=|<=|>=|->|[^\sA-Za-z0-9_]")
# A hint quoting this many consecutive tokens of the reference solution hands over a whole statement of it
# (``scores = dot_score(queries, keys) / math.sqrt(queries.shape[-1])`` is 18); shorter runs are API names
# and shapes, which a hint may name.
LONGEST_QUOTE = 12
# ... and a hint whose quoted runs of 6 or more tokens add up to this share of the solution writes it.
MOST_OF_IT = 0.25


def _exercises(chapter):
    """(grade id, the markdown just before the solution cell, the solution's code) for every exercise."""
    nb = _source(chapter)
    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            intro = next((c.source for c in reversed(nb.cells[:i]) if c.cell_type == "markdown"), "")
            yield grade_id(cell), intro, cell.source


def _solution_tokens(source: str) -> list[str]:
    body = re.search(r"### BEGIN SOLUTION(.*?)### END SOLUTION", source, re.S)
    code = re.sub(r"#.*", "", body.group(1) if body else source)  # comments are not the solution
    return TOKEN.findall(code)


def _code_spans(markdown: str) -> list[str]:
    fenced = re.findall(r"```[^\n]*\n(.*?)```", markdown, re.S)
    return fenced + re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", markdown, flags=re.S))


def _longest_common_run(a: list[str], b: list[str]) -> int:
    best, previous = 0, [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def quoted_solution(hint: str, solution_source: str) -> tuple[int, float]:
    """The longest run of solution tokens a hint's code quotes, and the share of the solution its runs of six
    or more tokens cover."""
    solution = _solution_tokens(solution_source)
    runs = [_longest_common_run(TOKEN.findall(span), solution) for span in _code_spans(hint)]
    return max(runs, default=0), sum(r for r in runs if r >= 6) / max(len(solution), 1)


def test_the_giveaway_heuristic_flags_a_quoted_solution_and_passes_a_pointer():
    solution = ("def f(q, k, v):\n    ### BEGIN SOLUTION\n    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
                "    return torch.softmax(scores, dim=-1) @ v\n    ### END SOLUTION\n")
    longest, share = quoted_solution("`scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])`, then softmax",
                                     solution)
    assert longest >= LONGEST_QUOTE and share >= MOST_OF_IT
    longest, share = quoted_solution("Scale the scores by the square root of the key size before the softmax "
                                     "over the keys (`dim=-1`).", solution)
    assert longest < LONGEST_QUOTE and share < MOST_OF_IT


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_has_an_idea_hint_and_a_step_hint_that_is_not_the_solution(chapter):
    """Exactly two folded hints before each exercise: "Hint 1 (the idea)" and "Hint 2 ..." (the step).
    Neither is the solution: hint 2 points at the step and must not quote the reference's statements."""
    problems = []
    for gid, intro, solution in _exercises(chapter):
        hints = HINT.findall(intro)
        titles = [title.strip() for title, _ in hints]
        if len(hints) != 2 or not titles[0].startswith("Hint 1 (the idea)") or not titles[1].startswith("Hint 2"):
            problems.append(f"{gid}: want two folded hints 'Hint 1 (the idea)' and 'Hint 2 ...', found {titles}")
            continue
        for title, text in hints:
            longest, share = quoted_solution(text, solution)
            if longest >= LONGEST_QUOTE or share >= MOST_OF_IT:
                problems.append(f"{gid}: '{title}' quotes the solution ({longest} tokens in a row, "
                                f"{share:.0%} of it); point at the step instead")
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
