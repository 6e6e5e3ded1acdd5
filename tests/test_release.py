"""The learner release is generated from solutions/ and contains none of the answers."""
from __future__ import annotations

import re

import nbformat
import pytest
import yaml

from attention_course.cells import grade_id, is_graded_test, is_setup, is_solution
from autograder.course import Course
from autograder.release import generate

from .notebook_format import comparable, first_difference

COURSE = Course()
CHAPTERS = COURSE.chapters()


@pytest.mark.unit
def test_every_chapter_is_released_and_in_the_book():
    toc = yaml.safe_load((COURSE.root / "_toc.yml").read_text())
    files = {entry["file"] for part in toc["parts"] for entry in part["chapters"]}
    assert len(CHAPTERS) >= 7, f"expected at least the seven chapters of the spec, found {CHAPTERS}"
    for chapter in CHAPTERS:
        assert COURSE.release_notebook(chapter).is_file(), f"{chapter} has not been released"
        assert f"chapters/{chapter}/{chapter}" in files, f"{chapter} is missing from _toc.yml"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """Every chapter's release regenerated from solutions/ (one nbgrader start for all of them), with the
    machine's best CPU kernels on two threads: tests/test_nbval.py runs the generic kernels on one."""
    tmp = tmp_path_factory.mktemp("release")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ATEN_CPU_CAPABILITY", raising=False)
        mp.setenv("OMP_NUM_THREADS", "2")
        mp.setenv("MKL_NUM_THREADS", "2")
        return generate(COURSE, CHAPTERS, tmp / "release", f"sqlite:///{tmp / 'gradebook.db'}")


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_release_equals_fresh_regeneration(regenerated, chapter):
    fresh = regenerated[chapter]
    committed = COURSE.release_notebook(chapter)
    now, stored = comparable(fresh), comparable(committed)
    # This run is also the "machine's best CPU kernels, default threads" half of the machine-independence
    # proof (tests/test_nbval.py runs the other half), so name the cell that differs.
    assert now == stored, (f"chapters/{chapter} differs from a fresh regeneration on this machine: "
                           f"{first_difference(now, stored)}\n(if the source changed: run "
                           f"`python -m autograder release {chapter}` and commit; if only a printed number "
                           "differs, that output depends on the machine: round it)")
    extra_files = sorted(p.name for p in fresh.parent.iterdir())
    assert extra_files == sorted(p.name for p in committed.parent.iterdir())


def _split_lines(source: str) -> tuple[list[str], list[str]]:
    """(lines inside solution or hidden-test regions, lines outside them), stripped."""
    hidden, shown, inside = [], [], False
    for line in source.splitlines():
        if re.search(r"### (BEGIN|END) (SOLUTION|HIDDEN TESTS)", line):
            inside = "BEGIN" in line
            continue
        (hidden if inside else shown).append(line.strip())
    return hidden, shown


@pytest.mark.unit
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_release_holds_no_solution_or_hidden_test(chapter):
    release_text = COURSE.release_notebook(chapter).read_text()
    nb = nbformat.read(COURSE.release_notebook(chapter), as_version=4)
    assert nb.metadata["attention_course"]["generated_from"] == f"solutions/{chapter}/{chapter}.ipynb"
    assert "generated from" in nb.cells[-1].source
    assert "remove-cell" in nb.cells[-1].metadata.get("tags", []), "the maintainer note must not render in the book"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "matches_reference"):
        assert marker not in release_text, f"{marker!r} leaked into the release"
    source = nbformat.read(COURSE.source_notebook(chapter), as_version=4)
    released_code = {line.strip() for c in nb.cells if c.cell_type == "code" for line in c.source.splitlines()}
    hidden, shown = set(), set()
    for cell in source.cells:
        inside, outside = _split_lines(cell.source)
        hidden.update(inside)
        shown.update(outside)
    # A line that the source also shows openly (an import, `with torch.no_grad():`) is no leak.
    leaked = {line for line in hidden - shown if len(line) > 20 and line in released_code}
    assert not leaked, f"answer or hidden-test lines leaked into the release: {sorted(leaked)}"


@pytest.mark.unit
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_source_follows_the_graded_cell_format(chapter):
    """Every graded test cell has a stable grade_id, explicit points, a docstring and uses our checks."""
    nb = nbformat.read(COURSE.source_notebook(chapter), as_version=4)
    setup = [c for c in nb.cells if is_setup(c)]
    assert setup and f'start_chapter("{chapter}"' in setup[0].source, "the first setup cell calls start_chapter"
    ids = [grade_id(c) for c in nb.cells if grade_id(c)]
    assert len(ids) == len(set(ids)), "grade_ids must be unique"
    tests = [c for c in nb.cells if is_graded_test(c)]
    solutions = [c for c in nb.cells if is_solution(c)]
    assert tests and solutions
    for cell in tests:
        gid = grade_id(cell)
        meta = cell.metadata["nbgrader"]
        assert meta.get("points", 0) > 0, f"{gid}: explicit positive points"
        assert cell.source.lstrip().startswith('"""'), f"{gid}: starts with a docstring saying what it checks"
        assert f'Checks("{gid}")' in cell.source, f"{gid}: uses Checks with its own grade_id"
        visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        assert "matches_reference" not in visible, f"{gid}: reference comparisons belong in hidden tests"
    for cell in solutions:
        assert "### BEGIN SOLUTION" in cell.source and '"""' in cell.source, (
            f"{grade_id(cell)}: solution inside a documented function or class")


@pytest.mark.unit
def test_a_print_split_into_chunks_is_stored_as_one_output():
    """A loaded machine once delivered one print as two stream chunks (its line, then its newline), and the
    regenerated release differed from the stored one in that alone."""
    from autograder.release import merged_streams

    out = nbformat.v4.new_output
    chunks = [out("stream", name="stdout", text="score: 0.89"), out("stream", name="stdout", text="\n"),
              out("stream", name="stderr", text="warning\n"), out("stream", name="stdout", text="next\n")]
    merged = merged_streams(chunks)
    assert [(o.name, o.text) for o in merged] == [("stdout", "score: 0.89\n"), ("stderr", "warning\n"),
                                                  ("stdout", "next\n")]
