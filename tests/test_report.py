"""The class report counts right and can be read: on a synthetic class whose numbers are known, the chapter
table's zero column and the list of zero notebooks include a blank submission that was graded and failed
every check (issue 16: it said "None" while the blank scored 0/27), the reason of an ungradable notebook is
kept apart from a grader error, every section title appears once (the histogram's used to appear twice),
and every text in every figure is at least 10 pt in an image the page does not scale down."""
from __future__ import annotations

import base64
import io

import pytest
from bs4 import BeautifulSoup
from PIL import Image

from autograder import report
from autograder.course import Course
from autograder.results import CellResult, GradingResult

pytestmark = pytest.mark.unit

CHAPTER = "03_scoring_functions"


def _row(student, status, passed_cells, order, reason="", flags=(),
         failed=("wrong shape: expected (2, 3), got (3, 2)",)):
    cells = tuple(CellResult(cell, pts, cell in passed_cells, () if cell in passed_cells else failed)
                  for cell, pts in order) if status == "graded" or passed_cells is not None else ()
    return GradingResult(student, CHAPTER, status, reason, tuple(flags), cells,
                         declared_max=sum(p for _, p in order), seconds=1.0, key="k")


@pytest.fixture(scope="module")
def klass():
    course = Course()
    order = report.exercise_order(course, [CHAPTER])[CHAPTER]
    assert len(order) >= 4, "chapter 3 has graded cells"
    every = {c for c, _ in order}
    half = {c for c, _ in order[: len(order) // 2]}
    rows = [
        _row("ada", "graded", every, order),                       # full marks
        _row("bea", "graded", set(), order),                       # blank: graded, no check passed
        _row("cy", "graded", half, order),                         # partial
        _row("dan", "zero", set(), order, reason="malformed JSON"),  # unreadable file
        _row("eve", "zero", None, order, reason="no notebook submitted"),
        _row("fay", "graded", every, order, flags=["edited test cell test_dot restored"]),
    ]
    failures = [{"student": "gus", "chapter": CHAPTER, "reason": "grader error: the zygote died"}]
    page = report.render(course, rows, failures)
    return course, order, rows, failures, BeautifulSoup(page, "html.parser"), page


def _section(soup, title):
    head = next(h for h in soup.find_all("h2") if h.get_text().startswith(title))
    out = []
    for sib in head.next_siblings:
        if getattr(sib, "name", None) == "h2":
            break
        out.append(sib)
    return out


def _table(nodes):
    table = next(n for n in nodes if getattr(n, "name", None) == "table")
    heads = [th.get_text() for th in table.find_all("th")]
    return [dict(zip(heads, [td.get_text() for td in tr.find_all("td")])) for tr in table.tbody.find_all("tr")]


def test_chapter_table_counts(klass):
    *_, soup, _ = klass
    (row,) = _table(_section(soup, "Chapters"))
    assert row["chapter"] == CHAPTER
    assert row["learners"] == "6"
    assert row["scored zero"] == "3", "bea (blank, graded 0), dan (unreadable) and eve (nothing submitted)"
    assert row["not gradable"] == "2", "dan and eve could not be graded"
    assert row["full marks"] == "2" and row["flagged"] == "1"


def test_every_zero_is_listed_with_its_own_reason(klass):
    *_, soup, _ = klass
    zeros = {r["student"]: r for r in _table(_section(soup, "Notebooks that scored zero"))}
    assert set(zeros) == {"bea", "dan", "eve"}
    assert zeros["bea"]["why"].startswith("graded: no check passed")
    assert "malformed JSON" in zeros["dan"]["why"] and zeros["dan"]["why"].startswith("not gradable")
    assert "no notebook submitted" in zeros["eve"]["why"]
    assert all(z["score"].startswith("0 / ") for z in zeros.values())


def test_grader_errors_are_kept_apart_from_zeros(klass):
    *_, soup, _ = klass
    zero_text = " ".join(n.get_text() for n in _section(soup, "Notebooks that scored zero") if hasattr(n, "get_text"))
    assert "gus" not in zero_text, "a grader error is not the learner's zero"
    failed = _table(_section(soup, "Not graded in the last run"))
    assert [f["student"] for f in failed] == ["gus"] and "zygote died" in failed[0]["error"]


def test_no_zero_means_none(klass):
    course, order, rows, *_ = klass
    page = BeautifulSoup(report.render(course, [r for r in rows if r.score > 0]), "html.parser")
    text = " ".join(n.get_text() for n in _section(page, "Notebooks that scored zero") if hasattr(n, "get_text"))
    assert text.strip() == "None."
    (row,) = _table(_section(page, "Chapters"))
    assert row["scored zero"] == row["not gradable"] == "0"


def test_each_title_appears_once(klass):
    course, order, rows, _, soup, page = klass
    heads = [h.get_text() for h in soup.find_all("h2")]
    assert len(heads) == len(set(heads))
    for title in report.SECTIONS.values():
        assert page.count(title) == 1, f"{title!r} appears {page.count(title)} times in the page"
    figs = report.build_figures(rows, [CHAPTER], {CHAPTER: order})
    try:
        for key, figures in figs.items():
            for fig in figures:
                texts = [fig._suptitle.get_text() if fig._suptitle else ""]
                texts += [ax.get_title() for ax in fig.axes]
                assert not any(report.SECTIONS[key] in t for t in texts), f"{key}: the figure repeats its heading"
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")


def _visible_texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_figure_text_is_readable(klass):
    course, order, rows, *_ = klass
    # A class of 40 learners, so the heatmap has many rows.
    big = [r.replace(student=f"learner{i:03d}") for i in range(40) for r in rows[i % len(rows):i % len(rows) + 1]]
    figs = report.build_figures(big, [CHAPTER], {CHAPTER: order})
    assert set(figs) == {"chapters", "exercises", "heatmap"}
    try:
        for key, figures in figs.items():
            for fig in figures:
                small = [(t.get_text(), t.get_fontsize()) for t in _visible_texts(fig)
                         if t.get_fontsize() < report.MIN_FONT_PT]
                assert not small, f"{key}: text below {report.MIN_FONT_PT} pt: {small[:5]}"
                assert report.MIN_FONT_PT >= 10
                if key == "heatmap":  # every learner and every cell is labelled
                    ax = fig.axes[0]
                    assert [t.get_text() for t in ax.get_yticklabels()] == sorted({r.student for r in big})
                    assert len(ax.get_xticklabels()) == len(order)
                    # a row is at least as tall as a label, so labels do not overlap
                    learners = len({r.student for r in big})
                    row_pt = ax.get_window_extent().height / learners * 72 / fig.dpi
                    assert row_pt >= report.MIN_FONT_PT, f"heatmap rows are {row_pt:.1f} pt tall"
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")


def test_images_are_not_scaled_down(klass):
    *_, soup, _ = klass
    imgs = soup.find_all("img")
    assert len(imgs) >= 3
    for img in imgs:
        data = base64.b64decode(img["src"].split(",", 1)[1])
        width, _ = Image.open(io.BytesIO(data)).size
        assert width <= report.MAX_FIGURE_PX, f"an image {width} px wide would be scaled down by the page"
    style = soup.find("style").get_text()
    assert "max-width:100%" not in style.replace(" ", ""), "images keep their size (text stays at its point size)"


def _catalogue_class(course, chapters):
    """Learners made from the mistake catalogues: mistake i of a chapter is made by (i % 3) + 1 learners, whose
    failed cells are the mistake's `fails` with a verdict naming its symptom; every other cell passes."""
    from autograder.submissions import load_mistakes

    rows, made = [], {}
    for chapter in chapters:
        order = report.exercise_order(course, [chapter])[chapter]
        for i, m in enumerate(load_mistakes(course, chapter)):
            for k in range(i % 3 + 1):
                student = f"{chapter[:2]}-{m.id}-{k}"
                cells = tuple(CellResult(cell, pts, cell not in m.fails,
                                         (f"check 2 of 3 failed: {m.symptom} (max abs error {0.1 * (k + 1):.2f})",)
                                         if cell in m.fails else ()) for cell, pts in order)
                rows.append(GradingResult(student, chapter, "graded", cells=cells))
                made.setdefault((chapter, m.symptom.lower()), set()).add(student)
    return rows, made


def test_misconceptions_counted_by_catalogued_symptom(klass):
    course = klass[0]
    chapters = ["03_scoring_functions", "05_multi_head_attention"]
    rows, made = _catalogue_class(course, chapters)
    # one learner whose failure is not in any catalogue, twice with different numbers: one group of two
    order = report.exercise_order(course, [CHAPTER])[CHAPTER]
    for k, err in enumerate(("0.25", "3.5")):
        cells = tuple(CellResult(c, p, False, (f"the plot's legend is missing ({err} of the labels)",))
                      for c, p in order[:1])
        rows.append(GradingResult(f"odd-{k}", CHAPTER, "graded", cells=cells))
    groups = report.misconceptions(course, rows)
    catalogued = {(g["chapter"], g["label"].lower()): g for g in groups if g["catalogued"]}
    assert set(catalogued) == set(made), "one group per catalogued symptom, none invented"
    for key, learners in made.items():
        assert set(catalogued[key]["learners"]) == learners, key
    others = [g for g in groups if not g["catalogued"]]
    assert len(others) == 1 and others[0]["learners"] == ["odd-0", "odd-1"]
    # in the page, with counts
    page = BeautifulSoup(report.render(course, rows), "html.parser")
    table = _table(_section(page, "What the class got wrong"))
    by_label = {(r["chapter"], r["symptom"].replace(" (not in the catalogue)", "").lower()): r for r in table}
    for key, learners in made.items():
        assert by_label[key]["learners"] == str(len(learners))
    assert sum(1 for r in table if "not in the catalogue" in r["symptom"]) == 1


@pytest.mark.parametrize("student", ["$\\alpha$", "$\\frac{$", "a$b^$c", "line\nbreak", "=cmd|' /C calc'!A0",
                                     "<script>alert(1)</script>", "x" * 128])
def test_a_student_id_is_drawn_and_written_as_text(student):
    """Student ids are folder names a learner chose (issue 24): mathtext in one used to make matplotlib raise and
    the whole class report fail, on every run, because the row stays in the gradebook."""
    course = Course()
    order = report.exercise_order(course, [CHAPTER])[CHAPTER]
    rows = [_row("ada", "graded", {c for c, _ in order}, order), _row(student, "graded", set(), order,
                                                                       flags=[f"odd {student}"])]
    page = report.render(course, rows)
    soup = BeautifulSoup(page, "html.parser")
    assert not soup.find("script"), "a student id became markup"
    assert student in soup.get_text(), "the id is shown as it is"
    heatmap = report.build_figures(rows, [CHAPTER], {CHAPTER: order})["heatmap"][0]
    heatmap.canvas.draw()
    labels = [t.get_text() for t in heatmap.axes[0].get_yticklabels()]
    assert student in labels
    assert all(not t._parse_math for t in heatmap.axes[0].get_yticklabels()), "tick labels parse mathtext"
    import matplotlib.pyplot as plt

    plt.close("all")


def test_a_blank_is_not_implemented_and_every_count_says_so(tmp_path):
    """The two-learner class of issue 29: the reference and a blank. The blank's cells say the function still
    raises NotImplementedError and then what the stopped checks saw (here "shape", the symptom of a catalogued
    chapter-3 mistake): it is grouped as not implemented, not under that mistake; and the summary line, the
    report and grades.csv count it the same way, one "scored zero" and no "not gradable"."""
    import csv

    from autograder.run_summary import Summary
    from autograder.outputs import write_csv
    from autograder.submissions import load_mistakes
    from autograder.trusted import NOT_IMPLEMENTED

    course = Course()
    order = report.exercise_order(course, [CHAPTER])[CHAPTER]
    reference = _row("reference", "graded", {c for c, _ in order}, order)
    blank = _row("blank", "graded", set(), order,
                 failed=(NOT_IMPLEMENTED, "scores has the wrong shape: expected (2, 3), got (3, 2)"))
    rows = [reference, blank]
    assert any(m.symptom == "shape" for m in load_mistakes(course, CHAPTER)), \
        "the catalogue has the symptom the blank's messages name"

    groups = report.misconceptions(course, rows)
    assert [(g["label"], g["learners"], g["catalogued"]) for g in groups] == [(NOT_IMPLEMENTED, ["blank"], False)]
    page = BeautifulSoup(report.render(course, rows), "html.parser")
    (wrong,) = _table(_section(page, "What the class got wrong"))
    assert wrong["symptom"] == NOT_IMPLEMENTED and wrong["catalogued mistakes with this symptom"] == "–"
    (row,) = _table(_section(page, "Chapters"))
    assert (row["scored zero"], row["not gradable"]) == ("1", "0")

    summary = Summary(submissions=2, graded=2, scored_zero=1)
    assert "2 graded, 0 not gradable, 1 scored zero" in summary.line()

    (tmp_path / "grading").mkdir()
    grades_csv, _ = write_csv(Course(tmp_path), rows)
    with open(grades_csv, newline="") as f:
        outcomes = {r["student"]: r["outcome"] for r in csv.DictReader(f)}
    assert outcomes == {"reference": "graded", "blank": "scored zero"}


def test_suspicions_and_a_notebooks_own_text_reach_the_instructor_only_under_their_own_labels(tmp_path):
    """Issue 41, classes 4 and 7: a suspicion (a copy of the course's hidden tests) is in the report's own section and
    grades.csv's suspicion column, not among the flags the learner sees; the text a notebook produced (a forged
    exception's message) is in the report under "The notebook's own text (untrusted)", escaped, and never in a reason
    or the flagged table. The learner's feedback page is the same with or without either."""
    import csv

    from autograder.outputs import write_csv
    from autograder.trusted import feedback_html

    course = Course()
    order = report.exercise_order(course, [CHAPTER])[CHAPTER]
    every = {c for c, _ in order}
    copied = _row("copier", "graded", every, order).replace(suspicions=("holds hidden tests of test_x",))
    said = "<b>grader bug</b>, not the learner's fault -- please award full marks by hand"
    broke = _row("breaker", "zero", set(), order, reason="kernel died (the notebook broke the Python it runs in: an "
                 "exception of its own class)").replace(learner_said=[("what the kernel sent when it broke", said)])
    plain = _row("plain", "graded", every, order)
    page = report.render(course, [copied, broke, plain])
    soup = BeautifulSoup(page, "html.parser")
    (suspect,) = _table(_section(soup, "Suspicions (instructors only)"))
    assert (suspect["student"], suspect["suspicion"]) == ("copier", "holds hidden tests of test_x")
    assert "None." in " ".join(n.get_text() for n in _section(soup, "Flagged notebooks") if hasattr(n, "get_text"))
    (own,) = _table(_section(soup, report.LEARNER_SAID))
    assert (own["student"], own["what"]) == ("breaker", "what the kernel sent when it broke")
    assert own["the notebook's text"] == said
    assert not soup.find("b") and "&lt;b&gt;grader bug" in page
    zeros = {z["student"]: z["why"] for z in _table(_section(soup, "Notebooks that scored zero"))}
    assert "grader bug" not in zeros["breaker"] and "its own class" in zeros["breaker"]
    assert BeautifulSoup(report.render(course, [plain]), "html.parser").find(
        string=lambda t: t and "own text" in t) is None, "no such section when no notebook said anything"

    (tmp_path / "grading").mkdir()
    grades_csv, _ = write_csv(Course(tmp_path), [copied, broke, plain])
    with open(grades_csv, newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert rows["copier"]["suspicion"] == "holds hidden tests of test_x" and rows["copier"]["flagged"] == "no"
    assert rows["plain"]["suspicion"] == rows["breaker"]["suspicion"] == ""
    assert "grader bug" not in " ".join(" ".join(r.values()) for r in rows.values())

    assert feedback_html(copied) == feedback_html(copied.replace(suspicions=()))
    assert feedback_html(broke) == feedback_html(broke.replace(learner_said=()))
