"""A chapter-3 class graded with the Chinese setting (issue 45, "done when"): every learner's feedback page and the
class report are in Chinese, whatever language each notebook is in and whatever a notebook's kernel or the
grader's shell claims.

The class: the reference solution in an English notebook and in the Chinese release's notebook (``chapters_zh/``,
what ``kit --lang zh`` hands out: a class may mix them), a blank notebook, two catalogued mistakes, and a mistake
whose notebook sets ``ATTENTION_COURSE_LANG=en`` in its own kernel. The course configuration says
``c.AttentionCourse.language = "zh_CN"``; the grading command runs with ``ATTENTION_COURSE_LANG=en`` in its
environment, which must change nothing either.
"""
from __future__ import annotations

import re
import subprocess

import nbformat
import pytest
from bs4 import BeautifulSoup

from attention_course.cells import grade_id, is_graded_test, is_solution
from autograder import check_hints, class_language, submissions, translations
from autograder.output_files import REPORT_NAME

from .batch_support import CHAPTER, REPO, child_env, grade_cmd, make_course

CJK = re.compile(r"[\u4e00-\u9fff]")
# Sentences of the English pages that a Chinese page must not show.
ENGLISH = ("Fix first", "Not implemented yet", " points</h2>", "values are wrong", "hidden check", "did not run",
           "<th>what to look at</th>", ">passed<", ">failed<", "result has", "the cell stopped", "restored")


def _chinese_reference() -> nbformat.NotebookNode:
    """The Chinese release of chapter 3 with the reference's answers typed in, as a learner of the Chinese kit hands
    it in."""
    source = nbformat.read(REPO.source_notebook(CHAPTER), as_version=4)
    answers = {grade_id(c): c.source for c in source.cells if is_solution(c)}
    nb = nbformat.read(REPO.translated_release_notebook(CHAPTER, "zh_CN"), as_version=4)
    for cell in nb.cells:
        if is_solution(cell):
            cell.source = answers[grade_id(cell)]
    return nb


def _tampered() -> nbformat.NotebookNode:
    """The reference with its first graded test cell emptied: the grader restores it and says so (a flag)."""
    nb = submissions.reference(REPO, CHAPTER)
    next(c for c in nb.cells if is_graded_test(c)).source = "pass  # nothing to check here\n"
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    mistakes = submissions.load_mistakes(REPO, CHAPTER)[:3]
    claims = submissions.with_mistake(REPO, CHAPTER, mistakes[2])
    claims.cells.insert(1, nbformat.v4.new_code_cell('import os\nos.environ["ATTENTION_COURSE_LANG"] = "en"'))
    members = {"reference-en": submissions.reference(REPO, CHAPTER), "reference-zh": _chinese_reference(),
               "blank": submissions.blank(REPO, CHAPTER),
               **{f"mistake-{m.id}": submissions.with_mistake(REPO, CHAPTER, m) for m in mistakes[:2]},
               "claims-english": claims, "tampered": _tampered()}
    course = make_course(tmp_path_factory.mktemp("chinese-class"), members=members)
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + '\nc.AttentionCourse.language = "zh_CN"\n')
    done = subprocess.run(grade_cmd(course, "--workers", "1"), capture_output=True, text=True, timeout=900,
                          cwd=course.root, env={**child_env(), "ATTENTION_COURSE_LANG": "en"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    pages = {s: (course.grading / "feedback" / s / CHAPTER / f"{CHAPTER}.html").read_text(encoding="utf-8")
             for s in members}
    report = (course.grading / "reports" / REPORT_NAME).read_text(encoding="utf-8")
    return course, pages, report


def _cells(page: str) -> dict[str, tuple[str, str, list[str]]]:
    """``{grade_id: (result, points, [messages])}`` of a feedback page's table."""
    out = {}
    for row in BeautifulSoup(page, "html.parser").select("tbody tr"):
        cells = row.find_all("td")
        out[cells[0].code.get_text()] = (cells[1].get_text(), cells[2].get_text(),
                                         [li.get_text() for li in cells[3].find_all("li")])
    return out


@pytest.mark.sandbox
@pytest.mark.timeout(1200)
def test_every_feedback_page_of_the_class_is_in_chinese(graded):
    _, pages, _ = graded
    for student, page in pages.items():
        assert "<html lang='zh-CN'>" in page and "<title>反馈</title>" in page, student
        assert "<th>测试</th><th>结果</th><th>分数</th><th>要看的地方</th>" in page, student
        assert re.search(rf"{CHAPTER}：[\d.]+ / [\d.]+ 分</h2>", page), student
        shown = [e for e in ENGLISH if e in page]
        assert not shown, f"{student}'s page shows English sentences {shown}"
        for gid, (result, _, messages) in _cells(page).items():
            assert result in ("通过", "未通过"), (student, gid, result)
            assert all(CJK.search(m) for m in messages), (student, gid, messages)


@pytest.mark.sandbox
@pytest.mark.timeout(1200)
def test_an_english_and_a_chinese_notebook_of_the_same_work_get_the_same_chinese_page(graded):
    _, pages, _ = graded
    english, chinese = _cells(pages["reference-en"]), _cells(pages["reference-zh"])
    assert english == chinese and english, "grading cares about a notebook's language"
    assert all(result == "通过" for result, _, _ in english.values())


@pytest.mark.sandbox
@pytest.mark.timeout(1200)
def test_mistakes_and_a_blank_notebook_are_told_their_symptoms_in_chinese(graded):
    _, pages, _ = graded
    assert "<strong>尚未实现</strong>（函数仍然引发 NotImplementedError），从第一个开始：" in pages["blank"]
    assert "练习 1" in pages["blank"]
    for student in [s for s in pages if s.startswith("mistake-")] + ["claims-english"]:
        page = pages[student]
        assert "<strong>先改这里：</strong>" in page, student
        failed = [messages for result, _, messages in _cells(page).values() if result == "未通过"]
        assert failed and all(messages for messages in failed), f"{student}: a failed cell without a symptom"
    # the kernel that set ATTENTION_COURSE_LANG=en for itself got the same language as everyone
    assert _cells(pages["claims-english"]) and CJK.search(pages["claims-english"])
    assert re.search(r"<li>被修改的测试单元格 \w+ 已恢复原样</li>", pages["tampered"]), "the repair's flag"


@pytest.mark.sandbox
@pytest.mark.timeout(1200)
def test_the_class_report_is_in_chinese(graded):
    _, _, report = graded
    soup = BeautifulSoup(report, "html.parser")
    assert soup.html["lang"] == "zh-CN" and soup.title.get_text() == "班级报告"
    heads = [h.get_text() for h in soup.find_all("h2")]
    for title in ("各章", "各章的分数分布", "失败最多的检查", "全班的错误（按症状）", "得零分的笔记本"):
        assert title in heads, heads
    assert not [h for h in heads if not CJK.search(h)], heads
    assert "<th>章</th><th>学习者</th><th>平均</th>" in report
    failed_most = next(h for h in soup.find_all("h2") if h.get_text() == "失败最多的检查").find_next("table")
    symptoms = [row.find_all("td")[3].get_text() for row in failed_most.tbody.find_all("tr")]
    assert symptoms and all(CJK.search(s) for s in symptoms), symptoms


@pytest.mark.sandbox
@pytest.mark.timeout(1200)
def test_the_checks_hints_are_in_chinese_for_visible_and_hidden_checks(graded):
    """The two mistakes fail a visible and a hidden check of masked_softmax: each failed check's hint (English in
    the test cell, which nbgrader checksums) is shown in Chinese, a hidden one from the grader's catalogue."""
    _, pages, _ = graded
    hints = translations.hint_entries(REPO, CHAPTER)
    chinese = class_language.hint_translations.__wrapped__("zh_CN")
    shown: dict[str, set[str]] = {}
    for student in [s for s in pages if s.startswith("mistake-")]:
        messages = " ".join(m for result, _, ms in _cells(pages[student]).values() if result == "未通过" for m in ms)
        english = [h.msgid for h in hints if len(h.msgid) > 15 and h.msgid in messages]
        assert not english, f"{student}'s page shows the English hints {english}"
        for h in hints:
            if chinese.get(h.msgid) and chinese[h.msgid] in messages:
                shown.setdefault(h.visibility, set()).add(h.msgid)
    assert set(shown) == {check_hints.VISIBLE, check_hints.HIDDEN}, shown
