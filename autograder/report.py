"""The class report: one self-contained HTML page (figures embedded as base64 PNG) under grading/reports/.

It shows, from the results recorded in the gradebook: a summary per chapter; the score distribution per
chapter and per exercise (graded test cell); a learners x exercises heatmap per chapter; the checks that
failed most with the verdict messages learners saw; flagged notebooks; suspicions (evidence for the instructor
that no learner sees, such as a copy of the course's hidden tests); every notebook that scored zero and why
(could not be graded, with its reason, or graded with no check passed, e.g. a blank submission); what notebooks
themselves said (``GradingResult.learner_said``: the learner's text, shown under its own label, never as the
grader's), and, apart from those, submissions the grader could not grade in the last run (grader errors, never
recorded).
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import re
from collections import Counter, defaultdict
from pathlib import Path

import nbformat

from attention_course.cells import graded_cells
from attention_course.language import N_, speaking

from .atomic_files import write_atomic
from .class_language import class_language, page_language, tr
from .course import Course
from .late_policy import how_late
from .output_files import REPORT_NAME
from .results import GradingResult
from .safe_output import CSP_META  # no script, no remote resource (issue 24)
from .similarity import STYLE as similarity_style
from .submissions import load_mistakes
from .trusted import NOT_IMPLEMENTED, not_implemented  # the engine's words for a function that still raises it

LEARNER_SAID = N_("The notebook's own text (untrusted)")


def exercise_order(course: Course, chapters: list[str]) -> dict[str, list[tuple[str, float]]]:
    """{chapter: [(grade_id, points), ...]} in notebook order, from the source notebooks."""
    order = {}
    for chapter in chapters:
        path = course.source_notebook(chapter)
        if path.is_file():
            nb = nbformat.read(path, as_version=4)
            order[chapter] = graded_cells(nb)
        else:
            order[chapter] = []
    return order


def _percent(row: GradingResult) -> float:
    return 100.0 * row.score / row.max_score if row.max_score else 0.0


def outcome(row: GradingResult) -> str:
    """One of OUTCOMES, the words the summary line, the report and grades.csv share: "not gradable" (the
    grader could not grade the notebook: its status is "zero"), "scored zero" (graded, no points) or "graded"."""
    if row.status == "zero":
        return "not gradable"
    return "scored zero" if row.score <= 0 else "graded"


OUTCOMES = ("graded", "scored zero", "not gradable")


def zero_reason(row: GradingResult) -> str | None:
    """Why a recorded notebook scored zero, or None when it scored more. Two kinds, kept apart: a notebook
    that could not be graded (unreadable, wrong name, nothing submitted, kernel died: its reason) and one
    that was graded and failed every check. Grader errors are never recorded; they are listed separately."""
    if row.score > 0:
        return None
    if row.status == "zero":
        return tr("not gradable: {reason}", reason=row.reason or tr("unusable notebook"))
    passed = sum(1 for v in row.cells if v.passed)
    return tr("graded: no check passed ({passed} of {cells} graded cells)", passed=passed, cells=len(row.cells))


def _cell_fraction(row: GradingResult, cell: str, points: float) -> float:
    v = row.cell(cell)
    if v is None or row.status != "graded":
        return 0.0
    return v.score / v.max_score if v.max_score else float(v.passed)


# Sizes that stay readable at normal zoom: figures are embedded at FIGURE_DPI and never wider than the page's
# content (so the browser does not scale them down); every text is at least MIN_FONT_PT.
FIGURE_DPI = 100
MAX_FIGURE_PX = 1300
MIN_FONT_PT = 10
_FONT = {"font.size": 11, "axes.labelsize": 11, "xtick.labelsize": 10, "ytick.labelsize": 10,
         "axes.titlesize": 11, "legend.fontsize": 10}
# Student ids are folder names a learner chose: text in a figure is drawn as it is, never parsed as mathtext or
# handed to LaTeX (a name such as "$\\alpha^$" made matplotlib raise and the whole report fail, issue 24).
_PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}
# The page's section headings; figures carry no title of their own (it used to appear twice).
SECTIONS = {"chapters": N_("Score distribution per chapter"), "exercises": N_("Score distribution per exercise"),
            "heatmap": N_("Learners x exercises")}


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    plt.close(fig)
    return ('<img alt="figure" src="data:image/png;base64,' + base64.b64encode(buf.getvalue()).decode() + '">')


def build_figures(rows, chapters, order) -> dict[str, list]:
    """{section: [matplotlib Figure, ...]}: the report's figures, not yet rendered (tests inspect them)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    with plt.rc_context({**_FONT, **_PLAIN_TEXT}):
        return _build_figures(plt, matplotlib, rows, chapters, order)


def _build_figures(plt, matplotlib, rows, chapters, order) -> dict[str, list]:
    import numpy as np

    figs: dict[str, list] = {}
    by_chapter = defaultdict(list)
    for r in rows:
        by_chapter[r.chapter].append(r)
    max_in = MAX_FIGURE_PX / FIGURE_DPI

    # Score distribution per chapter: one panel each, three to a row.
    n = len(chapters)
    cols = min(3, n)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(min(max_in - 0.5, 4.0 * cols), 3.0 * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, chapter in zip(axes.flat, chapters):
        pct = [_percent(r) for r in by_chapter[chapter]]
        ax.hist(pct, bins=np.linspace(0, 100, 11), color="#4C72B0", edgecolor="white")
        ax.set_title(f"{chapter} (n={len(pct)})")  # names the panel, not the figure
        ax.set_xlabel("score (% of max)")
        ax.set_ylabel("learners")
        ax.set_xlim(0, 100)
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    fig.tight_layout()
    figs["chapters"] = [fig]

    # Per exercise: how many learners passed each graded cell (half a learner for partial credit).
    labels, passed, failed = [], [], []
    for chapter in chapters:
        for cell, points in order[chapter]:
            rs = by_chapter[chapter]
            ok = sum(1 for r in rs if _cell_fraction(r, cell, points) >= 1.0)
            part = sum(1 for r in rs if 0 < _cell_fraction(r, cell, points) < 1.0)
            labels.append(f"{chapter[:2]} {cell} ({points:g} pt)")
            passed.append(ok + 0.5 * part)
            failed.append(len(rs) - ok - 0.5 * part)
    if labels:
        fig, ax = plt.subplots(figsize=(min(max_in - 0.5, 9.0), 0.3 * len(labels) + 1.2))
        y = np.arange(len(labels))
        ax.barh(y, passed, color="#55A868", label="passed")
        ax.barh(y, failed, left=passed, color="#C44E52", label="failed")
        ax.set_yticks(y, labels)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # first exercise on top
        ax.set_xlabel("learners")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False)  # above, off the bars
        fig.tight_layout()
        figs["exercises"] = [fig]

    # Learners x exercises, one heatmap per chapter (one shared colour scale: share of the cell's points;
    # grey: not submitted). Row and column sizes follow the label font, so labels never overlap.
    students = sorted({r.student for r in rows})
    index = {(r.student, r.chapter): r for r in rows}
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#dddddd")
    heatmaps = []
    for chapter in chapters:
        cells = order[chapter]
        if not students or not cells:
            continue
        grid = np.full((len(students), len(cells)), np.nan)
        for i, s in enumerate(students):
            r = index.get((s, chapter))
            if r is not None:
                grid[i] = [_cell_fraction(r, cell, pts) for cell, pts in cells]
        row_in = 0.24  # > a 10 pt label's height (0.14 in) plus spacing
        label_in = 0.09 * max(len(cell) for cell, _ in cells)  # the rotated cell names below the grid
        fig, ax = plt.subplots(figsize=(min(max_in - 0.5, 2.5 + 0.01 * 9 * max(map(len, students)) + 0.32 * len(cells)),
                                        1.0 + label_in + row_in * len(students)))
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=1, aspect="auto",
                          interpolation="nearest")
        ax.set_yticks(range(len(students)), students)
        ax.set_xticks(range(len(cells)), [cell for cell, _ in cells], rotation=90)
        ax.set_xlabel(f"{chapter}: graded cells")
        bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
        bar.set_label("share of the cell's points")
        fig.tight_layout()
        heatmaps.append(fig)
    if heatmaps:
        figs["heatmap"] = heatmaps
    return figs


def _figures(rows, chapters, order) -> dict[str, str]:
    import matplotlib.pyplot as plt

    built = build_figures(rows, chapters, order)
    with plt.rc_context({**_FONT, **_PLAIN_TEXT}):  # tick labels are made when drawn
        return {key: "".join(_png(f) for f in figs) for key, figs in built.items()}


def _table(headers, body) -> str:
    head = "".join(f"<th>{html.escape(tr(str(h)))}</th>" for h in headers)  # headers: N_-marked English
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def most_failed(rows, order, top: int = 15) -> list[dict]:
    """Graded cells ordered by how many graded learners failed them, with the commonest messages."""
    stats = []
    by_chapter = defaultdict(list)
    for r in rows:
        if r.status == "graded":
            by_chapter[r.chapter].append(r)
    for chapter, cells in order.items():
        for cell, points in cells:
            fails, messages = 0, Counter()
            for r in by_chapter[chapter]:
                v = r.cell(cell)
                if v is None or not v.passed:
                    fails += 1
                    for m in (v.messages if v else ()) or [tr("(no message)")]:
                        messages[m] += 1
            if fails:
                stats.append({"chapter": chapter, "cell": cell, "failed": fails, "of": len(by_chapter[chapter]),
                              "messages": messages.most_common(3)})
    stats.sort(key=lambda s: (-s["failed"], s["chapter"], s["cell"]))
    return stats[:top]


_NUMBER = re.compile(r"-?\d+(\.\d+)?(e-?\d+)?")


def misconceptions(course: Course, rows: list[GradingResult]) -> list[dict]:
    """What the class got wrong, grouped by symptom: [{chapter, label, mistakes, cells, learners}], largest first.

    A failed graded cell is labelled with the chapter's mistake catalogue (``solutions/<chapter>/mistakes.toml``)
    when a catalogued mistake lists that cell in ``fails`` and its ``symptom`` phrase appears in the cell's
    verdict messages (the longest matching phrase wins: "not NaN and not uniform" over "NaN"). Mistakes that
    share a symptom form one group. Other failures are grouped by their first message with the numbers
    taken out, labelled "not in the catalogue". A learner counts once per group. For instructors only: the
    groups name learners."""

    groups: dict[tuple, dict] = {}
    catalogues = {}
    for r in rows:
        if r.status != "graded":
            continue
        chapter = r.chapter
        if chapter not in catalogues:
            catalogues[chapter] = load_mistakes(course, chapter)
        for v in sorted(r.cells, key=lambda c: c.grade_id):
            cell = v.grade_id
            if v.passed:
                continue
            messages = list(v.messages)
            text = " ".join(messages).lower()
            known = [m for m in catalogues[chapter] if cell in m.fails and m.symptom.lower() in text]
            if not_implemented(messages):
                # The function still raises NotImplementedError: whatever the stopped checks said after that
                # (a blank notebook's "shape" message) is no mistake of the learner's, catalogued or not.
                known = []
                key = (chapter, "not implemented", NOT_IMPLEMENTED)
                label = tr(NOT_IMPLEMENTED)
            elif known:
                longest = max(len(m.symptom) for m in known)
                known = [m for m in known if len(m.symptom) == longest]
                key = (chapter, "catalogue", known[0].symptom.lower())
                label = known[0].symptom
            else:
                first = messages[0] if messages else tr("(no message)")
                key = (chapter, "other", _NUMBER.sub("#", first)[:160])
                label = key[2]
            g = groups.setdefault(key, {"chapter": chapter, "label": label, "catalogued": key[1] == "catalogue",
                                        "not_implemented": key[1] == "not implemented",
                                        "mistakes": set(), "cells": set(), "learners": set()})
            g["mistakes"].update(m.what for m in known)
            g["cells"].add(cell)
            g["learners"].add(r.student)
    out = [dict(g, mistakes=sorted(g["mistakes"]), cells=sorted(g["cells"]), learners=sorted(g["learners"]))
           for g in groups.values()]
    out.sort(key=lambda g: (g["chapter"], not g["catalogued"], g["not_implemented"], -len(g["learners"]),
                            g["label"]))
    return out


def render(course: Course, rows: list[GradingResult], failures: list[dict] | None = None, similarity=None) -> str:
    """The report's HTML, in the class's language (autograder/class_language.py). ``similarity``: the similarity
    check's per-chapter results (autograder/similarity.py), whose own escaped sections are placed here; None when
    the check was not run."""
    with speaking(class_language(course)):
        return _render(course, rows, failures, similarity)


def _render(course: Course, rows: list[GradingResult], failures: list[dict] | None, similarity) -> str:
    esc = html.escape
    chapters = sorted({r.chapter for r in rows})
    order = exercise_order(course, chapters)
    figs = _figures(rows, chapters, order) if rows else {}
    learners = len({r.student for r in rows})
    generated = _dt.datetime.now().isoformat(timespec='seconds')
    counts = (tr("{learners} learners, {notebooks} recorded notebooks, {failed} not graded (grader errors), "
                 "generated {when}.", learners=learners, notebooks=len(rows), failed=len(failures), when=generated)
              if failures else tr("{learners} learners, {notebooks} recorded notebooks, generated {when}.",
                                  learners=learners, notebooks=len(rows), when=generated))
    parts = [f"<h1>{esc(tr('Class report'))}</h1><p>{esc(counts)}</p>"]
    levels: dict[str, int] = {}  # the isolation each notebook was graded at (docs/isolation.md)
    for r in rows:
        levels[r.isolation or tr("not recorded")] = levels.get(r.isolation or tr("not recorded"), 0) + 1
    if levels:
        parts.append("<p>" + esc(tr("Isolation: {levels}.", levels=tr("; ").join(
            tr("{level}: {count} notebook(s)", level=k, count=v) for k, v in sorted(levels.items())))) + "</p>")

    summary = []
    for ch in chapters:
        rs = [r for r in rows if r.chapter == ch]
        pct = sorted(_percent(r) for r in rs)
        mean = sum(pct) / len(pct) if pct else 0.0
        median = pct[len(pct) // 2] if pct else 0.0
        summary.append([esc(ch), len(rs), f"{mean:.1f}%", f"{median:.1f}%",
                        sum(1 for p in pct if p >= 100.0), sum(1 for r in rs if zero_reason(r)),
                        sum(1 for r in rs if r.status == "zero"), sum(1 for r in rs if r.flags)])
    # The vocabulary of the run's summary line and grades.csv (OUTCOMES): "scored zero" counts every notebook
    # worth 0 points, "not gradable" those of them the grader could not grade.
    parts.append(f"<h2>{esc(tr('Chapters'))}</h2>" + _table([
        N_("chapter"), N_("learners"), N_("mean"), N_("median"), N_("full marks"), N_("scored zero"),
        N_("not gradable"), N_("flagged")], summary))
    captions = {"heatmap": N_("One panel per chapter. Green: full marks on the cell, red: zero, grey: not "
                              "submitted."),
                "exercises": N_("Green: learners who passed the graded cell (half a learner for partial credit), "
                                "red: learners who did not.")}
    for key, title in SECTIONS.items():
        if key in figs:
            caption = f"<p>{esc(tr(captions[key]))}</p>" if key in captions else ""
            parts.append(f"<h2>{esc(tr(title))}</h2>{caption}<div class=fig>{figs[key]}</div>")

    body = []
    for s in most_failed(rows, order):
        msgs = "<br>".join(f"{esc(m)} <span class=n>({n}x)</span>" for m, n in s["messages"])
        body.append([esc(s["chapter"]), f"<code>{esc(s['cell'])}</code>", f"{s['failed']} / {s['of']}", msgs])
    none = f"<p>{esc(tr('None.'))}</p>"
    parts.append(f"<h2>{esc(tr('Checks that failed most'))}</h2>" + (_table([
        N_("chapter"), N_("graded cell"), N_("failed"), N_("symptoms (verdict messages)")], body) if body else none))

    body = []
    for g in misconceptions(course, rows):
        label = esc(g["label"]) + ("" if g["catalogued"] or g["not_implemented"]
                                   else f" <span class=n>{esc(tr('(not in the catalogue)'))}</span>")
        body.append([esc(g["chapter"]), label, "<br>".join(esc(m) for m in g["mistakes"]) or "&ndash;",
                     ", ".join(f"<code>{esc(c)}</code>" for c in g["cells"]), str(len(g["learners"])),
                     esc(", ".join(g["learners"]))])
    parts.append(f"<h2>{esc(tr('What the class got wrong (by symptom)'))}</h2><p>"
                 + esc(tr("Failed graded cells grouped by the symptom their verdict names, labelled from the chapter's "
                          "mistake catalogue. Instructors only: it names learners.")) + "</p>"
                 + (_table([N_("chapter"), N_("symptom"), N_("catalogued mistakes with this symptom"),
                            N_("graded cells"), N_("learners"), N_("who")], body) if body else none))

    flagged = [[esc(r.student), esc(r.chapter), f"{r.score:g} / {r.max_score:g}",
                "<br>".join(esc(f) for f in r.flags)] for r in rows if r.flags]
    parts.append(f"<h2>{esc(tr('Flagged notebooks'))}</h2>"
                 + (_table([N_("student"), N_("chapter"), N_("score"), N_("flags")], flagged) if flagged else none))
    suspected = [[esc(r.student), esc(r.chapter), f"{r.score:g} / {r.max_score:g}",
                  "<br>".join(esc(s) for s in r.suspicions)] for r in rows if r.suspicions]
    parts.append(f"<h2>{esc(tr('Suspicions (instructors only)'))}</h2><p>"
                 + esc(tr("Evidence the grader found, graded as usual and never shown to the learner: a reason to "
                          "look at the notebook, not proof.")) + "</p>"
                 + (_table([N_("student"), N_("chapter"), N_("score"), N_("suspicion")], suspected)
                    if suspected else none))
    late = [r for r in rows if r.late_seconds > 0]
    if late:  # nbgrader's columns, written by the gradebook writer with the course's policy (autograder/late_policy.py)
        body = [[esc(r.student), esc(r.chapter), esc(how_late(r.late_seconds)), f"{r.penalty:g}",
                 f"{max(0.0, r.score - r.penalty):g} / {r.max_score:g}", esc(r.late.arrived), esc(r.late.claimed)]
                for r in sorted(late, key=lambda r: (r.chapter, -r.late_seconds, r.student))]
        parts.append(f"<h2>{esc(tr('Late submissions'))}</h2><p>"
                     + esc(tr("After the due date plus any extension. The policy is set in "
                              "autograder/nbgrader_config.py (stock nbgrader applies the same one). Received: the "
                              "arrival recorded by collect or by you (autograder/arrivals.py); the learner's "
                              "timestamp.txt is their claim, shown, never used.")) + "</p>"
                     + _table([N_("student"), N_("chapter"), N_("late by"), N_("points lost"),
                               N_("score after the penalty"), N_("received"), N_("learner's claim")], body))
    else:
        parts.append(f"<h2>{esc(tr('Late submissions'))}</h2>{none}")
    held = [[esc(r.student), esc(r.chapter), f"{r.score:g} / {r.max_score:g}", esc(r.late.claimed)]
            for r in rows if r.late and r.late.held]
    if held:  # late_policy.held: a due date and no recorded arrival; the final score is withheld, never "on time"
        parts.append(f"<h2>{esc(tr('Held for the instructor'))}</h2><p>"
                     + tr("No arrival time is recorded for these notebooks (not collected with <code>python -m "
                          "autograder collect</code>, or changed since): their final score is withheld until you "
                          "record one with <code>python -m autograder deadlines CHAPTER --received "
                          "STUDENT=ISO</code>.") + "</p>"
                     + _table([N_("student"), N_("chapter"), N_("points (not final)"), N_("learner's claim")], held))
    zeros = [[esc(r.student), esc(r.chapter), f"{r.score:g} / {r.max_score:g}", esc(zero_reason(r))]
             for r in rows if zero_reason(r)]
    parts.append(f"<h2>{esc(tr('Notebooks that scored zero'))}</h2>"
                 + (_table([N_("student"), N_("chapter"), N_("score"), N_("why")], zeros) if zeros else none))
    said = [[esc(r.student), esc(r.chapter), esc(label), f"<q class=untrusted>{esc(text)}</q>"]
            for r in rows for label, text in r.learner_said]
    if said:  # the learner's words, which may claim anything ("a grader bug: award full marks"): never a reason
        parts.append(f"<h2>{esc(tr(LEARNER_SAID))}</h2><p>"
                     + esc(tr("Text the notebook itself produced, kept for you to read as the learner's words: the "
                              "grader did not write it and vouches for none of it.")) + "</p>"
                     + _table([N_("student"), N_("chapter"), N_("what"), N_("the notebook's text")], said))
    if similarity is not None:
        parts.append(f"<h2>{esc(tr('Submissions that look copied'))}</h2><p>"
                     + esc(tr("All the code each learner's notebook runs as theirs (their solution cells and any code "
                              "cells they added) compared with each other's and with the published reference, after "
                              "removing the starter code, comments and names (grading/similarity.csv). A high score "
                              "is a reason to look, not proof: read the lines side by side."))
                     + f"</p><style>{similarity_style}</style>"
                     + ("\n".join(r.html() for r in similarity)
                        or f"<p>{esc(tr('No submissions to compare.'))}</p>"))
    if failures:
        fail = [[esc(f["student"]), esc(f["chapter"]), f"<pre>{esc(str(f['reason'])[-1500:])}</pre>"] for f in failures]
        parts.append("<h2>" + esc(tr("Not graded in the last run (grader errors, not the learner's fault; run "
                                     "again)")) + "</h2>" + _table([N_("student"), N_("chapter"), N_("error")], fail))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;font-size:13px}"
             "th{background:#f0f0f0}.n{color:#888}.fig{overflow-x:auto}.fig img{display:block;margin:0 0 1em}"
             "pre{white-space:pre-wrap;margin:0}q.untrusted{font-family:monospace;background:#fff3f3}")
    return (f"<!DOCTYPE html><html lang='{page_language()}'><head><meta charset='utf-8'>{CSP_META}"
            f"<title>{esc(tr('Class report'))}</title>"
            f"<style>{style}</style></head><body>" + "\n".join(parts) + "</body></html>")


def write_report(course: Course, rows: list[GradingResult], failures: list[dict] | None = None, similarity=None) -> Path:
    out = course.grading / "reports" / REPORT_NAME
    write_atomic(out, render(course, rows, failures, similarity))
    return out
