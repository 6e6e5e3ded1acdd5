"""Generate the learner release (``chapters/``) from the single source of truth (``solutions/``).

For each chapter:

1. execute the source notebook (reference solutions in place) so that narrative cells carry the
   reference outputs: printed values and figures a reader can compare with;
2. drop the outputs of solution cells and graded test cells (they would reveal hidden checks);
3. run ``nbgrader generate_assignment`` on that executed copy with output clearing switched off, which
   strips solutions and hidden tests, locks cells and registers the chapter in the gradebook;
4. put "Get the course kit" first (:func:`autograder.kit.install_markdown`, a markdown cell without nbgrader
   metadata: a notebook downloaded from the book's page says what to install for it), mark the result as
   generated and write it to ``chapters/<id>/<id>.ipynb``;
5. write the translated releases beside it (``chapters_zh/<id>/<id>.ipynb``: :mod:`autograder.translated_release`),
   or only those with ``--lang zh`` (no notebook runs; what a translator does after editing a catalogue).
"""
from __future__ import annotations

import argparse
import copy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from attention_course.cells import is_graded_test, is_solution
from attention_course.expected import execute_notebook

from . import kit, new_gradebook, translated_release, translations
from .course import Course

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
GENERATED_NOTE = (
    "*This notebook is generated from `solutions/{chapter}/{chapter}.ipynb` by "
    "`python -m autograder release`. Edit the source, not this file.*"
)


def merged_streams(outputs: list) -> list:
    """``outputs`` with each run of consecutive stream outputs to the same stream joined into one. The kernel
    flushes a print in one chunk or several depending on timing (a loaded machine split one line from its
    newline), so the stored release must not keep the chunks."""
    merged = []
    for out in outputs:
        if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1]["text"] += out["text"]
        else:
            merged.append(copy.copy(out))  # a copy: joining must not change the caller's outputs
    return merged


def execute_source(course: Course, chapter: str, timeout: int = 900) -> nbformat.NotebookNode:
    nb = nbformat.read(course.source_notebook(chapter), as_version=4)
    env = {"ATTENTION_COURSE_GRADING": "reference", "ATTENTION_COURSE_ROOT": str(course.root),
           "ATTENTION_COURSE_DEVICE": "cpu", "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    execute_notebook(nb, env, timeout, record_timing=False)
    for cell in nb.cells:
        if cell.cell_type == "code" and (is_graded_test(cell) or is_solution(cell)):
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "code":
            # Live widgets (tqdm's notebook bar) need a widget manager from a CDN to render in the book.
            cell.outputs = merged_streams([o for o in cell.outputs if WIDGET_MIME not in o.get("data", {})])
    nb.metadata.pop("widgets", None)
    return nb


def generate(course: Course, chapters: list[str], out_dir: Path, db_url: str) -> dict[str, Path]:
    """Write the release notebook of each chapter into ``out_dir/<chapter>/``; returns their paths.

    One ``nbgrader generate_assignment`` call does every chapter (its assignment id is a glob over the chapters
    staged here): starting nbgrader costs more than generating one chapter."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for chapter in chapters:
            src = tmp / "source" / chapter
            shutil.copytree(course.solutions / chapter, src)
            nbformat.write(execute_source(course, chapter), src / f"{chapter}.ipynb")
        new_gradebook.create(db_url)  # else nbgrader starts an `alembic` process to make a new one
        cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", "*", "--force",
               f"--CourseDirectory.root={tmp}", "--CourseDirectory.source_directory=source",
               "--CourseDirectory.release_directory=release", f"--CourseDirectory.db_url={db_url}",
               "--ClearOutput.enabled=False", "--log-level=WARN"]
        done = subprocess.run(cmd, env=course.nbgrader_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment failed for {', '.join(chapters)}:\n"
                               f"{done.stdout}\n{done.stderr}")
        return {chapter: _finish(course, tmp / "release" / chapter, chapter, Path(out_dir)) for chapter in chapters}


def kit_cell(course: Course, chapter: str) -> nbformat.NotebookNode:
    """The release's first cell: how to install what the notebook imports, its links relative to where the chapter's
    page lies in the book's site (and its notebook in the kit), e.g. ``../../wheels/<wheel>``."""
    depth = len(course.release_notebook(chapter).relative_to(course.root).parts) - 1
    cell = nbformat.v4.new_markdown_cell(kit.install_markdown(kit.wheel_filename(course), "../" * depth))
    cell.id = kit.KIT_CELL_ID
    return cell


def _finish(course: Course, released: Path, chapter: str, out_dir: Path) -> Path:
    """Put the kit cell first, mark nbgrader's release of ``chapter`` as generated and copy it to
    ``out_dir/<chapter>/``."""
    nb = nbformat.read(released / f"{chapter}.ipynb", as_version=4)
    nb.cells.insert(0, kit_cell(course, chapter))
    nb.metadata["attention_course"] = {"generated_from": f"solutions/{chapter}/{chapter}.ipynb",
                                       "generator": "python -m autograder release"}
    note = nbformat.v4.new_markdown_cell(GENERATED_NOTE.format(chapter=chapter))
    note.id = "generated-note"
    # For maintainers who open the file, not for readers: Jupyter Book drops cells tagged remove-cell.
    note.metadata["tags"] = ["remove-cell"]
    nb.cells.append(note)
    dest = out_dir / chapter
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(released, dest)
    nbformat.write(nb, dest / f"{chapter}.ipynb")
    return dest / f"{chapter}.ipynb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder release", description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter ids (default: all)")
    parser.add_argument("--out", type=Path, help="release folder (default: the course's chapters/)")
    parser.add_argument("--db", help="gradebook URL to register the chapters in (default: the course's)")
    parser.add_argument("--duedate", metavar="ISO", help="the released chapters' due date, e.g. 2026-12-01T23:59 "
                        "(UTC unless a zone is given); see `python -m autograder deadlines`")
    parser.add_argument("--lang", help="only the release in this language (zh: chapters_zh/), from the committed "
                        "English release and the chapter's catalogue: no notebook runs (after a translation)")
    args = parser.parse_args(argv)
    from .deadlines import parse_due, set_deadlines

    course = Course()
    if args.lang:
        translated_release.write_all(course, args.chapters or course.chapters(), [translations.language(args.lang)])
        return 0
    due = parse_due(args.duedate) if args.duedate else None  # a bad date stops before any work
    course.grading.mkdir(exist_ok=True)
    released = generate(course, args.chapters or course.chapters(), args.out or course.chapters_dir,
                        args.db or course.db_url)
    for chapter, path in released.items():
        print(f"released {chapter} -> {path.relative_to(course.root) if path.is_relative_to(course.root) else path}")
        if due is not None:  # nbgrader's Assignment.duedate, as `nbgrader db assignment add --duedate` sets it
            print("\n".join(set_deadlines(args.db or course.db_url, chapter, due)))
    if args.out is None:  # the translated releases follow the course's own English ones (the "beside")
        translated_release.write_all(course, list(released))
    return 0
