"""One learner never stops or corrupts the class, and a submission is regular files (issue 24, classes 2 and 3).

The sandbox test grades ONE class of chapter 1 in which every malformed input a learner controls appears beside
normal learners: timestamps that are not UTF-8, not a date or huge; student ids with mathtext, a spreadsheet
formula, a newline, bytes that are not UTF-8 and 200 characters; a missing secret; the course's solution
notebook reached through a symlink, copied by a collect that followed one, and hard-linked; a FIFO; a notebook
that is not JSON. ``grade`` must exit 0 with the normal learners graded as usual, every odd one flagged or
zeroed with its reason (the copy is graded as usual; its hidden tests are a suspicion for the instructor only),
the class report and every export written, and ``release_feedback`` must hand back
everyone else's feedback. The unit tests pin the pure pieces (ids, timestamps, CSV cells, hidden-test lines).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import nbformat
import pytest

from autograder import export, kit, learner_files, submissions
from autograder.course import Course
from autograder.results import GradingResult
from autograder.trusted import feedback_html
from autograder.learner_files import student_id

from .batch_support import child_env
from .conftest import copy_reference_cache, course_with_engine

CHAPTER = "01_cognitive_attention"
SECRET = "ab" * 64
STAMP = "2026-11-20 10:00:00.000000 UTC"


# -- the pure pieces ---------------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("cell, written", [
    ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"), ("+SUM(A1)", "'+SUM(A1)"), ("-2+3+cmd|' /C calc'!A0",
                                                                             "'-2+3+cmd|' /C calc'!A0"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\t=1", "'\t=1"), ("\r=1", "'\r=1"), ("ada", "ada"), ("a=b", "a=b"),
    ("-1.5", "-1.5"), ("+3", "+3"), ("1e-3", "1e-3"), (27.0, 27.0), (None, None), ("", "")])
def test_csv_cells_never_start_a_formula(cell, written):
    assert export.safe_cell(cell) == written


@pytest.mark.unit
def test_every_csv_row_goes_through_safe_cell():
    import io

    buf = io.StringIO()
    export.safe_writer(buf, lineterminator="\n").writerow(["=1+1", "-x", "ok", 3])
    assert next(csv.reader(io.StringIO(buf.getvalue()))) == ["'=1+1", "'-x", "ok", "3"]


@pytest.mark.unit
@pytest.mark.parametrize("name, recorded", [
    (b"ada", "ada"), (b"$\\alpha$", "$\\alpha$"), (b"-rf", "-rf"), (b"=cmd|' -C calc'!A0", "=cmd|' -C calc'!A0"),
    (b"new\nline", "new\\x0aline"), (b"esc\x1b[31m", "esc\\x1b[31m"), (b"caf\xe9", "caf\\xe9"),
    ("café".encode(), "café"), (b"back\\slash", "back\\slash"), ("rtl\u202eevil".encode(), "rtl\\u202eevil")])
def test_a_folder_name_becomes_a_printable_id(name, recorded):
    got, flags = student_id(name)
    assert got == recorded
    assert bool(flags) == (got != name.decode("utf-8", "replace"))
    assert got not in (".", "..") and "/" not in got and "\0" not in got, "the id names a folder under grading/"


@pytest.mark.unit
def test_ids_are_distinct_and_bounded(tmp_path):
    from autograder.discovery import discover

    names = [b"a\nb", b"a\\x0ab", b"a\\\\x0ab", b"L" * 255, b"L" * 254 + b"M", b"\xff", b"\\xff"]
    for name in names:
        os.makedirs(os.path.join(os.fsencode(tmp_path), name, CHAPTER.encode()))
    ids = [t.student for t in discover(tmp_path, [CHAPTER])]
    assert len(ids) == len(names) and len(set(ids)) == len(ids), ids
    assert sorted(ids) == sorted(learner_files.unique_ids(names)[n][0] for n in names)
    assert all(len(i) <= learner_files.MAX_ID_CHARS for i in ids)
    assert student_id(b"L" * 255) == student_id(b"L" * 255), "the same folder gets the same id on every run"


@pytest.mark.unit
@pytest.mark.parametrize("text, expected", [
    (STAMP, "2026-11-20 10:00:00"), ("2026-11-20T10:00:00+01:00", "2026-11-20 09:00:00"),
    ("2026-11-20T10:00:00Z", "2026-11-20 10:00:00"), ("2026-11-20 10:00:00 -0230", "2026-11-20 12:30:00"),
    # a zone name is learner text, never looked up (issue 41: Pacific/Kiritimati read as the day before)
    ("2026-11-20 10:00:00 Pacific/Kiritimati", None), ("2026-11-20 11:00:00 Europe/Paris", None),
    ("2026-11-20 10:00:00", None), ("2026-11-20T10:00:00+24:00", None), ("not a date at all", None),
    ("2026-11-20 10:00:00 ../../../../etc/passwd", None), ("9" * 300, None), ("", None), (None, None)])
def test_timestamps_parse_or_are_none(text, expected):
    when = learner_files.parse_timestamp(text)
    assert (when.isoformat(" ") if when else None) == expected


@pytest.mark.unit
def test_learner_files_are_read_without_following_or_blocking(tmp_path):
    (tmp_path / "ok").write_bytes(b"x" * 10)
    assert learner_files.read_bounded(tmp_path / "ok", 10) == b"x" * 10
    with pytest.raises(learner_files.NotReadable, match="too large"):
        learner_files.read_bounded(tmp_path / "ok", 9)
    os.symlink(tmp_path / "ok", tmp_path / "link")
    with pytest.raises(learner_files.NotReadable, match="symbolic link"):
        learner_files.read_bounded(tmp_path / "link", 100)
    os.mkfifo(tmp_path / "fifo")  # opening it for reading would block forever without O_NONBLOCK
    with pytest.raises(learner_files.NotReadable, match="FIFO"):
        learner_files.read_bounded(tmp_path / "fifo", 100)
    with pytest.raises(learner_files.NotReadable, match="missing"):
        learner_files.read_bounded(tmp_path / "absent", 100)


@pytest.mark.unit
def test_exchange_files_become_flags(tmp_path):
    folder = tmp_path / "sub"
    folder.mkdir()
    nb = folder / f"{CHAPTER}.ipynb"
    nb.write_text("{}")
    assert learner_files.inspect_folder(folder, nb, set()).flags == [], "a folder placed by hand: nothing to say"
    (folder / "timestamp.txt").write_bytes(b"\xff\xfe\x00")
    found = learner_files.inspect_folder(folder, nb, set())
    assert found.timestamp is None and found.refusal is None
    assert any("timestamp.txt is not UTF-8" in f for f in found.flags)
    assert any("submission_secret.txt is missing" in f for f in found.flags)
    (folder / "timestamp.txt").write_text(STAMP)
    (folder / "submission_secret.txt").write_text(SECRET)
    found = learner_files.inspect_folder(folder, nb, set())
    assert found.flags == [] and found.timestamp == STAMP
    assert found.exchange["submission_secret.txt"] == SECRET.encode()
    stand_in = learner_files.feedback_exchange_files({})
    assert stand_in["timestamp.txt"] == b"unknown" and len(stand_in["submission_secret.txt"]) == 128


def _regions(nb) -> list[tuple[str, list[str]]]:
    """(grade_id, the region's non-blank lines as written) of every hidden-test region of a source notebook."""
    out = []
    for cell in nb.cells:
        inside = False
        for line in cell.source.split("\n"):
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
                out.append((cell.metadata["nbgrader"]["grade_id"], []))
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                out[-1][1].append(line)
    return out


def _sources(nb) -> list[str]:
    return [c.source for c in nb.cells]


@pytest.fixture(scope="module")
def chapter_runs() -> dict:
    course = Course()
    return {ch: learner_files.hidden_runs(nbformat.read(course.source_notebook(ch), as_version=4),
                                          learner_files.public_texts(*kit.published(course)))
            for ch in course.chapters()}


@pytest.mark.unit
def test_a_copy_of_any_hidden_region_is_seen_and_no_public_notebook_is(chapter_runs):
    """Every chapter: the course's own notebook holds a hidden run, and so does a cell holding any one hidden region
    alone (each region has RUN_LINES consecutive lines that no public file holds), however it is indented; the
    release, the reference answers and the blank notebook hold none."""
    course = Course()
    for chapter, runs in chapter_runs.items():
        source = nbformat.read(course.source_notebook(chapter), as_version=4)
        assert learner_files.copied_hidden_run(_sources(source), runs), chapter
        for gid, lines in _regions(source):
            pasted = "x = 1\n" + "\n\n".join("        " + line for line in lines)  # blank lines and indentation
            assert learner_files.copied_hidden_run(["import torch", pasted], runs), (chapter, gid)
        release = nbformat.read(course.release_notebook(chapter), as_version=4)
        for nb in (release, submissions.reference(course, chapter), submissions.blank(course, chapter)):
            assert learner_files.copied_hidden_run(_sources(nb), runs) is None, chapter


@pytest.mark.unit
def test_hidden_lines_that_a_public_file_holds_never_count(chapter_runs):
    """Chapter 3's hidden tests hold three seed lines that other releases and the learner package also hold
    (issue 41, class 4): a notebook holding the three, one after the other, holds no hidden run. So does one that
    holds hidden lines out of their order, or RUN_LINES - 1 of them; a run split across two cells is no run."""
    chapter = "03_scoring_functions"
    course = Course()
    runs = chapter_runs[chapter]
    source = nbformat.read(course.source_notebook(chapter), as_version=4)
    seeds = [f"g = torch.Generator().manual_seed({n})" for n in (3, 5, 7)]
    hidden = {learner_files.normal_line(line) for _, lines in _regions(source) for line in lines}
    public = "\n".join(learner_files.public_texts(*kit.published(course)))
    assert all(seed in hidden and seed in public for seed in seeds)
    assert learner_files.copied_hidden_run(["\n".join(seeds)], runs) is None
    run, gid = sorted(runs.runs.items())[0]
    assert learner_files.copied_hidden_run(["\n".join(run)], runs) == gid
    assert learner_files.copied_hidden_run(["\n".join(reversed(run))], runs) is None
    assert learner_files.copied_hidden_run(["\n".join(run[:-1])], runs) is None
    assert learner_files.copied_hidden_run(["\n".join(run[:1]), "\n".join(run[1:])], runs) is None
    assert learner_files.copied_hidden_run(["\n".join(run[:1]) + "\n# mine\n" + "\n".join(run[1:])], runs) is None
    huge = "\n".join(["x" * 10_000] + list(run))  # a long line is skipped, not normalised; the run still counts
    assert learner_files.copied_hidden_run([huge, None, 3], runs) == gid
    many = "ab\n" * 2_000_000 + "\n".join(run)  # 6 MB of short lines: looked at without a list of its lines
    tracemalloc.start()
    try:
        assert learner_files.copied_hidden_run([many], runs) == gid
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak >> 20} MB to look at a 6 MB cell"


@pytest.mark.sandbox
@pytest.mark.timeout(600)
def test_a_copy_of_hidden_tests_is_graded_as_usual_and_only_the_instructor_is_told(tmp_path_factory, tmp_path):
    """Chapter 3 (issue 41, class 4), graded by the engine (as `grade`'s workers and `grade-one` do):

    - the reference answers plus the three seed lines that chapter 3's hidden tests share with public files: full
      marks, no suspicion (8f5e294 scored it zero as "a copy of the course's solution notebook");
    - the reference answers plus a cell holding a hidden run (RUN_LINES consecutive hidden-test lines that no public
      file holds) as inert text: full marks, and a suspicion naming the test cell, in the result only;
    - the same with each line of the run changed: full marks, no suspicion, and a feedback page identical, byte for
      byte, to the previous one's: nothing the learner sees depends on the match."""
    chapter = "03_scoring_functions"
    results = {}
    with course_with_engine(tmp_path_factory) as (course, engine):

        def graded(name: str, text: str):
            nb = submissions.reference(course, chapter)
            nb.cells.append(nbformat.v4.new_code_cell(text))
            path = tmp_path / name / f"{chapter}.ipynb"
            path.parent.mkdir()
            nbformat.write(nb, path)
            results[name] = engine.grade(chapter, path, name)
            return results[name]

        seeds = graded("seeds", "\n".join(f"g = torch.Generator().manual_seed({n})" for n in (3, 5, 7)))
        assert (seeds.status, seeds.reason, seeds.score) == ("graded", "", seeds.max_score), seeds.reason
        source = nbformat.read(course.source_notebook(chapter), as_version=4)
        runs = learner_files.hidden_runs(source, learner_files.public_texts(*kit.published(course)))
        run, gid = next((run, gid) for run, gid in sorted(runs.runs.items()) if not any('"""' in x for x in run))
        graded("copied", '_notes = """\n' + "\n".join(run) + '\n"""')
        graded("changed", '_notes = """\n' + "\n".join(line + "  # mine" for line in run) + '\n"""')
    for name, r in results.items():
        assert (r.status, r.reason, r.flags, r.score) == ("graded", "", (), r.max_score), (name, r.reason, r.flags)
        assert r.max_score > 0 and GradingResult.from_json(r.to_wire()) == r
    assert results["seeds"].suspicions == () and results["changed"].suspicions == ()
    assert results["copied"].suspicions == (learner_files.suspicion(gid),)
    assert gid in results["copied"].suspicions[0]
    assert feedback_html(results["copied"]) == feedback_html(results["changed"])


# -- the class ---------------------------------------------------------------------------------------------------
def _secret(name: bytes) -> str:
    return hashlib.sha256(name).hexdigest() * 2  # 128 hex digits, as nbgrader's submit writes


def _place(course: Course, name: bytes, notebook=None, *, stamp: bytes | None = STAMP.encode(),
           secret: bool = True) -> Path:
    folder = Path(os.fsdecode(os.path.join(os.fsencode(course.grading / "submitted"), name))) / CHAPTER
    folder.mkdir(parents=True)
    path = folder / f"{CHAPTER}.ipynb"
    if isinstance(notebook, bytes):
        path.write_bytes(notebook)
    elif notebook is not None:
        nbformat.write(notebook, path)
    if stamp is not None:
        (folder / "timestamp.txt").write_bytes(stamp)
    if secret:
        (folder / "submission_secret.txt").write_text(_secret(name))
    return folder


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _run(cmd, course, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=course.root, **kw)


@pytest.mark.sandbox
@pytest.mark.timeout(900)
def test_a_class_of_malformed_inputs_is_graded(tmp_path):
    course = Course().copy_to(tmp_path / "course")
    copy_reference_cache(course.root)
    ref = submissions.reference(course, CHAPTER)
    blank = submissions.blank(course, CHAPTER)
    solution = course.source_notebook(CHAPTER)

    _place(course, b"reference", ref)
    _place(course, b"blank", blank)
    _place(course, b"stamp-bytes", ref, stamp=b"\xff\xfe2026\x00\x80")
    _place(course, b"stamp-garbage", ref, stamp=b"the day after tomorrow")
    _place(course, b"stamp-huge", ref, stamp=b"2026-11-20 " * 200_000)
    _place(course, b"$\\alpha$", ref)
    _place(course, b"=cmd|' -C calc'!A0", blank)
    _place(course, b"new\nline", ref)
    _place(course, b"caf\xe9", ref)
    _place(course, b"L" * 200, blank)
    _place(course, b"no-secret", ref, secret=False)
    os.symlink(solution, _place(course, b"symlink") / f"{CHAPTER}.ipynb")
    shutil.copy(solution, _place(course, b"collected-link") / f"{CHAPTER}.ipynb")  # what collect made of a link
    os.link(course.release_notebook(CHAPTER), _place(course, b"hardlink") / f"{CHAPTER}.ipynb")
    os.mkfifo(_place(course, b"fifo") / f"{CHAPTER}.ipynb")
    beside = _place(course, b"odd-files", ref)
    os.mkfifo(beside / "pipe")
    os.symlink(solution, beside / "answers.ipynb.bak")
    _place(course, b"not-json", b'{"cells": [ this is not json')

    done = _run([sys.executable, "-m", "autograder", "grade", CHAPTER, "--course", str(course.root), "--no-progress",
                 "--workers", "1"], course, env=child_env())
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert (course.grading / "reports" / "class_report.html").is_file()
    rows = {r["student"]: r for r in _rows(course.grading / "grades.csv")}
    assert len(rows) == 17, sorted(rows)
    full = rows["reference"]
    max_score = float(full["max_score"])
    assert full["status"] == "graded" and float(full["score"]) == max_score > 0 and full["flagged"] == "no"
    blank_row = rows["blank"]
    assert blank_row["status"] == "graded" and float(blank_row["score"]) < max_score and blank_row["flagged"] == "no"

    def graded_like(student: str, like: dict, flag: str | None):
        r = rows[student]
        assert r["status"] == "graded" and r["score"] == like["score"], (student, r)
        if flag is None:
            assert r["flagged"] == "no", (student, r["flags"])
        else:
            assert r["flagged"] == "yes" and flag in r["flags"], (student, r["flags"])

    graded_like("stamp-bytes", full, "timestamp.txt is not UTF-8")
    graded_like("stamp-garbage", full, "timestamp.txt is not a date")
    graded_like("stamp-huge", full, "timestamp.txt not read (too large")
    graded_like("$\\alpha$", full, None)
    graded_like("'=cmd|' -C calc'!A0", blank_row, None)  # neutralised in the CSV, kept in the gradebook
    graded_like("new\\x0aline", full, "not printable UTF-8")
    graded_like("caf\\xe9", full, "not printable UTF-8")
    long_id = student_id(b"L" * 200)[0]
    graded_like(long_id, blank_row, "longer than 128 characters")
    graded_like("no-secret", full, "submission_secret.txt is missing")
    graded_like("odd-files", full, "refused an entry of the submission folder: a FIFO (not read)")
    assert "refused an entry of the submission folder: a symbolic link (not read)" in rows["odd-files"]["flags"]
    assert "pipe" not in rows["odd-files"]["flags"] and "answers" not in rows["odd-files"]["flags"], \
        "an entry's name is the learner's text: no flag quotes it"

    def zeroed(student: str, reason: str):
        r = rows[student]
        assert r["status"] == "zero" and float(r["score"]) == 0 and reason in r["reason"], (student, r)

    zeroed("symlink", "the submitted notebook is a symbolic link")
    zeroed("hardlink", "hard link to one of the course's own files")
    zeroed("fifo", "the submitted notebook is a FIFO")
    zeroed("not-json", "malformed JSON")
    for student in ("symlink", "hardlink", "fifo"):
        assert rows[student]["flagged"] == "yes", student
    # The course's own notebook, copied by a collect that followed a link, is graded as usual: its hidden tests are
    # the instructor's evidence (the suspicion column, the report), and its learner's page is the reference's.
    graded_like("collected-link", full, None)
    assert "copy of the course's solution notebook" in rows["collected-link"]["suspicion"]
    assert [s for s, r in rows.items() if r["suspicion"]] == ["collected-link"]
    feedback = course.grading / "feedback"
    assert (feedback / "collected-link" / CHAPTER / f"{CHAPTER}.html").read_bytes() == \
        (feedback / "reference" / CHAPTER / f"{CHAPTER}.html").read_bytes()

    # The next run finds every one of them recorded (the resume keys of odd folders are stable).
    again = _run([sys.executable, "-m", "autograder", "grade", CHAPTER, "--course", str(course.root), "--no-progress"],
                 course, env=child_env())
    assert again.returncode == 0 and "17 up to date, nothing to grade" in again.stdout, again.stdout + again.stderr

    # Every export is written, and no cell of any CSV starts a formula.
    done = _run([sys.executable, "-m", "autograder", "export", "--format", "all", "--course", str(course.root)],
                course, env=child_env())
    assert done.returncode == 0, done.stdout + done.stderr
    csvs = [course.grading / "grades.csv", course.grading / "grades_by_exercise.csv",
            *(course.grading / "export" / name for name in export.FORMATS.values())]
    for path in csvs:
        with open(path, newline="", encoding="utf-8") as f:
            cells = [c for row in csv.reader(f) for c in row]
        assert not [c for c in cells if export.safe_cell(c) != c], path
        assert "'=cmd|' -C calc'!A0" in cells, path

    # Feedback is released to everyone whose secret is there; the learner without one does not stop it.
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    done = _run([sys.executable, "-m", "nbgrader", "release_feedback", CHAPTER, f"--Exchange.root={exchange}"], course,
                env=course.nbgrader_env())
    assert done.returncode == 0, done.stdout + done.stderr
    outbound = exchange / "attention-from-scratch" / "feedback"
    for name in (b"reference", b"blank", b"$\\alpha$", b"new\nline", b"caf\xe9", b"stamp-bytes", b"odd-files"):
        page = course.grading / "feedback" / student_id(name)[0] / CHAPTER / f"{CHAPTER}.html"
        released = outbound / (hashlib.md5((_secret(name) + CHAPTER).encode()).hexdigest() + ".html")
        assert released.is_file() and released.read_bytes() == page.read_bytes(), name
    assert (course.grading / "feedback" / "no-secret" / CHAPTER / f"{CHAPTER}.html").is_file()
    # The report (its heatmap draws every id, "$\\alpha$" included) lists the flagged learners by id, as text.
    page = (course.grading / "reports" / "class_report.html").read_text()
    assert "caf\\xe9" in page and "new\\x0aline" in page
    assert "collected-link" in page.split("Suspicions (instructors only)", 1)[1].split("<h2>", 1)[0]
    assert json.loads((course.grading / ".outputs-state.json").read_text())["report"] is True
