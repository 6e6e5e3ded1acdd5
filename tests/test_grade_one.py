"""``python -m autograder grade-one CHAPTER ANY_PATH.ipynb`` grades a notebook under any file name (issue 15:
``grade-one 03_scoring_functions my_attempt.ipynb`` used to zero every cell with "wrong file name"), while
batch grading, which finds chapters by nbgrader's layout, still says which file it expected
(tests/test_batch.py, learner ``renamed``)."""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from autograder import __main__ as cli
from autograder import submissions
from autograder.course import Course

CHAPTER = "03_scoring_functions"
CHAPTERS = Course().chapters()


@pytest.mark.unit
@pytest.mark.parametrize("argv, expected", [
    ([CHAPTER, "my_attempt.ipynb"], 1),
    ([CHAPTER, "--student", "ada", "my_attempt.ipynb"], 3),
    (["--json", "out.json", CHAPTER, "a/b c.ipynb", "--html", "f.html"], 3),
    (["--student=ada", CHAPTER, "x.ipynb"], 2),
    ([CHAPTER, "--", "-odd-name.ipynb"], 2),
    (["no_such_chapter", "x.ipynb"], None),
    ([CHAPTER], None),
])
def test_the_notebook_argument_is_found(argv, expected):
    found = cli.notebook_argument(argv, CHAPTERS)
    assert (found[1] if found else None) == expected
    if found:
        assert found[0] == CHAPTER


@pytest.mark.unit
def test_any_file_name_reaches_the_grader_under_the_chapters_name(tmp_path, monkeypatch):
    given = tmp_path / "my attempt (final).ipynb"
    given.write_text('{"cells": [], "note": "the learner\'s bytes"}')
    seen = {}

    def fake_main(argv):  # stands in for autograder.isolation.main: what file would it grade?
        from pathlib import Path

        path = Path(argv[argv.index("--student") + 2])
        seen.update(argv=argv, name=path.name, data=path.read_text())
        return 0

    import autograder.isolation as isolation

    monkeypatch.setattr(isolation, "main", fake_main)
    assert cli.grade_one([CHAPTER, "--student", "ada", str(given), "--json", "r.json"]) == 0
    assert seen["name"] == f"{CHAPTER}.ipynb"
    assert seen["data"] == given.read_text(), "graded the learner's bytes, unchanged"
    assert seen["argv"][:3] == [CHAPTER, "--student", "ada"] and seen["argv"][-2:] == ["--json", "r.json"]
    assert given.is_file(), "the learner's file is left where it was"


@pytest.mark.sandbox
@pytest.mark.timeout(600)
def test_grade_one_under_another_name_gets_full_marks(tmp_path):
    course = Course()
    nb = submissions.reference(course, CHAPTER)
    path = tmp_path / "my_attempt.ipynb"
    nbformat.write(nb, path)
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, "-m", "autograder", "grade-one", CHAPTER, str(path), "--json", str(out)],
                          cwd=course.root, capture_output=True, text=True, timeout=560)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["status"] == "graded", result["reason"]
    assert result["score"] == result["max_score"] > 0, done.stdout
    assert "wrong file name" not in done.stdout
