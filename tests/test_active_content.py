"""No active content from learners (issue 24, class 1): what a learner's kernel produced, or their notebook holds,
never renders as script for the instructor.

The pure tests run ``autograder.safe_output`` on every kind of rich output and on a whole attacker's notebook, and
render the result with formgrader's own nbconvert template: nothing of the attacker's survives in a script, an
event handler, a ``javascript:`` link or an inline SVG, while the instructor can still read what was tried. The
same rendering of the unsanitised notebook shows the attack live, so the check can fail. The sandbox test grades
the attacker's notebook through the engine and writes it as ``grade`` does. tests/test_formgrader.py opens such a
notebook in formgrader in headless Chromium.
"""
from __future__ import annotations

import base64
import copy
import json
import re
import struct
import zlib

import nbformat
import pytest
from bs4 import BeautifulSoup

from attention_course.cells import RECORD_MIME
from autograder import safe_output
from autograder.results import GradingResult

CHAPTER = "03_scoring_functions"
MARK = "PWNMARK"  # in every payload: nothing executable that the page holds may contain it

# What an attacker's script does in formgrader (tests/test_formgrader.py): records that it ran, writes a file
# into the course through Jupyter's contents API, and gives every cell of the submission full manual credit.
PAYLOAD_JS = """(function (tag) {
  window.__pwned = (window.__pwned || []).concat([tag]);
  var m = document.cookie.match(/(?:^|; )_xsrf=([^;]*)/);
  fetch("/api/contents/pwned-" + tag + ".txt", {method: "PUT", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-XSRFToken": m ? decodeURIComponent(m[1]) : ""},
    body: JSON.stringify({type: "file", format: "text", content: "PWNMARK written by a learner's script"})});
  (function full() {
    if (!(window.formgrader && formgrader.grades && formgrader.grades.loaded)) { return setTimeout(full, 100); }
    formgrader.grades.each(function (g) { g.save({manual_score: g.get("max_score")}); });
  })();
})("TAG");"""


def payload(tag: str) -> str:
    return PAYLOAD_JS.replace("TAG", tag)


def payload_b64(tag: str) -> str:
    """The payload as an expression without spaces or quotes of its own (fits an unquoted attribute)."""
    return "eval(atob('" + base64.b64encode(payload(tag).encode()).decode() + "'))"


def tiny_png() -> bytes:
    """A valid 1x1 grey PNG."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b""))


PNG_B64 = base64.b64encode(tiny_png()).decode()

# The code cell an attacker adds: every way a kernel can hand a front-end something active.
ATTACK_CODE = f'''
from IPython.display import HTML, Javascript, display
_P = {json.dumps({t: payload(t) for t in ("javascript", "html_script", "svg_script")})}
_E = {json.dumps({t: payload_b64(t) for t in ("html_img", "svg_onload", "markdown_output", "png_width",
                                              "latex_output", "widget")})}
display(Javascript(_P["javascript"]))
display(HTML('<img src=x onerror="' + _E["html_img"] + '">'))
display(HTML("<script>" + _P["html_script"] + "</script>"))
display({{"image/svg+xml": '<svg xmlns="http://www.w3.org/2000/svg" onload="' + _E["svg_onload"] + '">'
                          "<script>" + _P["svg_script"] + "</script></svg>", "text/plain": "an SVG"}}, raw=True)
display({{"text/markdown": '<img src=x onerror="' + _E["markdown_output"] + '">', "text/plain": "md"}}, raw=True)
display({{"text/latex": "$\\\\href{{javascript:{MARK}}}{{x}}$", "text/plain": "tex"}}, raw=True)
display({{"application/vnd.jupyter.widget-view+json": {{"model_id": "{MARK}", "version_major": 2}},
         "text/plain": "a widget"}}, raw=True)
display({{"image/png": "{PNG_B64}", "text/plain": "a plot"}},
        metadata={{"image/png": {{"width": "1 onload=" + _E["png_width"]}}}}, raw=True)
print("\\x1b[31mred\\x1b[0m and a bell\\x07 {MARK}-stdout")
'''
ATTACK_MARKDOWN = (f"My notes <script>{payload('markdown_script')}</script>\n\n"
                   f'<img src=x onerror="{payload_b64("markdown_img")}"> [click](javascript:{MARK})')
ATTACK_RAW = f'<img src=x onerror="{payload_b64("raw_cell")}">'


def attacker_cells() -> list:
    """The cells an attacker appends to an otherwise ordinary submission."""
    raw = nbformat.v4.new_raw_cell(ATTACK_RAW, metadata={"raw_mimetype": "text/html", "format": "text/html"})
    return [nbformat.v4.new_code_cell(ATTACK_CODE), nbformat.v4.new_markdown_cell(ATTACK_MARKDOWN), raw]


def active_parts(page: str) -> list[str]:
    """Everything in an HTML page a browser would run: script bodies, event-handler attributes, ``javascript:``
    URLs, inline SVG and embedded documents."""
    soup = BeautifulSoup(page, "html.parser")
    found = [s.get_text() for s in soup.find_all("script")]
    for tag in soup.find_all(True):
        for name, value in tag.attrs.items():
            value = " ".join(value) if isinstance(value, list) else str(value)
            if name.lower().startswith("on") or value.strip().lower().startswith("javascript:"):
                found.append(f"{tag.name} {name}={value}")
        if tag.name in ("svg", "iframe", "object", "embed"):
            found.append(str(tag))
    return found


def formgrader_html(nb: dict) -> str:
    """``nb`` as formgrader renders a submission (its template and exporter; no sanitising of nbconvert's own)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    exporter = HTMLExporter(template_name="formgrade", extra_template_basedirs=[handlers.template_path])
    resources = {"assignment_id": CHAPTER, "notebook_id": CHAPTER, "submission_id": "s", "index": 0, "total": 1,
                 "base_url": "", "student": "eve", "last_name": None, "first_name": None, "notebook_path": "x"}
    page, _ = exporter.from_notebook_node(nbformat.from_dict(nb), resources=resources)
    return page


def _attacked_notebook() -> dict:
    """An executed notebook as an unsanitised grader would have written it: the attacker's cells with the outputs
    the kernel gives them, widget state and a trust signature in the metadata."""
    outs = [
        {"output_type": "display_data", "metadata": {},
         "data": {"application/javascript": payload("javascript"), "text/plain": "<Javascript object>"}},
        {"output_type": "display_data", "metadata": {},
         "data": {"text/html": f'<img src=x onerror="{payload_b64("html_img")}">', "text/plain": "<HTML object>"}},
        {"output_type": "execute_result", "metadata": {}, "execution_count": 3,
         "data": {"image/svg+xml": f'<svg onload="{payload_b64("svg_onload")}"></svg>', "text/plain": "svg"}},
        {"output_type": "display_data", "metadata": {"image/png": {"width": "1 onload=" + payload_b64("png_width")}},
         "data": {"image/png": PNG_B64, "text/plain": "a plot"}},
    ]
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# The chapter's own title"},
             {"cell_type": "code", "metadata": {"widgets": {MARK: 1}}, "source": "1", "execution_count": 3,
              "outputs": outs},
             {"cell_type": "markdown", "metadata": {}, "source": ATTACK_MARKDOWN},
             {"cell_type": "raw", "metadata": {"raw_mimetype": "text/html"}, "source": ATTACK_RAW}]
    for n, cell in enumerate(cells):
        cell["id"] = f"cell-{n}"
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                         "signature": "sha256:" + MARK,
                         "widgets": {"application/vnd.jupyter.widget-state+json": {"state": MARK}}}}


# -- outputs ------------------------------------------------------------------------------------------------------

ACTIVE_MIMES = ["text/html", "application/javascript", "text/javascript", "image/svg+xml", "text/markdown",
                "text/latex", "application/vnd.jupyter.widget-view+json", "application/json",
                "application/x-made-up", "application/pdf"]


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["display_data", "execute_result", "update_display_data"])
@pytest.mark.parametrize("mime", ACTIVE_MIMES)
def test_every_active_kind_of_output_becomes_text(kind, mime):
    content = {"x": f"<script>{MARK}</script>"} if mime.endswith("json") else f"<script>{MARK}</script>"
    out = safe_output.safe_output({"output_type": kind, "execution_count": 1, "metadata": {mime: {"isolated": True}},
                                   "data": {mime: content, "text/plain": "<an object>"}})
    assert set(out["data"]) == {"text/plain"} and out["metadata"] == {}
    assert out["output_type"] == ("execute_result" if kind == "execute_result" else "display_data")
    text = out["data"]["text/plain"]
    assert text.startswith("<an object>\n") and f"[removed by the grader: {mime} output, shown as text]" in text
    assert MARK in text  # the instructor still sees what was tried, as text
    nbformat.validate(nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "c", "metadata": {}, "source": "", "execution_count": 1, "outputs": [out]}]}))


@pytest.mark.unit
def test_a_removed_output_is_shown_within_a_cap():
    out = safe_output.safe_output({"output_type": "display_data", "data": {"text/html": "x" * 100_000}})
    text = out["data"]["text/plain"]
    assert len(text) < safe_output.MAX_REMOVED_CHARS + 200 and text.endswith("[96000 more characters]")


@pytest.mark.unit
@pytest.mark.parametrize("mime, value, kept, why", [
    ("image/png", PNG_B64, True, ""),
    ("image/png", PNG_B64[:20] + "\n" + PNG_B64[20:], True, ""),  # nbformat may wrap base64
    ("image/jpeg", base64.b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 40).decode(), True, ""),
    ("image/png", base64.b64encode(b"<svg onload=x>" + b"\0" * 20).decode(), False, "not a PNG image"),
    ("image/jpeg", PNG_B64, False, "not a JPEG image"),
    ("image/png", PNG_B64[:-4] + "!!!!", False, "not valid base64"),
    ("image/png", "<img src=x onerror=alert(1)>", False, "not valid base64"),
    ("image/png", {"not": "text"}, False, "not base64 text"),
    ("image/png", base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * (safe_output.MAX_IMAGE_BYTES + 10)).decode(),
     False, "larger than"),
])
def test_raster_images_are_validated(mime, value, kept, why):
    out = safe_output.safe_output({"output_type": "display_data", "data": {mime: value, "text/plain": "fig"}})
    if kept:
        assert base64.b64decode(out["data"][mime]) == base64.b64decode("".join(value.split()))
        assert out["data"]["text/plain"] == "fig"
    else:
        assert mime not in out["data"]
        assert f"[removed by the grader: {mime} output ({why}" in out["data"]["text/plain"]


@pytest.mark.unit
def test_an_image_keeps_only_a_numeric_size():
    meta = {"image/png": {"width": 40, "height": "1 onload=alert(1)", "filenames": {"image/png": "x.png"},
                          "unconfined": True}, "text/html": {"isolated": True}}
    out = safe_output.safe_output({"output_type": "display_data", "metadata": meta, "data": {"image/png": PNG_B64}})
    assert out["metadata"] == {"image/png": {"width": 40}}


@pytest.mark.unit
def test_text_loses_terminal_escapes_and_control_characters():
    out = safe_output.safe_output({"output_type": "stream", "name": "stdout",
                                   "text": "\x1b[31mred\x1b[0m\r\nbell\x07 \x1b]8;;http://x\x07link\x1b]8;;\x07 "
                                           "\u202eevil\u202c\tok\n"})
    assert out["text"] == "red\nbell link evil\tok\n"
    err = safe_output.safe_output({"output_type": "error", "ename": "Value\x00Error", "evalue": "\x1b[1mx\x1b[0m",
                                   "traceback": ["\x1b[0;31m---> 1\x1b[0m raise", 7]})
    assert err == {"output_type": "error", "ename": "ValueError", "evalue": "x", "traceback": ["---> 1 raise", "7"]}


@pytest.mark.unit
def test_check_records_are_kept_and_forged_ones_become_text():
    record = {"check": "c1", "kind": "close", "got": [1.0], "site": 3}
    out = safe_output.safe_output({"output_type": "display_data",
                                   "data": {RECORD_MIME: record, "text/plain": "check c1 passed"}})
    assert out["data"] == {RECORD_MIME: record, "text/plain": "check c1 passed"}
    forged = safe_output.safe_output({"output_type": "display_data", "data": {RECORD_MIME: "<script>"}})
    assert RECORD_MIME not in forged["data"] and "removed by the grader" in forged["data"]["text/plain"]


# -- notebooks ----------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_learner_metadata_that_front_ends_act_on_is_dropped():
    nb = _attacked_notebook()
    nb["cells"][1]["metadata"].update(
        nbgrader={"grade_id": 'x" onfocus="alert(1)', "grade": True, "points": 1},
        tags=["ok", "<b>"], editable=False, jupyter={"source_hidden": True, "widgets": MARK})
    nb["cells"][0]["attachments"] = {"a.png": {"image/png": PNG_B64}, "b.svg": {"image/svg+xml": "<svg/>"}}
    safe = safe_output.safe_notebook(nb, safe_output.chapter_texts())
    assert set(safe["metadata"]) == {"kernelspec"}  # no widget state, no trust signature
    meta = safe["cells"][1]["metadata"]
    assert meta == {"tags": ["ok", "<b>"], "editable": False, "jupyter": {"source_hidden": True}}
    assert MARK not in json.dumps([c["metadata"] for c in safe["cells"]])
    nbformat.validate(nbformat.from_dict(safe))
    kept = safe_output.safe_notebook(nb, frozenset({"# The chapter's own title"}))
    assert kept["cells"][0]["attachments"] == {"a.png": {"image/png": PNG_B64}}
    assert safe_output.safe_notebook({"cells": [{"cell_type": "code", "source": "", "metadata": {
        "nbgrader": {"grade_id": "test_ok", "points": 2, "nested": {"x": 1}}}}]})["cells"][0]["metadata"] == {
        "nbgrader": {"grade_id": "test_ok", "points": 2}}


@pytest.mark.unit
def test_learner_markdown_and_raw_cells_are_shown_as_text_the_chapters_own_as_written():
    nb = _attacked_notebook()
    safe = safe_output.safe_notebook(nb, frozenset({"# The chapter's own title"}))
    assert safe["cells"][0]["source"] == "# The chapter's own title"
    for cell, written in ((safe["cells"][2], ATTACK_MARKDOWN), (safe["cells"][3], ATTACK_RAW)):
        assert cell["cell_type"] == "markdown" and cell["metadata"] == {}
        assert cell["source"].startswith(safe_output.LEARNER_TEXT_NOTE)
        assert written in cell["source"]  # every character, inside a code fence
    tricky = "```\n<script>x</script>\n````"  # a learner's own fences cannot close the grader's
    fenced = safe_output.safe_notebook({"cells": [{"cell_type": "markdown", "source": tricky}]})["cells"][0]
    assert re.search(r"^`{5}text$", fenced["source"], re.M)


@pytest.mark.unit
def test_formgraders_rendering_of_an_attacked_notebook_runs_nothing_of_the_learners():
    attacked = _attacked_notebook()
    live = [p for p in active_parts(formgrader_html(copy.deepcopy(attacked))) if MARK in p or "atob(" in p]
    assert len(live) >= 5, live  # unsanitised, formgrader's template would run the attack (the test can fail)
    page = formgrader_html(safe_output.safe_notebook(attacked, frozenset({"# The chapter's own title"})))
    assert [p for p in active_parts(page) if MARK in p or "atob(" in p] == []
    text = BeautifulSoup(page, "html.parser").get_text()
    assert "[removed by the grader: application/javascript output, shown as text]" in text
    assert "<script>" in text and "The chapter's own title" in text  # the learner's markdown, readable as text


@pytest.mark.unit
def test_the_pages_the_grader_writes_forbid_scripts():
    from autograder import trusted

    page = trusted.feedback_html(GradingResult.of({"chapter": CHAPTER, "score": 1, "max_score": 2, "flags": ["<script>x</script>"],
                                  "cells": {}}))
    head = BeautifulSoup(page, "html.parser").head
    csp = head.find("meta", attrs={"http-equiv": "Content-Security-Policy"})["content"]
    assert csp == safe_output.CSP and "script-src" not in csp and "default-src 'none'" in csp
    assert active_parts(page) == []
    from autograder import report
    from autograder.course import Course

    head = BeautifulSoup(report.render(Course(), []), "html.parser").head  # the class report's head
    assert head.find("meta", attrs={"http-equiv": "Content-Security-Policy"})["content"] == safe_output.CSP


# -- through the engine -------------------------------------------------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.timeout(600)
def test_an_attackers_notebook_graded_by_the_engine_is_written_inert(tmp_path_factory):
    from autograder import outputs as grading_outputs
    from autograder import submissions

    from .conftest import course_with_engine

    with course_with_engine(tmp_path_factory) as (course, engine):
        nb = submissions.reference(course, CHAPTER)
        nb.cells.extend(attacker_cells())
        path = submissions.write_submission(course, "eve", CHAPTER, nb)
        result = engine.grade(CHAPTER, path, "eve")
    assert result["status"] == "graded" and result["score"] == result["max_score"] > 0, result["reason"]
    outputs = [o for c in result["executed_notebook"]["cells"] for o in c.get("outputs", [])]
    mimes = {m for o in outputs for m in o.get("data", {})}
    assert mimes <= {"text/plain", "image/png", RECORD_MIME}, mimes
    text = json.dumps(outputs)
    for mime in ("application/javascript", "text/html", "image/svg+xml", "text/markdown", "text/latex",
                 "application/vnd.jupyter.widget-view+json"):
        assert f"[removed by the grader: {mime} output, shown as text]" in text, mime
    assert all(o.get("metadata") in ({}, None) for o in outputs if "image/png" not in o.get("data", {}))
    assert "red and a bell PWNMARK-stdout" in text and "\\u001b" not in text

    result = result.replace(feedback_html="<p>feedback</p>")
    grading_outputs.write_outputs(course, result)  # where `grade` writes the autograded notebook
    written = json.loads((course.grading / "autograded" / "eve" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    learner = [c for c in written["cells"] if c["cell_type"] != "code" and "atob(" in "".join(c["source"])]
    assert len(learner) == 2 and all(c["source"].startswith(safe_output.LEARNER_TEXT_NOTE) for c in learner)
    assert [p for p in active_parts(formgrader_html(written)) if MARK in p or "atob(" in p] == []
