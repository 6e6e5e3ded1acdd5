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

import base64
import os
import re
from pathlib import Path

import nbformat
import pytest

from attention_course.plots import RECORD_KEY, TEXT_KEY

from .test_book import MATH_DONE, PAGES, ROOT, book, browser, server  # noqa: F401 - fixtures shared with test_book

pytestmark = pytest.mark.services

# A laptop window: the book's normal layout, with the table of contents beside the text column.
WINDOW = (1280, 900)
# A figure is drawn for the page at its own pixel size (matplotlib's 100 dpi, text at 10-14 pt, that is
# 14-19 px); the book may shrink it to fit the text column, and its labels shrink with it. At 0.6 of its
# size a 10 pt label is still about 8 px high, the least a reader can read at normal zoom; a figure shown
# smaller than that has to be drawn narrower or split (the fix belongs in the chapter).
MIN_SHARE = 0.6
# The smallest text a figure may show at the book's column width. A figure's text is pixels inside a PNG, which the
# page cannot measure, so each figure output records its smallest text when it is drawn (attention_course.plots
# .record_figure_text: the font size in points and its height in the stored PNG's pixels, points x dpi / 72); the
# walk scales that by how wide Chromium shows the image against its natural width. (Measuring an SVG's <text>
# would need every figure stored twice, or as SVG only, which the book's PNG outputs are not.)
MIN_TEXT_PX = 10

FIGURES = """Array.from(document.querySelectorAll('main img')).map(img => ({
    src: img.getAttribute('src'), natural: img.naturalWidth, shown: img.getBoundingClientRect().width}))"""
# Figure i scrolled into the middle of the window (at once, not smoothly), and where it is then (page coordinates,
# read after Page.settle: the frame drawn after the scroll).
SCROLL_TO = "document.querySelectorAll('main img')[{i}].scrollIntoView({{block: 'center', behavior: 'instant'}}), true"
WHERE = """(() => {{ const r = document.querySelectorAll('main img')[{i}].getBoundingClientRect();
    return {{x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}}; }})()"""
# The figures a notebook's outputs hold, in the order the page shows them, with their size as drawn.
OUTPUT_FIGURES = """Array.from(document.querySelectorAll('main .cell_output img')).map(img => ({
    src: img.getAttribute('src'), natural: img.naturalWidth, naturalHeight: img.naturalHeight,
    shown: img.getBoundingClientRect().width}))"""
# Code blocks whose wrapped lines lose their indentation: a block hang-code.js did not reach, or a line of one whose
# continuation rows start left of the line's indentation (--indent characters, book_static/hang-code.js).
HANGING = """(() => { const out = {unprocessed: [], lost: []};
    document.querySelectorAll('div.cell div.cell_input pre').forEach(pre => {
        if (!pre.classList.contains('hang-code')) { out.unprocessed.push(pre.textContent.slice(0, 60)); return; }
        const probe = document.createElement('span'); probe.textContent = '0'.repeat(20); pre.appendChild(probe);
        const ch = probe.getBoundingClientRect().width / 20; probe.remove();
        const style = getComputedStyle(pre);
        const left = pre.getBoundingClientRect().left + parseFloat(style.borderLeftWidth)
            + parseFloat(style.paddingLeft);
        pre.querySelectorAll('span.hang-line').forEach(line => {
            const range = document.createRange(); range.selectNodeContents(line);
            const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
            if (!rects.length) return;
            const top = Math.min(...rects.map(r => r.top));
            const indent = parseFloat(line.style.getPropertyValue('--indent')) || 0;
            if (rects.some(r => r.top > top + 2 && r.left < left + (indent - 0.5) * ch))
                out.lost.push(line.textContent.slice(0, 60));
        });
    });
    return out; })()"""
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

    # Code: a wrapped line keeps its indentation (book_static/hang-code.js and wrap-code.css).
    hanging = page.evaluate(HANGING)
    if hanging["unprocessed"]:
        problems.append(f"{len(hanging['unprocessed'])} code blocks without the hanging indent, "
                        f"e.g. {hanging['unprocessed'][:2]}")
    if hanging["lost"]:
        problems.append(f"{len(hanging['lost'])} wrapped code lines lose their indentation, e.g. {hanging['lost'][:2]}")

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


def _png_size(data: str) -> tuple[int, int]:
    head = base64.b64decode(data[:32])  # the signature and the IHDR chunk: width and height at bytes 16-24
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def stored_figures(chapter: str) -> list[dict]:
    """The chapter's figure outputs as stored in its notebook, in order: the PNG's size and the smallest-text
    record drawn with it (None for an output drawn before figures recorded it)."""
    nb = nbformat.read(ROOT / f"{chapter}.ipynb", as_version=4)
    return [{"size": _png_size(out["data"]["image/png"]), "text": out.get("metadata", {}).get(TEXT_KEY)}
            for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
            if "image/png" in out.get("data", {})]


def small_figure_text(page, chapter: str) -> list[str]:
    """The figures of the open page whose smallest text is under ``MIN_TEXT_PX`` as shown: the recorded height
    in the PNG's pixels times the share of its natural width Chromium shows it at."""
    shown, stored = page.evaluate(OUTPUT_FIGURES), stored_figures(chapter)
    if [(f["natural"], f["naturalHeight"]) for f in shown] != [f["size"] for f in stored]:
        return [f"the page shows {len(shown)} output figures, the notebook stores {len(stored)}, or their sizes differ"]
    unrecorded = [i for i, drawn in enumerate(stored) if drawn["text"] is None]
    problems = [f"output figures {unrecorded} have no record of their smallest text: release {Path(chapter).name} "
                "again (python -m autograder release) so that its figures are drawn by the current attention_course"
                ] if unrecorded else []
    for i, (on_page, drawn) in enumerate(zip(shown, stored)):
        if drawn["text"] is None:
            continue
        pixels = drawn["text"]["pixels"] * on_page["shown"] / on_page["natural"]
        if pixels < MIN_TEXT_PX:
            problems.append(f"output figure {i} ({on_page['src'][:50]}): its smallest text "
                            f"({drawn['text']['points']:g} pt, {drawn['text']['text']!r}) is {pixels:.1f} px high as "
                            f"shown, under {MIN_TEXT_PX} px: draw it larger or the figure narrower")
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
        problems = problems_on(page, shots, Path(chapter).name) + small_figure_text(page, chapter)
    finally:
        page.close()
    assert not problems, f"{chapter}:\n  " + "\n  ".join(problems)


# A chapter page broken the way the walk must notice: a paragraph of raw TeX, a formula MathJax cannot
# typeset, a figure squeezed to a third of its size, a code line that cannot wrap, and two code cells whose
# wrapped line loses its indentation (one the hanging-indent script never reached, one whose indent is undone).
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
    const flat = document.createElement('div');
    flat.className = 'cell';
    flat.innerHTML = '<div class="cell_input"><pre style="white-space: pre-wrap"></pre></div>';
    flat.querySelector('pre').textContent = 'def f(x):\n        return ' + 'x + '.repeat(60) + 'x';
    main.appendChild(flat);
    const undone = flat.cloneNode(true);
    main.appendChild(undone);
    window.attentionCourseHangCode(undone);
    undone.querySelectorAll('span.hang-line').forEach(l => { l.style.paddingLeft = '0'; l.style.textIndent = '0'; });
    return MathJax.tex2chtmlPromise('\\frac{1}{').then(node => { main.appendChild(node); return true; });
})()"""


@pytest.mark.timeout(120)
def test_the_walk_sees_a_broken_page(server, browser):  # noqa: F811 - pytest fixtures
    """The walk's checks can fail: the first chapter, broken in the page itself, shows each kind of problem."""
    page = _open(server, browser, PAGES[0])
    try:
        assert problems_on(page) + small_figure_text(page, PAGES[0]) == [], "the page must be clean before it is broken"
        page.evaluate(BREAK_PAGE)
        problems = problems_on(page) + small_figure_text(page, PAGES[0])
    finally:
        page.close()
    found = "\n".join(problems)
    for kind in ("MathJax errors", "raw TeX in the text", "too small to read", "scroll sideways",
                 "without the hanging indent", "lose their indentation", f"under {MIN_TEXT_PX} px"):
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
    calls = sum(c.source.count("plot_attention_grid(") for c in source.cells if c.cell_type == "code")
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


@pytest.mark.timeout(120)
def test_a_wrapped_code_line_keeps_its_indentation(server, browser):  # noqa: F811 - pytest fixtures
    """A line of code too long for the column wraps onto rows that start four characters right of the line's own
    indentation, and copying the block still gives the code as written (book_static/hang-code.js)."""
    page = _open(server, browser, PAGES[0])
    try:
        rows = page.evaluate("""(() => {
            const cell = document.createElement('div'); cell.className = 'cell';
            cell.innerHTML = '<div class="cell_input"><div class="highlight"><pre></pre></div></div>';
            const code = 'def f(x):\\n        return ' + 'x + '.repeat(60) + 'x\\n\\ny = 1\\n';
            cell.querySelector('pre').textContent = code;
            document.querySelector('main').appendChild(cell);
            window.attentionCourseHangCode(cell);
            const pre = cell.querySelector('pre');
            const probe = document.createElement('span'); probe.textContent = '0'.repeat(20); pre.appendChild(probe);
            const ch = probe.getBoundingClientRect().width / 20; probe.remove();
            const style = getComputedStyle(pre);
            const left = pre.getBoundingClientRect().left + parseFloat(style.borderLeftWidth)
                + parseFloat(style.paddingLeft);
            const line = pre.querySelectorAll('span.hang-line')[1];
            const range = document.createRange(); range.selectNodeContents(line);
            const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
            const tops = [...new Set(rects.map(r => Math.round(r.top)))].sort((a, b) => a - b);
            return {same: pre.textContent === code, starts: tops.map(t => Math.min(
                ...rects.filter(r => Math.round(r.top) === t).map(r => Math.round((r.left - left) / ch * 10) / 10)))};
        })()""")
        problems = problems_on(page)
    finally:
        page.close()
    assert rows["same"], "the block's text (what the copy button copies) changed"
    assert len(rows["starts"]) >= 2, f"the long line did not wrap: {rows}"
    assert rows["starts"][0] == 0 and all(abs(x - 12) < 0.6 for x in rows["starts"][1:]), (
        f"rows of an 8-space line start at {rows['starts']} characters; want 0, then 12 (8 + 4)")
    assert not [p for p in problems if "indent" in p], problems
