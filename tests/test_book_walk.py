"""The screenshot walk of the built book (issue 28): every chapter page opened in headless Chromium at the
book's normal width, a screenshot of the page's top and of every figure as the reader sees it saved, and what
a reader would notice asserted: no raw TeX left in the text, every formula typeset without a MathJax error,
no figure scaled down so far that its labels cannot be read, no code cell or page that scrolls sideways,
and no yes/no data drawn on a colour bar.

The screenshots go to $BOOK_WALK_SHOTS when it is set (to look at them), else to a temporary folder; the
test prints where. The book is built once per content (tests/test_book.py's build_book, shared with that file).
The walk's checks are shown to fail on a page broken on purpose (test_the_walk_sees_a_broken_page), so a
green walk means something.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

from attention_course.plots import RECORD_KEY

from .test_book import MATH_DONE, PAGES, ROOT, book, browser, server  # noqa: F401 - fixtures shared with test_book

pytestmark = pytest.mark.services

# A laptop window: the book's normal layout, with the table of contents beside the text column.
WINDOW = (1280, 900)
# A figure is drawn for the page at its own pixel size (matplotlib's 100 dpi, text at 10-14 pt, that is
# 14-19 px); the book may shrink it to fit the text column, and its labels shrink with it. At 0.6 of its
# size a 10 pt label is still about 8 px high, the least a reader can read at normal zoom; a figure shown
# smaller than that has to be drawn narrower or split (the fix belongs in the chapter).
MIN_SHARE = 0.6
# The grid helper's names: plot_attention_grid, and show_heatmaps while chapters still call the old name.
GRID_HELPERS = ("plot_attention_grid", "show_heatmaps")

FIGURES = """Array.from(document.querySelectorAll('main img')).map(img => ({
    src: img.getAttribute('src'), natural: img.naturalWidth, shown: img.getBoundingClientRect().width}))"""
# Figure i scrolled into the middle of the window (at once, not smoothly), and where it is then (page coordinates,
# read after Page.settle: the frame drawn after the scroll).
SCROLL_TO = "document.querySelectorAll('main img')[{i}].scrollIntoView({{block: 'center', behavior: 'instant'}}), true"
WHERE = """(() => {{ const r = document.querySelectorAll('main img')[{i}].getBoundingClientRect();
    return {{x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}}; }})()"""
# The prose a reader sees: code, outputs and typeset math (where `$` and backslashes are legitimate) removed.
PROSE = """(() => { const m = document.querySelector('main').cloneNode(true);
    m.querySelectorAll('pre, code, script, style, .cell_output, .highlight, mjx-container').forEach(e => e.remove());
    return m.textContent; })()"""
RAW_TEX = re.compile(r"\$[^$\n]{1,200}\$|\$\$|\\\(|\\\[|\\[a-zA-Z]{2,}")


def problems_on(page, shots: Path | None = None, name: str = "page") -> list[str]:
    """What a reader of the open ``page`` would notice, one line each (empty: nothing). With ``shots``, the
    page's top and every figure as shown are saved there as PNG files."""
    problems = []
    if shots is not None:
        page.screenshot(shots / f"{name}-top.png")

    # Math: every formula of the text typeset, none with an error, no TeX delimiter left over.
    untypeset = page.evaluate("Array.from(document.querySelectorAll('main .math'))"
                              ".filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80))")
    if untypeset:
        problems.append(f"formulas MathJax did not typeset: {untypeset[:5]}")
    errors = page.evaluate("Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))"
                           ".map(e => e.getAttribute('data-mjx-error') || e.textContent)")
    if errors:
        problems.append(f"MathJax errors on the page: {errors[:5]}")
    prose = page.evaluate(PROSE)
    left = RAW_TEX.search(prose)
    if left:
        problems.append(f"raw TeX in the text: ...{prose[max(0, left.start() - 60):left.end() + 60]!r}...")

    # Figures: none shrunk below MIN_SHARE of its own width; each one saved as the reader sees it.
    figures = page.evaluate(FIGURES)
    if not figures:
        problems.append("no figure on the chapter page")
    for i, fig in enumerate(figures):
        if not fig["natural"] > 0:
            problems.append(f"figure {i} ({fig['src']}) did not load")
            continue
        share = fig["shown"] / fig["natural"]
        if shots is not None and fig["shown"] >= 1:
            page.evaluate(SCROLL_TO.format(i=i))
            page.settle()
            page.screenshot(shots / f"{name}-fig{i:02d}-{share:.2f}.png", page.evaluate(WHERE.format(i=i)))
        if share < MIN_SHARE:
            problems.append(f"figure {i} ({fig['src'][:60]}): {fig['natural']} px shown at {fig['shown']:.0f} px "
                            f"({share:.2f} of its size): its labels are too small to read")

    # Code: wrapped at the column's width, and the page itself never wider than the window.
    sideways = page.evaluate("Array.from(document.querySelectorAll('div.cell pre'))"
                             ".filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.textContent.slice(0, 60))")
    if sideways:
        problems.append(f"{len(sideways)} code blocks scroll sideways, e.g. {sideways[:3]}")
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    if width[0] > width[1]:
        problems.append(f"the page is {width[0]} px wide in a {width[1]} px window")
    if page.errors:
        problems.append(f"console/network errors: {page.errors}")
    return problems


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = Path(os.environ["BOOK_WALK_SHOTS"]) if os.environ.get("BOOK_WALK_SHOTS") else (
        tmp_path_factory.mktemp("book-walk"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nbook walk screenshots: {folder}")
    return folder


def _open(server, browser, chapter):  # noqa: F811 - pytest fixtures
    page = browser.open(f"{server}/{chapter}.html", MATH_DONE, timeout=60)
    page.set_window(*WINDOW)
    page.evaluate(MATH_DONE)  # typesetting finished at this width too
    return page


@pytest.mark.timeout(120)
@pytest.mark.parametrize("chapter", PAGES)
def test_a_reader_walking_the_chapter_sees_rendered_math_readable_figures_and_no_sideways_scroll(
        server, browser, shots, chapter):  # noqa: F811 - pytest fixtures
    page = _open(server, browser, chapter)
    try:
        problems = problems_on(page, shots, Path(chapter).name)
    finally:
        page.close()
    assert not problems, f"{chapter}:\n  " + "\n  ".join(problems)


# A chapter page broken the way the walk must notice: a paragraph of raw TeX, a formula MathJax cannot
# typeset, a figure squeezed to a third of its size, and a code line that cannot wrap.
BREAK_PAGE = r"""(() => {
    const main = document.querySelector('main');
    const p = document.createElement('p');
    p.textContent = 'The score is $\\alpha(q, k_i)$ for every key.';
    main.appendChild(p);
    const img = Array.from(main.querySelectorAll('img')).find(i => !i.src.endsWith('.svg'));
    img.style.width = Math.round(img.naturalWidth / 3) + 'px';
    const cell = document.createElement('div');
    cell.className = 'cell';
    const pre = document.createElement('pre');
    pre.style.whiteSpace = 'pre';
    pre.style.overflowX = 'auto';
    pre.textContent = 'x = ' + '1234567890'.repeat(40);
    cell.appendChild(pre);
    main.appendChild(cell);
    return MathJax.tex2chtmlPromise('\\frac{1}{').then(node => { main.appendChild(node); return true; });
})()"""


@pytest.mark.timeout(120)
def test_the_walk_sees_a_broken_page(server, browser):  # noqa: F811 - pytest fixtures
    """The walk's checks can fail: the first chapter, broken in the page itself, shows each kind of problem."""
    page = _open(server, browser, PAGES[0])
    try:
        assert problems_on(page) == [], "the page must be clean before it is broken"
        page.evaluate(BREAK_PAGE)
        problems = problems_on(page)
    finally:
        page.close()
    found = "\n".join(problems)
    for kind in ("MathJax errors", "raw TeX in the text", "too small to read", "scroll sideways"):
        assert kind in found, f"the walk did not see the broken page's {kind!r}: {problems}"


def _heatmap_records(chapter: str) -> list[dict]:
    nb = nbformat.read(ROOT / f"{chapter}.ipynb", as_version=4)
    return [out["metadata"][RECORD_KEY] for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if RECORD_KEY in out.get("metadata", {})]


def yes_no_data_on_a_colour_bar(records: list[dict]) -> list[dict]:
    """The heatmaps, among ``records`` (plots.plot_attention_grid' records), that draw yes/no data on a colour bar."""
    return [r for r in records if r["yes_no_data"] and r["colour_bars"]]


@pytest.mark.parametrize("chapter", PAGES)
def test_no_yes_no_data_on_a_colour_bar(chapter):
    """Every heatmap a chapter shows records how plots.plot_attention_grid drew it (the stored notebook's output
    metadata, the same notebook the book renders): yes/no data (only 0 and 1: masks, receptive fields) must be
    drawn in the boolean mode, two colours and a legend, because a colour bar promises values in between that
    the data do not have."""
    source = nbformat.read(ROOT / f"{chapter}.ipynb", as_version=4)
    calls = sum(c.source.count(f"{name}(") for c in source.cells if c.cell_type == "code" for name in GRID_HELPERS)
    records = _heatmap_records(chapter)
    assert len(records) >= min(calls, 1), (
        f"{chapter} calls plot_attention_grid but its stored outputs carry no record of how: release the chapter again "
        "(python -m autograder release) so its figures are drawn by the current attention_course.plots")
    on_a_bar = yes_no_data_on_a_colour_bar(records)
    assert not on_a_bar, f"{chapter}: {len(on_a_bar)} heatmaps of yes/no data drawn on a colour bar: {on_a_bar}"


def test_the_colour_bar_check_sees_the_boolean_mode_and_a_mask_on_a_bar():
    """The check above is alive: the book holds heatmaps drawn in each mode, and a record of a mask drawn on a
    colour bar (what plots.plot_attention_grid records for a 0/1 matrix without boolean=True) is caught."""
    records = [r for chapter in PAGES for r in _heatmap_records(chapter)]
    assert {r["mode"] for r in records} == {"boolean", "weights"}, f"modes recorded: {records}"
    mask_on_a_bar = {"mode": "weights", "colour_bars": 1, "yes_no_data": True}
    assert yes_no_data_on_a_colour_bar(records + [mask_on_a_bar]) == [mask_on_a_bar]
