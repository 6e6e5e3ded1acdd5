"""Messages in the learner's language (issue 45, item 4): the language setting, the lookup and its catalogues.

- the learner's language is ``ATTENTION_COURSE_LANG``, else the kit's recorded language, else English; a value that
  names no language we have is passed over; a trusted caller's choice (the grader's class language) beats both;
- every message the code looks up is in its catalogue, every catalogue entry is used by the code, every entry is
  translated and not fuzzy, and a translation keeps the English's format fields and HTML tags (so none can lag or
  break silently); the learner package's compiled catalogue, which its wheel carries, is the ``.po``'s;
- check messages, the self-check's words, the grader's decisions and the feedback page read in Chinese when the
  language is Chinese, and the grader's language is the course configuration's, never its environment's.
"""
from __future__ import annotations

import re
import shutil
from collections import Counter

import numpy as np
import pytest

from attention_course import language, verdicts
from attention_course.checks import CheckFailed, Checks
from attention_course.language import ENVIRONMENT, speaking, tr
from attention_course.selfcheck import Finding, Result
from autograder import class_language, messages, trusted
from autograder.course import Course
from autograder.results import GradingResult

pytestmark = pytest.mark.unit

ZH = "zh_CN"
FIELD = re.compile(r"\{(\w*)(?:[!:][^{}]*)?\}")
TAG = re.compile(r"</?[a-zA-Z][^>]*>")


# -- which language ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, wanted", [("zh", ZH), ("zh_CN", ZH), ("zh-CN", ZH), ("ZH_cn.UTF-8", ZH),
                                           ("zh-Hans", ZH), ("en", "en"), ("en_GB", "en"), ("C", "en"),
                                           ("fr", None), ("", None), (None, None), ("klingon", None)])
def test_language_names_are_normalised(value, wanted):
    assert language.normalise(value) == wanted


def test_the_environment_beats_the_kit_which_beats_english(tmp_path):
    assert language.learner_language({}, tmp_path / "none") == "en", "no variable, no kit file: English"
    kit = tmp_path / "kit_language"
    kit.write_text("zh_CN\n")
    assert language.learner_language({}, kit) == ZH, "a Chinese kit speaks Chinese"
    assert language.learner_language({ENVIRONMENT: "en"}, kit) == "en", "the variable beats the kit"
    assert language.learner_language({ENVIRONMENT: "zh"}, tmp_path / "none") == ZH
    assert language.learner_language({ENVIRONMENT: "fr"}, kit) == ZH, "a language we do not have is passed over"
    assert language.learner_language({ENVIRONMENT: "fr"}, tmp_path / "none") == "en"
    unknown = tmp_path / "other" / "kit_language"
    unknown.parent.mkdir()
    unknown.write_text("tlh\n")
    assert language.learner_language({}, unknown) == "en", "an unknown kit language falls back to English"


def test_the_repositorys_package_records_no_kit_language():
    """Only a kit's wheel carries the file; in the repository the package speaks English unless asked."""
    assert not language.KIT_LANGUAGE_FILE.exists()
    assert language.kit_language() is None


def test_a_trusted_choice_beats_the_environment(monkeypatch):
    monkeypatch.setenv(ENVIRONMENT, "zh")
    assert language.active() == ZH and language.chosen() is None
    with speaking("en"):
        assert language.active() == "en" and tr("the answer is wrong") == "the answer is wrong"
    with speaking("fr"):
        assert language.active() == "en", "a trusted caller's unknown language is English, not the environment's"
    assert tr("the answer is wrong") != "the answer is wrong", "the variable applies again outside the block"


def test_the_lookup_fills_fields_and_falls_back_to_english(monkeypatch):
    with speaking(ZH):
        text = tr("result has shape {got} but should have shape {wanted}", got="(3, 2)", wanted="(2, 3)")
        assert "(3, 2)" in text and "(2, 3)" in text and "形状" in text
        assert tr("a message no catalogue has: {x}", x=1) == "a message no catalogue has: 1"
    assert tr("result has shape {got} but should have shape {wanted}", got="(3, 2)", wanted="(2, 3)") == \
        "result has shape (3, 2) but should have shape (2, 3)"


def test_a_translation_that_does_not_format_reads_in_english():
    assert language.render("{nope} 不对", "{x} is wrong", {"x": 1}) == "1 is wrong"


# -- the catalogues ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("domain", messages.DOMAINS, ids=lambda d: d.name)
def test_every_message_of_the_code_is_in_the_catalogue_and_every_entry_is_used(domain):
    in_code = set(messages.messages_in_code(domain.package))
    catalog = messages.read(domain.catalogue(ZH))
    assert catalog is not None, f"no {domain.catalogue(ZH)}: python -m autograder messages update"
    in_catalogue = {m.id for m in catalog if m.id}
    assert not in_code - in_catalogue, ("messages the catalogue lacks (python -m autograder messages update, then "
                                        f"translate): {sorted(in_code - in_catalogue)}")
    assert not in_catalogue - in_code, f"entries no code uses any more: {sorted(in_catalogue - in_code)}"
    assert not catalog.obsolete, f"obsolete entries: {sorted(catalog.obsolete)}"


@pytest.mark.parametrize("domain", messages.DOMAINS, ids=lambda d: d.name)
def test_every_entry_is_translated_and_none_is_fuzzy(domain):
    catalog = messages.read(domain.catalogue(ZH))
    assert catalog is not None
    counts = messages.counts(catalog)
    untranslated = [m.id for m in catalog if m.id and not m.string]
    fuzzy = [m.id for m in catalog if m.id and m.fuzzy]
    assert counts.complete and not untranslated and not fuzzy, f"untranslated: {untranslated}; fuzzy: {fuzzy}"


@pytest.mark.parametrize("domain", messages.DOMAINS, ids=lambda d: d.name)
def test_translations_keep_the_format_fields_and_tags(domain):
    catalog = messages.read(domain.catalogue(ZH))
    assert catalog is not None
    bad = [(m.id, m.string) for m in catalog if m.id and m.string and (
        Counter(FIELD.findall(m.id)) != Counter(FIELD.findall(m.string))
        or Counter(TAG.findall(m.id)) != Counter(TAG.findall(m.string)))]
    assert not bad, bad


def test_every_looked_up_table_entry_is_marked():
    """A lookup of a name (``tr(CATEGORY_NAMES[c])``) is only as good as the table's marks: every value of the
    module-level tables that are looked up this way is a message of the catalogue."""
    from autograder import report

    known = set(messages.messages_in_code(messages.DOMAINS[0].package))
    assert set(verdicts.CATEGORY_NAMES.values()) <= known
    grader = set(messages.messages_in_code(messages.DOMAINS[1].package))
    assert set(report.SECTIONS.values()) <= grader and trusted.NOT_IMPLEMENTED in grader


def test_the_compiled_catalogue_the_wheel_carries_is_the_po():
    """attention_course/data/attention_course.zh_CN.json (package data) is, byte for byte, what compiling the .po
    gives: a learner without the repository reads what the translators wrote (python -m autograder messages
    compile), and the package's lookup reads that file."""
    catalog = messages.read(messages.DOMAINS[0].catalogue(ZH))
    assert messages.compiled_path(ZH).read_text(encoding="utf-8") == messages.compiled_text(catalog), \
        "run python -m autograder messages compile"
    assert language.catalogue(ZH) == messages.translated(catalog)


def test_the_compile_command_writes_what_the_test_compares(tmp_path, monkeypatch):
    """Compiling is what makes the .mo equal the .po: a changed .po compiles to a table with its change."""
    root = tmp_path / "course"
    po = messages.DOMAINS[0].catalogue(ZH, root)
    po.parent.mkdir(parents=True)
    shutil.copy(messages.DOMAINS[0].catalogue(ZH), po)
    po.write_text(po.read_text(encoding="utf-8").replace('msgstr "答案不对"', 'msgstr "答案错了"'), encoding="utf-8")
    monkeypatch.setattr(language, "LOCALE_DIR", tmp_path / "data")
    monkeypatch.setattr(messages, "compiled_path", lambda lang: language.compiled_catalogue(lang, localedir=tmp_path))
    messages.compile_catalogue(ZH, root)
    assert messages.compiled_table(ZH)["the answer is wrong"] == "答案错了"


# -- what a learner and an instructor read -------------------------------------------------------------------


def test_a_check_fails_in_the_learners_language(monkeypatch):
    import torch

    monkeypatch.setenv(ENVIRONMENT, "zh")
    with pytest.raises(CheckFailed) as failed:
        Checks("test_cell").shape("scores", torch.zeros(3, 2), (2, 3), hint="检查转置。")
    text = str(failed.value)
    assert "scores" in text and "形状" in text and "(3, 2)" in text and "检查转置。" in text, text
    monkeypatch.setenv(ENVIRONMENT, "en")
    with pytest.raises(CheckFailed, match=r"result has shape \(3, 2\) but should have shape \(2, 3\)"):
        Checks("test_cell").shape("scores", torch.zeros(3, 2), (2, 3))


def test_verdicts_name_the_symptom_in_chinese_and_keep_the_hidden_message_quote_free():
    want = np.eye(3)
    with speaking(ZH):
        verdict = verdicts.compare(np.eye(3)[::-1].copy() * 1.0, want, hint="看看 softmax 的轴。")
    assert not verdict.passed
    assert "个数值中有 4 个不对" in verdict.message and verdict.message.endswith("。看看 softmax 的轴。"), verdict.message
    assert "部分数值不对" in verdict.hidden_message and not re.search(r"\d", verdict.hidden_message), verdict.hidden_message


def test_the_self_check_reports_in_chinese():
    finding = Finding("abc", "scores = attention(q, k)", "Exercise 2: the four scores", "differs", "1.0", "2.0")
    with speaking(ZH):
        failed = Result("03_scoring_functions", 5, [finding]).report("mine.ipynb")
        passed = Result("03_scoring_functions", 5).report("mine.ipynb")
    assert "练习 2：the four scores" in failed and "自检未通过" in failed and "参考输出" in failed, failed
    assert passed.startswith("自检通过") and "5" in passed, passed


def _spec(hidden: bool, checks: list[str]) -> dict:
    return {"hidden": hidden, "keep_want_sites": [],
            "checks": [{"key": f"g/{c}", "check": c, "kind": "true", "params": {}, "site": n, "ref_got": None}
                       for n, c in enumerate(checks, start=1)]}


def test_the_graders_decisions_follow_the_chosen_language_not_the_environment(monkeypatch):
    monkeypatch.setenv(ENVIRONMENT, "en")  # what a learner's kernel (or the grader's shell) might claim
    records = [{"cell": "g", "check": c, "kind": "true", "got": {"plain": False}, "params": {}} for c in ("a", "b")]
    with speaking(ZH):
        passed, said = trusted.decide_cell(_spec(True, ["a", "b"]), records, None, "g")
        blank = trusted.decide_cell(_spec(False, ["a"]), [], {"ename": "NotImplementedError"}, "g")[1]
    assert not passed and said == ["隐藏检查 1, 2：条件不成立"], said
    assert trusted.not_implemented(blank) and "尚未实现" in blank[0] and "1 个检查没有运行" in blank[1], blank
    monkeypatch.setenv(ENVIRONMENT, "zh")  # the grader never reads the variable for its own sentences
    assert class_language.tr("not graded: {reason}", reason="x") == "not graded: x"


def test_a_feedback_page_in_chinese(monkeypatch):
    cells = {"test_scores": {"score": 0, "max_score": 2, "passed": False,
                             "messages": ["not graded: file too large (12 MB; the limit is 5 MB)"]},
             "test_masked_softmax_visible": {"score": 1, "max_score": 1, "passed": True, "messages": []}}
    result = GradingResult.of({"chapter": "03_scoring_functions", "student": "s", "status": "graded",
                               "reason": "kernel died (out of memory: limit 2048 MB)", "cells": cells,
                               "flags": ["edited test cell test_scores restored", "a flag of another kind"]})
    with speaking(ZH):
        page = trusted.feedback_html(result)
    assert "<html lang='zh-CN'>" in page and "<title>反馈</title>" in page
    assert "03_scoring_functions：1 / 3 分" in page
    assert "内核退出了（内存不足：上限为 2048 MB）" in page
    assert "未批改：文件太大（12 MB；上限为 5 MB）" in page
    assert "<strong>先改这里：</strong>" in page and "<th>测试</th>" in page and "<td>通过</td>" in page
    assert "<li>被修改的测试单元格 test_scores 已恢复原样</li>" in page and "<li>a flag of another kind</li>" in page


def test_a_late_notebooks_page_in_chinese():
    late = {"seconds": 7500, "penalty": 2, "text": "2 h 05 min", "held": False, "arrived": "2026-12-01 10:05 UTC",
            "claimed": "", "policy": "10% of the score per started hour late, at most 50%"}
    result = GradingResult.of({"chapter": "03_scoring_functions", "student": "s", "status": "graded", "late": late,
                               "cells": {"t": {"score": 3, "max_score": 4, "passed": False, "messages": []}}})
    with speaking(ZH):
        page = trusted.feedback_html(result)
    assert ("<strong>迟交：</strong>在截止时间之后 2 h 05 min 提交；扣 2 分，计入成绩的是 1 / 4 分（规则：按迟交的小时数扣分，"
            "不满一小时按一小时计，每小时扣成绩的 10%，最多扣 50%）。") in page, page
    assert "收到时间：2026-12-01 10:05 UTC。" in page
    english = trusted.feedback_html(result)
    assert "<html lang='en'>" in english and "Fix first:" in english and "先改这里" not in english


def test_a_memory_budgets_notes_in_chinese():
    from autograder import memory_budget

    budget = {"mb": 64.0, "hint": "work tile by tile"}
    with speaking(ZH):
        stopped = memory_budget.merge({}, 3, budget, {"status": "zero", "reason": "kernel died (out of memory: limit "
                                                      "64 MB)", "memory_peak_mb": 70.25})
        refused = memory_budget.note(budget, refused=True)
    assert stopped == ("这个测试超出了 64 MiB 的内存预算，已被终止；其内存 cgroup 统计的任务峰值为 70.2 MiB，含 Python 和 "
                       "PyTorch：work tile by tile"), stopped
    assert refused.startswith("这个测试在 64 MiB 的内存预算下、在单个进程中运行") and refused.endswith("：work tile by tile")
    assert memory_budget.note(budget) == "this test runs under a memory budget of 64 MiB: work tile by tile"


def test_stock_nbgraders_kernels_speak_the_class_language(tmp_path, monkeypatch):
    """``python -m autograder nbgrader autograde ...``: the kernels stock nbgrader starts write the check messages its
    feedback shows, so they get the class's language, whatever the instructor's shell says."""
    import autograder.__main__ as commands

    course = Course().copy_to(tmp_path / "course", with_release=False)
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + '\nc.AttentionCourse.language = "zh"\n')
    seen = {}
    monkeypatch.setattr(commands, "Course", lambda: course)
    monkeypatch.setattr(commands.subprocess, "call", lambda argv, env, cwd: seen.update(env) or 0)
    monkeypatch.setenv(ENVIRONMENT, "en")
    assert commands.main(["nbgrader", "--version"]) == 0
    assert seen[ENVIRONMENT] == ZH


def test_the_class_language_is_the_course_configurations(tmp_path):
    course = Course().copy_to(tmp_path / "course", with_release=False)
    assert class_language.class_language(course) == "en", "unset: English"
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + '\nc.AttentionCourse.language = "zh"\n')
    assert class_language.class_language(course) == ZH
    from autograder import late_policy  # the file the late policy and stock nbgrader read, read the same way

    assert class_language.course_config(course) == late_policy.load_config(course)
    config.write_text(config.read_text() + '\nc.AttentionCourse.language = "tlh"\n')
    assert class_language.class_language(course) == "en", "a language the course does not have: English"
    config.unlink()  # a course copied without its configuration (as several suite fixtures make) grades in English
    assert class_language.class_language(course) == "en", "no configuration file: English"
