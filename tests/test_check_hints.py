"""The checks' hints in the learner's language (issue 45): extraction into ``<chapter>.checks.po``, the learner
package's visible-only share of them, and the lookup on both sides.

The catalogues' completeness, their keys against re-extraction and their placeholders are tests/test_translations.py's
(they parametrize over ``translations.domains``, which lists the ``.checks`` catalogues). The Chinese feedback page
with a translated visible and hidden hint is tests/test_class_language.py's (its Chinese class).
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import nbformat
import pytest
import torch

from attention_course import language
from attention_course.checks import CheckFailed, Checks
from attention_course.language import ENVIRONMENT, hint, hints_from, speaking
from attention_course.selfcheck import Finding, Result
from autograder import check_hints, class_language, kit, translations
from autograder.course import Course

COURSE = Course()
CHAPTERS = COURSE.chapters()
ZH = "zh_CN"


def hints_of(chapter: str) -> list[check_hints.Hint]:
    return translations.hint_entries(COURSE, chapter)


def hidden_only() -> dict[str, str]:
    """``{English: translation or ""}`` of every hint no release shows (a hidden hint visible in another chapter is
    the learner's anyway)."""
    shown = set().union(*(translations.visible_hints(COURSE, ch) for ch in CHAPTERS))
    table = class_language.translations.__wrapped__  # fresh: a translator may have just saved the file
    out = {}
    for ch in CHAPTERS:
        translated = table(ZH, translations.checks_domain(ch))
        for h in hints_of(ch):
            if h.visibility == check_hints.HIDDEN and h.msgid not in shown:
                out[h.msgid] = translated.get(h.msgid, "")
    return out


@pytest.mark.unit
def test_extraction_separates_visible_and_hidden_and_follows_expressions():
    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'check = Checks("test_x")\n'
        'check.close("a", f(1), 2.0, hint="the visible one")\n'
        '### BEGIN HIDDEN TESTS\n'
        'check.true("b", ok, hint="first" if flag else "second", describe=f"size {n!r} of the {name}")\n'
        'check.true("c", ok, hint=f"{name}: " + ("pre" if flag else "post"))\n'
        'check.true("d", ok, hint=choose(flag))\n'
        '### END HIDDEN TESTS\n',
        metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "test_x", "points": 1}})])
    release = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'check = Checks("test_x")\ncheck.close("a", f(1), 2.0, hint="the visible one")\n',
        metadata=source.cells[0].metadata)])
    found = [(h.msgid, h.visibility, h.keyword) for h in check_hints.chapter_hints(release, source)]
    assert found == [("the visible one", "visible", "hint"), ("first", "hidden", "hint"),
                     ("second", "hidden", "hint"), ("size {n!r} of the {name}", "hidden", "describe"),
                     ("{name}: pre", "hidden", "hint"), ("{name}: post", "hidden", "hint")], found
    assert check_hints.unresolved(release, source) == ["cell 0 (test test_x) hint=choose(flag)"]


@pytest.mark.unit
def test_every_hint_argument_of_the_course_becomes_a_key():
    """No ``hint=``/``describe=`` of any chapter's test cells stays English for want of a key."""
    left = {ch: check_hints.unresolved(check_hints.read(COURSE.release_notebook(ch)),
                                       check_hints.read(COURSE.source_notebook(ch))) for ch in CHAPTERS}
    assert not any(left.values()), left


@pytest.mark.unit
def test_each_entry_says_whether_it_is_visible_or_hidden():
    for ch in CHAPTERS:
        catalog = translations.read_catalogue(translations.catalogue_path(COURSE, translations.checks_domain(ch)))
        shown = translations.visible_hints(COURSE, ch)
        for m in catalog:
            if m.id:
                kind = "visible" if m.id in shown else "hidden"
                assert m.auto_comments and all(c.startswith(kind + ":") for c in m.auto_comments), (ch, m.id)


@pytest.mark.unit
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_packaged_hints_are_the_catalogues_visible_translations(chapter):
    """attention_course/data/<chapter>.checks.zh_CN.json is what ``translations update`` compiles from the .po."""
    path = translations.compiled_hints_path(COURSE, chapter, ZH)
    assert path.is_file() and path.read_text(encoding="utf-8") == translations.compiled_hints_text(
        COURSE, chapter, ZH), f"{path.name} is stale: python -m autograder translations update"


@pytest.mark.unit
def test_compiling_leaves_every_hidden_hint_out(monkeypatch):
    """With every entry translated, the compiled table holds exactly the visible ones."""
    chapter = "08_transformer"
    real = translations.read_catalogue

    def all_translated(path):
        catalog = real(path)
        for m in catalog:
            if m.id:
                m.string, m.flags = "译：" + m.id, set()
        return catalog

    monkeypatch.setattr(translations, "read_catalogue", all_translated)
    table = json.loads(translations.compiled_hints_text(COURSE, chapter, ZH))
    hidden = {h.msgid for h in hints_of(chapter) if h.visibility == check_hints.HIDDEN}
    assert hidden and set(table) == translations.visible_hints(COURSE, chapter)
    assert not hidden & set(table) and not {"译：" + h for h in hidden} & set(table.values())


@pytest.mark.unit
def test_no_hidden_hint_reaches_the_wheel_the_kit_or_a_release(tmp_path):
    """Neither the English nor the translation of a hint only hidden tests give is in the Chinese kit (its wheel
    unpacked, its notebooks, its README) or in any English or Chinese release. A hidden hint whose English the
    learner has anyway (a prefix of a visible hint, a sentence of the chapter or of the check library's own
    messages: 10 of 305 on 27 November) is no secret and is left out of the search; so is a translation that is
    part of a visible hint's (8 of 305: "True 表示可以关注", the start of four visible hints')."""
    public = "\n".join([*(COURSE.release_notebook(ch).read_text(encoding="utf-8") for ch in CHAPTERS),
                         *(p.read_text(encoding="utf-8") for p in sorted(language.PACKAGE.glob("*.py")))])
    visible = {ch: translations.visible_hints(COURSE, ch) for ch in CHAPTERS}
    shown = "\n".join(translated for ch in CHAPTERS
                       for english, translated in class_language.translations.__wrapped__(
                           ZH, translations.checks_domain(ch)).items() if english in visible[ch])
    secrets = {english: (chinese if chinese not in shown else "") for english, chinese in hidden_only().items()
               if not any(form in public for form in written(english))}
    assert len(secrets) > 250, len(secrets)
    out = kit.build_kit(COURSE, tmp_path / "kit", torch_index=None, lang=ZH)
    texts = {}
    for path in out.rglob("*"):
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as archive:
                texts.update({f"{path.name}:{n}": archive.read(n).decode("utf-8", "replace")
                              for n in archive.namelist()})
        elif path.is_file():
            texts[str(path.relative_to(out))] = path.read_text(encoding="utf-8", errors="replace")
    assert any(name.endswith(".checks.zh_CN.json") for name in texts), "the wheel carries no hint catalogue"
    for chapter in CHAPTERS:
        for path in (COURSE.release_notebook(chapter), COURSE.translated_release_notebook(chapter, ZH)):
            if path.is_file():
                texts[str(path.relative_to(COURSE.root))] = path.read_text(encoding="utf-8")
    leaks = [(name, text[:60]) for english, chinese in secrets.items() for text in (english, chinese) if text
             for name, content in texts.items() if any(form in content for form in written(text))]
    assert not leaks, leaks[:10]


@pytest.mark.unit
def test_the_lookup_carries_an_f_strings_values_into_the_translation():
    table = {"method {method!r}: the frequencies as its paper defines them":
             "方法 {method!r}：按论文的定义计算频率",
             "{name}: x = norm1(x + attn(x))": "{name}：先相加再归一化，x = norm1(x + attn(x))"}
    with speaking(ZH), hints_from(lambda lang: table):
        assert hint("method 'yarn': the frequencies as its paper defines them") == (
            "方法 'yarn'：按论文的定义计算频率")
        assert hint("layer 2: x = norm1(x + attn(x))") == (
            "layer 2：先相加再归一化，x = norm1(x + attn(x))")
        assert hint("something else") == "something else"
    assert hint("layer 2: x = norm1(x + attn(x))", language="en") == "layer 2: x = norm1(x + attn(x))"


def written(text: str) -> set[str]:
    """``text`` as a file may hold it: as it is, and inside a JSON string (a notebook, a compiled catalogue)."""
    return {text, json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]}


def first_translated(visibility: str) -> tuple[str, str, str]:
    """(chapter, English, Chinese) of the first translated hint of ``visibility`` in the course's catalogues."""
    for ch in CHAPTERS:
        table = class_language.translations.__wrapped__(ZH, translations.checks_domain(ch))
        for h in hints_of(ch):
            if h.visibility == visibility and table.get(h.msgid) and "{" not in h.msgid:
                return ch, h.msgid, table[h.msgid]
    pytest.fail(f"no {visibility} hint is translated yet: locales/zh_CN/LC_MESSAGES/*.checks.po")


@pytest.mark.unit
def test_a_learners_failed_check_shows_the_visible_hint_in_chinese(monkeypatch):
    """What the self-check reports of a failed test cell is the kernel's CheckFailed (nbval records it): in a
    Chinese learner's kernel, its hint is the packaged Chinese one."""
    chapter, english, chinese = first_translated(check_hints.VISIBLE)
    monkeypatch.setenv(ENVIRONMENT, "zh")
    with pytest.raises(CheckFailed) as failed:
        Checks("test_cell").close("scores", torch.zeros(2), torch.ones(2), hint=english)
    assert chinese in str(failed.value) and english not in str(failed.value), str(failed.value)
    finding = Finding("test_cell", 'check = Checks("test_cell")', None, "error", error=str(failed.value))
    report = Result(chapter, 5, [finding]).report("mine.ipynb")
    assert "自检未通过" in report and chinese in report and english not in report, report
    monkeypatch.setenv(ENVIRONMENT, "en")
    with pytest.raises(CheckFailed) as failed:
        Checks("test_cell").close("scores", torch.zeros(2), torch.ones(2), hint=english)
    assert english in str(failed.value)


@pytest.mark.unit
def test_a_learners_kernel_never_finds_a_hidden_hints_translation(monkeypatch):
    """Hidden hints are translated on the grader's side only: the package's own lookup does not know them."""
    found = [(e, c) for e, c in hidden_only().items() if c and "{" not in e]
    assert found, "no hidden hint is translated yet: locales/zh_CN/LC_MESSAGES/*.checks.po"
    english, chinese = found[0]
    assert english not in language.packaged_hints.__wrapped__(ZH)
    monkeypatch.setenv(ENVIRONMENT, "zh")
    assert hint(english) == english
    with speaking(ZH), hints_from(class_language.hint_translations.__wrapped__):
        assert hint(english) == chinese


@pytest.mark.unit
def test_stock_nbgraders_kernels_get_the_hidden_hints_in_the_class_language(tmp_path, monkeypatch):
    """``python -m autograder nbgrader autograde``: stock nbgrader's kernels decide the checks (on the instructor's
    machine), so the grader hands them its full hint table; a learner's kernel has only the packaged one."""
    import autograder.__main__ as commands

    found = [(e, c) for e, c in hidden_only().items() if c and "{" not in e]
    assert found, "no hidden hint is translated yet: locales/zh_CN/LC_MESSAGES/*.checks.po"
    english, chinese = found[0]
    course = Course().copy_to(tmp_path / "course", with_release=False)
    config = course.root / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + '\nc.AttentionCourse.language = "zh"\n')
    handed = tmp_path / "handed.json"
    seen = {}

    def call(argv, env, cwd):
        seen.update(env)
        handed.write_bytes(Path(env[language.GRADER_HINTS]).read_bytes())  # gone when the command returns
        return 0

    monkeypatch.setattr(commands, "Course", lambda: course)
    monkeypatch.setattr(commands.subprocess, "call", call)
    assert commands.main(["nbgrader", "--version"]) == 0
    monkeypatch.setenv(ENVIRONMENT, seen[ENVIRONMENT])
    assert hint(english) == english  # the packaged table: no hidden hint
    monkeypatch.setenv(language.GRADER_HINTS, str(handed))
    assert hint(english) == chinese
