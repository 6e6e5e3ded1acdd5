"""The hints and descriptions that graded test cells hand the check library, as catalogue entries (issue 45).

A test cell calls ``check.close("weights", got, want, hint="...")``: the ``hint=`` and ``describe=`` literals are
what a learner reads after a failed check's symptom (the self-check, nbval, the feedback page). Test cells are
checksummed by nbgrader and stay byte-identical in every language, so these texts are translated where they are
shown (``attention_course.language`` on the learner side, the class language on the grader's), keyed by their
English. This module finds them:

- **visible** ones in the test cells of the chapter's English release (``chapters/<ch>/<ch>.ipynb``: what a learner
  has), **hidden** ones in the ``BEGIN HIDDEN TESTS`` regions of the solution notebook's test cells (what only the
  grader runs). A text in both is visible: the learner has it anyway.
- a hint that is not a plain literal is followed through the expressions test cells use: ``a if c else b`` (both
  branches), ``x + y`` (every combination) and f-strings, whose fields become named format fields of the key
  (``f"method {method!r}: ..."`` is the key ``method {method!r}: ...``; the lookup matches the shown text against
  it and carries the values over). Anything else is :func:`unresolved` and stays English (a test lists none today).
"""
from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass

import nbformat

from attention_course.cells import is_graded_test, nbgrader_meta

from .notebook_text import has_prose

KEYWORDS = ("hint", "describe")  # the check library's learner-facing text arguments (attention_course/checks.py)
VISIBLE, HIDDEN = "visible", "hidden"
HIDDEN_BEGIN, HIDDEN_END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
MAGIC = re.compile(r"^(\s*)([%!])", re.M)  # an IPython magic line: a comment to ast


@dataclass(frozen=True)
class Hint:
    msgid: str  # the English; a resolved f-string's fields as {name} format fields
    visibility: str  # VISIBLE or HIDDEN
    cell: int  # the cell's index in the notebook it was found in
    grade_id: str
    keyword: str  # "hint" or "describe"

    @property
    def context(self) -> str:
        return f"{self.visibility}: cell {self.cell} (test {self.grade_id}), {self.keyword}="


def templates(node: ast.AST) -> list[str] | None:
    """Every text ``node`` can evaluate to, f-string fields kept as format fields; None if it cannot be followed."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value.replace("{", "{{").replace("}", "}}"))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) \
                    and value.format_spec is None:
                conversion = "" if value.conversion == -1 else "!" + chr(value.conversion)
                parts.append("{" + value.value.id + conversion + "}")
            else:
                return None
        return ["".join(parts)]
    if isinstance(node, ast.IfExp):
        body, orelse = templates(node.body), templates(node.orelse)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = templates(node.left), templates(node.right)
        if left is None or right is None:
            return None
        return [a + b for a, b in itertools.product(left, right)]
    return None


def is_template(node: ast.AST) -> bool:
    """Whether the texts of ``node`` carry fields (an f-string somewhere in it): keys with {field}s, not literals."""
    return any(isinstance(n, ast.JoinedStr) for n in ast.walk(node))


def parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(MAGIC.sub(r"\1#\2", source))
    except SyntaxError:
        return None


def hint_nodes(source: str):
    """(line, keyword, value node) of every ``hint=``/``describe=`` argument in ``source``."""
    tree = parsed(source)
    if tree is None:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in KEYWORDS:
                    yield kw.value.lineno, kw.arg, kw.value


def hidden_lines(source: str) -> set[int]:
    """The (1-based) line numbers inside the source's hidden-test regions."""
    inside, lines = False, set()
    for number, line in enumerate(source.split("\n"), start=1):
        if HIDDEN_BEGIN in line:
            inside = True
        elif HIDDEN_END in line:
            inside = False
        elif inside:
            lines.add(number)
    return lines


def test_cells(nb):
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and is_graded_test(cell):
            yield index, nbgrader_meta(cell).get("grade_id", ""), cell.source


def found_in(nb, visibility: str) -> tuple[list[Hint], list[str]]:
    """The hints of ``nb``'s test cells (only its hidden regions' when ``visibility`` is HIDDEN), and a description
    of each argument that could not be followed."""
    hints, unresolved_here = [], []
    for index, grade_id, source in test_cells(nb):
        hidden = hidden_lines(source)
        for line, keyword, value in hint_nodes(source):
            if (line in hidden) != (visibility == HIDDEN):
                continue
            texts = templates(value)
            if texts is None:
                unresolved_here.append(f"cell {index} (test {grade_id}) {keyword}={ast.unparse(value)}")
                continue
            for text in texts:
                if text and has_prose(text):
                    hints.append(Hint(text, visibility, index, grade_id, keyword))
    return hints, unresolved_here


def chapter_hints(release_nb, source_nb) -> list[Hint]:
    """The chapter's hints in notebook order, visible first; a text that is visible is never also listed hidden."""
    visible, _ = found_in(release_nb, VISIBLE)
    hidden, _ = found_in(source_nb, HIDDEN)
    shown = {h.msgid for h in visible}
    return visible + [h for h in hidden if h.msgid not in shown]


def unresolved(release_nb, source_nb) -> list[str]:
    """The ``hint=``/``describe=`` arguments that stay English because no key can be derived from them."""
    return found_in(release_nb, VISIBLE)[1] + found_in(source_nb, HIDDEN)[1]


def read(path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)
