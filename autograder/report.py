"""The class report: one self-contained HTML page (figures embedded as base64 PNG) under grading/reports/.

It shows, from the results recorded in the gradebook: a summary per chapter; the score distribution per
chapter and per exercise (graded test cell); a learners x exercises heatmap; the checks that failed most
with the verdict messages learners saw; flagged notebooks, notebooks that scored zero and why, and
submissions the grader could not grade in the last run.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import io
from collections import Counter, defaultdict
from pathlib import Path

import nbformat

from attention_course.cells import grade_id, is_graded_test, nbgrader_meta

from .course import Course

REPORT_NAME = "class_report.html"


def exercise_order(course: Course, chapters: list[str]) -> dict[str, list[tuple[str, float]]]:
    """{chapter: [(grade_id, points), ...]} in notebook order, from the source notebooks."""
    order = {}
    for chapter in chapters:
        path = course.source_notebook(chapter)
        if path.is_file():
            nb = nbformat.read(path, as_version=4)
            order[chapter] = [(grade_id(c), float(nbgrader_meta(c).get("points", 0))) for c in nb.cells
                              if is_graded_test(c)]
        else:
            order[chapter] = []
    return order


def _cell_fraction(row: dict, cell: str, points: float) -> float:
    v = row["cells"].get(cell)
    if v is None or row["status"] != "graded":
        return 0.0
    return v["score"] / v["max_score"] if v["max_score"] else float(v["passed"])


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return '<img alt="figure" src="data:image/png;base64,' + base64.b64encode(buf.getvalue()).decode() + '">'


def _figures(rows, chapters, order) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    figs = {}
    by_chapter = defaultdict(list)
    for r in rows:
        by_chapter[r["chapter"]].append(r)

    # Score distribution per chapter.
    n = len(chapters)
    cols = min(3, n)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 2.9 * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, chapter in zip(axes.flat, chapters):
        pct = [100.0 * r["score"] / r["max_score"] if r["max_score"] else 0.0 for r in by_chapter[chapter]]
        ax.hist(pct, bins=np.linspace(0, 100, 11), color="#4C72B0", edgecolor="white")
        ax.set_title(f"{chapter} (n={len(pct)})", fontsize=9)
        ax.set_xlabel("score (% of max)")
        ax.set_ylabel("learners")
        ax.set_xlim(0, 100)
    fig.suptitle("Score distribution per chapter")
    fig.tight_layout()
    figs["chapters"] = _png(fig)

    # Per exercise: share of learners who passed each graded cell.
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
        fig, ax = plt.subplots(figsize=(8, 0.28 * len(labels) + 1.2))
        y = np.arange(len(labels))
        ax.barh(y, passed, color="#55A868", label="passed")
        ax.barh(y, failed, left=passed, color="#C44E52", label="failed")
        ax.set_yticks(y, labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("learners")
        ax.legend(loc="lower right", fontsize=8)
        ax.set_title("Score distribution per exercise (graded cell)")
        fig.tight_layout()
        figs["exercises"] = _png(fig)

    # Learners x exercises heatmap (grey: not submitted).
    students = sorted({r["student"] for r in rows})
    columns = [(ch, cell, pts) for ch in chapters for cell, pts in order[ch]]
    if students and columns:
        index = {(r["student"], r["chapter"]): r for r in rows}
        grid = np.full((len(students), len(columns)), np.nan)
        for i, s in enumerate(students):
            for j, (ch, cell, pts) in enumerate(columns):
                r = index.get((s, ch))
                if r is not None:
                    grid[i, j] = _cell_fraction(r, cell, pts)
        fig, ax = plt.subplots(figsize=(min(30, max(6, 2 + 0.3 * len(columns))),
                                        min(40, max(3, 1.5 + 0.22 * len(students)))))
        cmap = matplotlib.colormaps["RdYlGn"].copy()
        cmap.set_bad("#dddddd")
        ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(students)), students, fontsize=6)
        ax.set_xticks(range(len(columns)), [f"{ch[:2]} {cell}" for ch, cell, _ in columns], rotation=90, fontsize=6)
        bounds = [j for j in range(1, len(columns)) if columns[j][0] != columns[j - 1][0]]
        for b in bounds:
            ax.axvline(b - 0.5, color="black", linewidth=1)
        ax.set_title("Learners x exercises (green: full marks, red: zero, grey: not submitted)")
        fig.tight_layout()
        figs["heatmap"] = _png(fig)
    return figs


def _table(headers, body) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def most_failed(rows, order, top: int = 15) -> list[dict]:
    """Graded cells ordered by how many graded learners failed them, with the commonest messages."""
    stats = []
    by_chapter = defaultdict(list)
    for r in rows:
        if r["status"] == "graded":
            by_chapter[r["chapter"]].append(r)
    for chapter, cells in order.items():
        for cell, points in cells:
            fails, messages = 0, Counter()
            for r in by_chapter[chapter]:
                v = r["cells"].get(cell)
                if v is None or not v["passed"]:
                    fails += 1
                    for m in (v or {}).get("messages", []) or ["(no message)"]:
                        messages[m] += 1
            if fails:
                stats.append({"chapter": chapter, "cell": cell, "failed": fails, "of": len(by_chapter[chapter]),
                              "messages": messages.most_common(3)})
    stats.sort(key=lambda s: (-s["failed"], s["chapter"], s["cell"]))
    return stats[:top]


def render(course: Course, rows: list[dict], failures: list[dict] | None = None) -> str:
    esc = html.escape
    chapters = sorted({r["chapter"] for r in rows})
    order = exercise_order(course, chapters)
    figs = _figures(rows, chapters, order) if rows else {}
    parts = [f"<h1>Class report</h1><p>{len({r['student'] for r in rows})} learners, {len(rows)} graded notebooks, "
             f"generated {_dt.datetime.now().isoformat(timespec='seconds')}.</p>"]
    levels: dict[str, int] = {}  # the isolation each notebook was graded at (docs/isolation.md)
    for r in rows:
        levels[r.get("isolation") or "not recorded"] = levels.get(r.get("isolation") or "not recorded", 0) + 1
    if levels:
        parts.append("<p>Isolation: " + "; ".join(f"{esc(k)}: {v} notebook(s)" for k, v in sorted(levels.items()))
                     + ".</p>")

    summary = []
    for ch in chapters:
        rs = [r for r in rows if r["chapter"] == ch]
        pct = sorted(100.0 * r["score"] / r["max_score"] if r["max_score"] else 0.0 for r in rs)
        mean = sum(pct) / len(pct) if pct else 0.0
        median = pct[len(pct) // 2] if pct else 0.0
        summary.append([esc(ch), len(rs), f"{mean:.1f}%", f"{median:.1f}%",
                        sum(1 for p in pct if p >= 100.0), sum(1 for r in rs if r["status"] == "zero"),
                        sum(1 for r in rs if r["flags"])])
    parts.append("<h2>Chapters</h2>" + _table(["chapter", "learners", "mean", "median", "full marks", "zero",
                                                "flagged"], summary))
    for key, title in (("chapters", "Score distribution per chapter"), ("exercises", "Score distribution per exercise"),
                       ("heatmap", "Learners x exercises")):
        if key in figs:
            parts.append(f"<h2>{title}</h2>{figs[key]}")

    body = []
    for s in most_failed(rows, order):
        msgs = "<br>".join(f"{esc(m)} <span class=n>({n}x)</span>" for m, n in s["messages"])
        body.append([esc(s["chapter"]), f"<code>{esc(s['cell'])}</code>", f"{s['failed']} / {s['of']}", msgs])
    parts.append("<h2>Checks that failed most</h2>" + (_table(["chapter", "graded cell", "failed", "symptoms "
                                                               "(verdict messages)"], body) if body else "<p>None.</p>"))

    flagged = [[esc(r["student"]), esc(r["chapter"]), f"{r['score']:g} / {r['max_score']:g}",
                "<br>".join(esc(f) for f in r["flags"])] for r in rows if r["flags"]]
    parts.append("<h2>Flagged notebooks</h2>" + (_table(["student", "chapter", "score", "flags"], flagged)
                                                 if flagged else "<p>None.</p>"))
    zeros = [[esc(r["student"]), esc(r["chapter"]), esc(r["reason"])] for r in rows if r["status"] == "zero"]
    parts.append("<h2>Notebooks that scored zero</h2>" + (_table(["student", "chapter", "reason"], zeros)
                                                          if zeros else "<p>None.</p>"))
    if failures:
        fail = [[esc(f["student"]), esc(f["chapter"]), f"<pre>{esc(str(f['reason'])[-1500:])}</pre>"] for f in failures]
        parts.append("<h2>Not graded in the last run (grader errors; run again)</h2>"
                     + _table(["student", "chapter", "error"], fail))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;font-size:13px}"
             "th{background:#f0f0f0}.n{color:#888}img{max-width:100%}pre{white-space:pre-wrap;margin:0}")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Class report</title>"
            f"<style>{style}</style></head><body>" + "\n".join(parts) + "</body></html>")


def write_report(course: Course, rows: list[dict], failures: list[dict] | None = None) -> Path:
    out = course.grading / "reports" / REPORT_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render(course, rows, failures), encoding="utf-8")
    tmp.replace(out)
    return out
