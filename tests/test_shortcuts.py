"""The shortcut lint: for every graded function of every chapter, a constant answer, an answer keyed to the
visible tests' inputs and "return the visible expected value" each lose points (issue 17, class 3); and for every
function in its chapter's library table (solutions/<chapter>/library.toml), the library one-liner loses points
unless the chapter allows it, for at most 1 point an exercise and 5% of the chapter (issue 43).

The shortcuts are generated from the reference by :mod:`autograder.shortcuts`, never written by hand, so a new
function or chapter is linted as soon as it exists. Shortcuts of different functions share a notebook when
the test cells that call one cannot reach the other's code (autograder/cell_reach.py); each is then judged on its
own cells only: the graded test cells of its function's exercise (those after its solution cell).
"""
from __future__ import annotations

import ast
import re
import shutil

import nbformat
import pytest

from attention_course.cells import grade_id, graded_cells, is_graded_test, is_solution, points
from autograder import idling, mutants, shortcuts, submissions
from autograder.course import Course
from autograder.trusted import is_hidden

from autograder.cell_reach import reach as reach_of
from .conftest import course_with_engine

COURSE = Course()
CHAPTERS = COURSE.chapters()


SOURCES = {ch: nbformat.read(COURSE.source_notebook(ch), as_version=4) for ch in CHAPTERS}
REACH = {ch: reach_of(COURSE, ch) for ch in CHAPTERS}


def exercise_tests(chapter: str) -> dict[str, list[str]]:
    """{solution cell: the graded test cells that follow it, up to the next solution cell}: the exercise's
    own tests, which a shortcut of any function the solution cell defines must fail (one definition, shared
    with the mutation score: autograder.mutants.exercise_tests)."""
    return mutants.exercise_tests(SOURCES[chapter])


TARGETS = {ch: shortcuts.targets(COURSE, ch) for ch in CHAPTERS}
EXERCISES = {ch: exercise_tests(ch) for ch in CHAPTERS}
OWN = {(ch, t): EXERCISES[ch][t.cell] for ch in CHAPTERS for t in TARGETS[ch]}
HIDDEN = {ch: {grade_id(c) for c in SOURCES[ch].cells if is_graded_test(c) and is_hidden(c.source)}
          for ch in CHAPTERS}
SOLUTION_CELLS = {ch: [grade_id(c) for c in SOURCES[ch].cells if is_solution(c)] for ch in CHAPTERS}
POINTS = {ch: {grade_id(c): points(c) for c in SOURCES[ch].cells if is_graded_test(c)} for ch in CHAPTERS}

# The exercises the editor of issue 43 passed with one library call, each by the names its solution cell has had:
# each needs a library entry (a chapter that redesigns one keeps its entry, which then loses points).
EDITORS_LIST = {"01_cognitive_attention": [("softmax",)], "04_self_attention": [("self_attention_loops",)],
                "05_multi_head_attention": [("parameter_count",)],
                "07_attention_vs_cnn": [("conv1d_as_attention", "fixed_head_attention")],
                "08_transformer": [("layer_norm",)], "09_efficient_attention": [("online_softmax",)],
                "10_language_model": [("rmsnorm",), ("cross_entropy",), ("clip_grad_norm",)],
                # issue 44: F.scaled_dot_product_attention does the attention half of paged_attention
                "11_serving_and_long_context": [("paged_attention",)]}
MAX_ALLOWED_POINTS = 1.0  # an exercise the text lets a learner do with the library is worth at most this
MAX_ALLOWED_SHARE = 0.05  # and all of a chapter's such exercises at most this share of its points


def _library(chapter: str) -> list[shortcuts.LibraryEntry]:
    """The chapter's library table; a table that does not load is test_library_tables_load's failure, not a
    collection error that would hide every other chapter's results."""
    try:
        return shortcuts.library(COURSE, chapter)
    except ValueError:
        return []


LIBRARY = {ch: _library(ch) for ch in CHAPTERS}
# Every (target, kind) the lint grades: the generated kinds for every graded function, the library kind for each
# one the table names and the chapter does not allow.
SHORTCUTS = {ch: [(t, kind) for kind in shortcuts.GENERATED for t in TARGETS[ch]]
             + [(t, shortcuts.LIBRARY) for e in LIBRARY[ch] if not e.allowed for t in TARGETS[ch]
                if t.name == e.function]
             for ch in CHAPTERS}


def packed(chapter: str) -> list[list[tuple[shortcuts.Target, str]]]:
    """Every (target, kind) of the chapter in as few notebooks as keep them apart: two share a notebook only
    when they live in different solution cells and neither's own cells can reach the other's cell."""
    reach = REACH[chapter]

    def touches(a, b) -> bool:
        return any(a.cell in reach[cell] for cell in OWN[(chapter, b)])  # a can change what b's tests compute

    bins: list[list] = []
    for t, kind in SHORTCUTS[chapter]:
        home = next((b for b in bins if all(o.cell != t.cell and not touches(o, t) and not touches(t, o)
                                            for o, _ in b)), None)
        if home is None:
            bins.append([(t, kind)])
        else:
            home.append((t, kind))
    return bins


PACKED = {ch: packed(ch) for ch in CHAPTERS}


def idle(chapter: str, bin_) -> frozenset[str]:
    """The solution cells no judged cell of the notebook can reach: stubbed out (autograder/idling.py), so a
    chapter's training run costs nothing in the notebooks that do not judge it (the keyed shortcut keeping its
    visible points in every notebook is the check that the stubs never reach a judged cell)."""
    return idling.unreached(REACH[chapter], SOLUTION_CELLS[chapter], judged=[c for t, _ in bin_ for c in OWN[(chapter, t)]],
                            kept=[t.cell for t, _ in bin_])


CASES = [(ch, t.name, kind) for ch in CHAPTERS for t, kind in SHORTCUTS[ch]]


@pytest.mark.unit
def test_every_graded_function_is_a_target_with_cells_of_its_own():
    for chapter in CHAPTERS:
        assert TARGETS[chapter], chapter
        for t in TARGETS[chapter]:
            assert OWN[(chapter, t)], f"{chapter}: no graded test cell reaches {t.name}"
        assert sorted((t.name, k) for b in PACKED[chapter] for t, k in b) == \
            sorted((t.name, k) for t, k in SHORTCUTS[chapter])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grades each packed notebook once, through one warm engine, the first time a case it carries asks:
    {(chapter, target name, kind): result of the notebook that carries it}. Lazy so that ``-k 03_`` grades
    chapter 3 only and ``-k library`` only the notebooks that carry a library shortcut."""
    out = {}
    with course_with_engine(tmp_path_factory) as (course, engine):
        def of(chapter, target, kind):
            if (chapter, target, kind) not in out:
                i, bin_ = next((i, b) for i, b in enumerate(PACKED[chapter])
                               if any(t.name == target and k == kind for t, k in b))
                nb = shortcuts.submission_of_many(course, chapter, bin_, idle=idle(chapter, bin_))
                student = f"shortcuts-{i}"
                path = submissions.write_submission(course, student, chapter, nb)
                # only the shortcuts' own cells are judged: the engine runs those alone (Engine.grade's judge)
                result = engine.grade(chapter, path, student,
                                      judge=frozenset(c for t, _ in bin_ for c in OWN[(chapter, t)]))
                for t, k in bin_:
                    out[(chapter, t.name, k)] = result
            return out[(chapter, target, kind)]
        yield of


@pytest.mark.sandbox
@pytest.mark.timeout(900)
@pytest.mark.parametrize("chapter,target,kind", CASES)
def test_shortcut_loses_points(graded, chapter, target, kind):
    result = graded(chapter, target, kind)
    assert result["status"] == "graded", result["reason"]
    t = next(t for t in TARGETS[chapter] if t.name == target)
    own = OWN[(chapter, t)]
    cells = result["cells"]
    kept = sum(cells[c]["score"] for c in own)
    why = (" (its input checks kept, its computation the library.toml body: every graded point needs the idea, "
           "or the entry is allowed and worth at most 1 point)") if kind == shortcuts.LIBRARY else ""
    assert kept < sum(cells[c]["max_score"] for c in own), (
        f"the {kind} shortcut of {target} keeps every point of {own}{why}")
    if kind == "keyed":  # right on every visible input: its visible cells must pass (the phase cells work)
        visible = [c for c in own if c not in HIDDEN[chapter]]
        lost = {c: cells[c]["messages"] for c in visible if not cells[c]["passed"]}
        assert not lost, f"the keyed shortcut of {target} fails visible cells it answers right: {lost}"



@pytest.mark.unit
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_library_tables_load(chapter):
    """A chapter's library table names only functions it grades, each once, with a body that is Python."""
    assert [e.function for e in shortcuts.library(COURSE, chapter)] == [e.function for e in LIBRARY[chapter]]


@pytest.mark.unit
@pytest.mark.parametrize("chapter", sorted(EDITORS_LIST))
def test_every_exercise_the_library_does_in_one_line_has_a_library_entry(chapter):
    """The editor's list: each of these exercises passed with one library call. Its function needs an entry, so
    that the library version is graded (and loses points) or the chapter says the library is allowed."""
    listed = {t.cell for t in TARGETS[chapter] for e in LIBRARY[chapter] if e.function == t.name}
    missing = [" or ".join(names) for names in EDITORS_LIST[chapter] if not listed & set(names)]
    assert not missing, (f"{chapter}: no library.toml entry for a function of the solution cells {missing} "
                         f"(solutions/{chapter}/library.toml; see autograder/shortcuts.py)")


@pytest.mark.unit
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_library_allowed_exercises_are_worth_little(chapter):
    """An exercise the library may do is worth at most 1 point, and all of a chapter's such exercises at most 5%
    of its points: the points of a chapter are for the ideas it teaches."""
    allowed_cells = {t.cell for e in LIBRARY[chapter] if e.allowed for t in TARGETS[chapter] if t.name == e.function}
    worth = {cell: sum(POINTS[chapter][c] for c in EXERCISES[chapter][cell]) for cell in allowed_cells}
    too_much = {cell: p for cell, p in worth.items() if p > MAX_ALLOWED_POINTS}
    assert not too_much, f"{chapter}: library-allowed exercises worth more than {MAX_ALLOWED_POINTS} point: {too_much}"
    total = sum(p for _, p in graded_cells(SOURCES[chapter]))
    assert sum(worth.values()) <= MAX_ALLOWED_SHARE * total, (
        f"{chapter}: library-allowed exercises {worth} are {sum(worth.values())} of {total} points, "
        f"more than {MAX_ALLOWED_SHARE:.0%}")


LIBRARY_CHAPTER = "01_cognitive_attention"


@pytest.fixture
def library_course(tmp_path):
    """A course of one chapter (source and release) whose library table each test writes."""
    shutil.copytree(COURSE.solutions / LIBRARY_CHAPTER, tmp_path / "solutions" / LIBRARY_CHAPTER,
                    ignore=shutil.ignore_patterns(shortcuts.LIBRARY_TABLE))
    shutil.copytree(COURSE.chapters_dir / LIBRARY_CHAPTER, tmp_path / "chapters" / LIBRARY_CHAPTER)
    course = Course(tmp_path)

    def write(text: str) -> Course:
        shortcuts.library_table(course, LIBRARY_CHAPTER).write_text(text)
        return course
    return write


def _entry(function: str, body: str = "return x", allowed: str = "false", why: str = "a library call") -> str:
    return f"[[library]]\nfunction = {function!r}\nbody = '''{body}'''\nallowed = {allowed}\nwhy = {why!r}\n"


@pytest.mark.unit
@pytest.mark.parametrize("table,message", [
    (_entry("no_such_function"), "grades no function 'no_such_function'"),
    (_entry("{f}", body="   \n"), "`body` is empty"),
    (_entry("{f}", body="pass"), "`body` is empty"),
    (_entry("{f}", body="return (x"), "`body` is not Python"),
    (_entry("{f}", allowed="'no'"), "`allowed` must be a bool"),
    (_entry("{f}", why=" "), "`why` is empty"),
    (_entry("{f}") + _entry("{f}"), "a second entry for"),
    ("[[library]]\nfunction = '{f}'\nbody = 'return x'\nallowed = false\n", "missing keys ['why']"),
    (_entry("{f}") + "points = 2\n", "unknown keys ['points']"),
    ("[library]\nfunction = '{f}'\n", "array of tables"),
    ("[[libary]]\nfunction = '{f}'\n", "unknown top-level keys ['libary']"),
    ("[[library]\n", "not valid TOML"),
])
def test_a_library_table_with_a_mistake_is_refused_with_the_reason(library_course, table, message):
    first = TARGETS[LIBRARY_CHAPTER][0].name
    course = library_course(table.replace("{f}", first))
    with pytest.raises(ValueError, match=re.escape(message)):
        shortcuts.library(course, LIBRARY_CHAPTER)


@pytest.mark.unit
def test_the_input_checks_in_front_of_the_computation_are_kept():
    body = ast.parse('''def f(x, w):
    """doc"""
    if x.dim() != 3:
        raise ValueError("x")
    K = w.shape[2]
    if K % 2 == 0:
        raise ValueError("K")
    y = x * K
    for _ in range(3):
        y = y @ w
    if y.isnan().any():
        raise ValueError("after the computation")
    return y
''').body[0].body
    assert shortcuts.checks_in_front(body) == 4  # docstring, check, assignment, check; the loop computes
    assert shortcuts.checks_in_front(ast.parse("def g(x):\n    if x:\n        return 1\n    return 2").body[0].body) == 0


@pytest.mark.unit
def test_the_library_submission_is_the_reference_with_one_body_replaced(library_course):
    """The shortcut edits the function's computation only: signature, docstring, input checks and every other cell
    as the reference."""
    target = TARGETS[LIBRARY_CHAPTER][0]
    course = library_course(_entry(target.name, body="values = torch.softmax(x, dim)\nreturn values"))
    nb = shortcuts.submission_of_many(course, LIBRARY_CHAPTER, [(target, shortcuts.LIBRARY)])
    reference = submissions.reference(course, LIBRARY_CHAPTER)
    cells = [c for c in nb.cells if not c.source.startswith(shortcuts.PHASE)]
    changed = [(grade_id(a), a.source, b.source) for a, b in zip(reference.cells, cells) if a.source != b.source]
    assert len(cells) == len(reference.cells) and [cell for cell, _, _ in changed] == [target.cell]
    _, old, new = changed[0]
    old_def, new_def = (next(n for n in ast.parse(src).body if getattr(n, "name", None) == target.name)
                        for src in (old, new))
    assert ast.dump(new_def.args) == ast.dump(old_def.args)
    kept = shortcuts.checks_in_front(old_def.body)
    assert ast.get_docstring(new_def) == ast.get_docstring(old_def) and kept >= 2, "the docstring and a type check"
    assert [ast.dump(n) for n in new_def.body[:kept]] == [ast.dump(n) for n in old_def.body[:kept]]
    assert [ast.unparse(n) for n in new_def.body[kept:]] == ["values = torch.softmax(x, dim)", "return values"]
    with pytest.raises(ValueError, match="no library entry"):
        shortcuts.submission_of_many(course, LIBRARY_CHAPTER, [(TARGETS[LIBRARY_CHAPTER][1], shortcuts.LIBRARY)])
