"""The learner's self-check: ``python -m attention_course check NOTEBOOK``.

A notebook that has been run and saved stores the learner's own outputs, so comparing it with itself proves
nothing. The self-check builds a private notebook whose code is the learner's and whose stored outputs are the
reference's (the outputs of the published release, shipped in the course kit), and lets nbval run it: every
cell runs, every cell with a reference output is compared with it, and a cell that raises fails. The report
names each cell that differs, shows both texts and says which exercise to look at.

Same rules as the book: the reference outputs were made on a CPU and every printed number in them is rounded so
that any CPU prints the same text; cells tagged ``nbval-ignore-output`` (random values, timings, the check
cells' own output) are run but not compared; figures are compared by their text only (nbval's default).

Reference outputs, per chapter, are ``{"chapter", "cells": {cell id: {"outputs", "execution_count",
"metadata", "exercise"}}}`` (:func:`reference_outputs` makes them from a release notebook). They are looked up
in ``--reference PATH`` (a file or a folder of ``<chapter>.json``), then ``$ATTENTION_COURSE_REFERENCE``, then
this package's ``reference/`` folder, which the course kit's wheel carries (``python -m autograder kit``).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .cells import is_graded_test, is_solution
from .language import tr

PACKAGED_REFERENCE = Path(__file__).resolve().parent / "reference"
# An exercise's heading, in an English or a Chinese release ("### Exercise 1: `kernel` (1 point)",
# "### 练习 1：`kernel`（1 分）"), without its points.
_EXERCISE = re.compile(r"^#+\s*((?:Exercise|练习)\s*\d+\b.*?)\s*(?:[(（]\s*\d+(?:\.\d+)?\s*(?:points?|分)\s*[)）])?\s*$",
                       re.M)


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _names(code: str, defined: bool) -> list[str]:
    """Top-level functions and classes ``code`` defines (``defined``), or the names it reads."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    if defined:
        return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]


def exercises(nb: dict) -> dict[str, str]:
    """``{cell id: the exercise to look at}`` for every code cell after the first exercise heading.

    A solution or graded test cell belongs to the exercise whose section it is in. Any other cell that uses
    functions written in exercises points at those exercises, in the notebook's order (the demo that draws
    ``masked_softmax``'s weights points at Exercise 1 even when it sits under a later heading); the rest point at
    the exercise whose section they are in."""
    current, written, found, order = None, {}, {}, []
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown":
            headings = _EXERCISE.findall(_source(cell))
            if headings:
                current = headings[-1].strip()
                order.append(current)
            continue
        if cell.get("cell_type") != "code" or not cell.get("id"):
            continue
        if is_solution(cell) or is_graded_test(cell):
            if current:
                found[cell["id"]] = current
                if is_solution(cell):
                    for name in _names(_source(cell), defined=True):
                        written.setdefault(name, current)
            continue
        used = {written[name] for name in _names(_source(cell), defined=False) if name in written}
        if used:
            found[cell["id"]] = "; ".join(e for e in order if e in used)
        elif current:
            found[cell["id"]] = current
    return found


def _without_images(output: dict) -> dict:
    """An output without its pictures: nbval compares a figure by its text only, and the pictures would make the
    kit's wheel megabytes larger for nothing."""
    data = output.get("data")
    if not data:
        return output
    return {**output, "data": {k: v for k, v in data.items() if not k.startswith("image/")}}


def chapter_of(nb: dict, path: Path) -> str:
    """The chapter a notebook belongs to: from the release's metadata (it survives renaming the file)."""
    source = nb.get("metadata", {}).get("attention_course", {}).get("generated_from", "")
    return Path(source).stem if source else Path(path).stem


def reference_outputs(release: dict) -> dict:
    """The reference outputs the self-check needs, from a published release notebook."""
    where = exercises(release)
    cells = {}
    for cell in release["cells"]:
        if cell.get("cell_type") == "code" and cell.get("id"):
            cells[cell["id"]] = {"outputs": [_without_images(o) for o in cell.get("outputs", [])],
                                 "execution_count": cell.get("execution_count"),
                                 "metadata": {k: v for k, v in cell.get("metadata", {}).items() if k in ("tags",)},
                                 "exercise": where.get(cell["id"]), "first_line": _source(cell).split("\n", 1)[0]}
    return {"chapter": chapter_of(release, Path("release.ipynb")), "cells": cells}


def find_reference(chapter: str, given: Path | None = None) -> dict:
    """The chapter's reference outputs (see the module's docstring for where they are looked up)."""
    places = [p for p in (given, os.environ.get("ATTENTION_COURSE_REFERENCE"), PACKAGED_REFERENCE) if p]
    for place in map(Path, places):
        path = place / f"{chapter}.json" if place.is_dir() else place
        if path.is_file():
            ref = json.loads(path.read_text())
            if ref.get("chapter") != chapter:
                raise SystemExit(tr("{path} holds the reference outputs of {other}, not {chapter}", path=path,
                                    other=ref.get("chapter"), chapter=chapter))
            return ref
    raise SystemExit(tr("no reference outputs for {chapter}: install attention_course from the course kit (its README "
                        "says how), or name them with --reference", chapter=chapter))


def merged_notebook(learner: dict, reference: dict) -> tuple[dict, list[str]]:
    """The learner's code with the reference's stored outputs, and the ids of reference cells the learner's
    notebook no longer has. A cell the reference does not know (one the learner added) runs but is not compared;
    a known cell keeps the reference's tags, so a learner's own ``nbval-ignore-output`` changes nothing here."""
    nb = json.loads(json.dumps(learner))
    ref_cells = reference["cells"]
    seen = set()
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        ref = ref_cells.get(cell.get("id"))
        seen.add(cell.get("id"))
        cell["outputs"] = ref["outputs"] if ref else []
        cell["execution_count"] = ref["execution_count"] if ref else None
        tags = ref["metadata"].get("tags", []) if ref else []
        cell.setdefault("metadata", {})["tags"] = tags
    missing = [cid for cid in ref_cells if cid not in seen]
    return nb, missing


@dataclass
class Finding:
    """One cell nbval failed: ``differs`` (another output than the reference) or ``error`` (it raised)."""
    cell_id: str
    first_line: str
    exercise: str | None
    kind: str
    expected: str = ""
    got: str = ""
    error: str = ""

    def describe(self) -> str:
        where = tr("cell {cell} ({first_line})", cell=self.cell_id, first_line=self.first_line.strip()[:60])
        look = "\n  " + tr("look at: {exercise}", exercise=exercise_name(self.exercise)) if self.exercise else ""
        if self.kind == "differs":
            return (tr("{cell} prints something else than the reference", cell=where) + look + "\n  "
                    + tr("the reference printed:") + f"\n{_indent(self.expected)}\n  "
                    + tr("your notebook printed:") + f"\n{_indent(self.got)}")
        return tr("{cell} raised an error", cell=where) + look + f"\n{_indent(self.error or tr('(no message)'))}"


@dataclass
class Result:
    chapter: str
    compared: int
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.compared > 0 and not self.findings and not self.missing

    def report(self, name: str) -> str:
        lines = []
        for f in self.findings:
            lines += [tr("FAIL {finding}", finding=f.describe()), ""]
        for cid in self.missing:
            lines.append(tr("FAIL cell {cell} of the release is missing from your notebook: copy it back from the "
                            "kit's chapter notebook", cell=cid))
        if self.passed:
            lines.append(tr("self-check passed: {name} prints what the reference prints in all {compared} compared "
                            "cells ({chapter})", name=name, compared=self.compared, chapter=self.chapter))
        else:
            first = next((f.exercise for f in self.findings if f.exercise), None)
            failed = tr("self-check FAILED: {count} cell(s) of {name} differ from the reference",
                        count=len(self.findings), name=name)
            lines.append(tr("{failed}; start with {exercise}", failed=failed, exercise=exercise_name(first))
                         if first else failed)
        return "\n".join(lines)


def exercise_name(text: str | None) -> str:
    """An exercise as :func:`exercises` names it ("Exercise 2: the four scores", from the English release's heading),
    with the word "Exercise" in the active language: the chapter's own title stays the release's text."""
    match = re.match(r"Exercise\s+(\d+)\b:?\s*(.*)$", text or "", re.S)
    if not match:
        return text or ""
    number, title = match.groups()
    return tr("Exercise {number}: {title}", number=number, title=title) if title else tr("Exercise {number}",
                                                                                           number=number)


def _indent(text: str) -> str:
    text = text.rstrip("\n") or tr("(nothing)")
    return "\n".join("    " + line for line in text.splitlines())


def run_nbval(nb: dict, workdir: Path, timeout: int = 600) -> list[dict]:
    """nbval's verdict on each code cell of ``nb`` (see :mod:`.nbval_report`), run in ``workdir``."""
    path = workdir / "selfcheck.ipynb"
    path.write_text(json.dumps(nb))
    (workdir / "pytest.ini").write_text("[pytest]\n")  # no project configuration of the learner's applies
    report = workdir / "nbval.json"
    env = dict(os.environ, ATTENTION_COURSE_NBVAL_REPORT=str(report),
               # The reference outputs were made on a CPU; a GPU rounds differently.
               ATTENTION_COURSE_DEVICE="cpu")
    env.pop("ATTENTION_COURSE_GRADING", None)
    env.pop("MPLBACKEND", None)  # figures draw inline, as in Jupyter
    cmd = [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", f"--nbval-cell-timeout={timeout}",
           "-p", "attention_course.nbval_report", "-p", "no:cacheprovider", "-q", "--rootdir", str(workdir),
           "-c", str(workdir / "pytest.ini"), str(path)]
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if not report.is_file():
        raise SystemExit(tr("nbval did not run (exit {status}):", status=done.returncode)
                         + f"\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return json.loads(report.read_text())["cells"]


def check(notebook: Path, reference: Path | None = None, timeout: int = 600) -> Result:
    """Re-run ``notebook`` and compare it with the reference outputs of its chapter."""
    learner = json.loads(Path(notebook).read_text())
    chapter = chapter_of(learner, notebook)
    ref = find_reference(chapter, reference)
    nb, missing = merged_notebook(learner, ref)
    code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
        verdicts = run_nbval(nb, Path(tmp), timeout)
    compared = sum(1 for c in code if c.get("execution_count") is not None
                   and "nbval-ignore-output" not in c["metadata"].get("tags", []))
    result = Result(chapter, compared, missing=missing)
    for v in verdicts:
        if v["passed"]:
            continue
        cell = code[v["cell"]]
        known = ref["cells"].get(cell.get("id"), {})
        result.findings.append(Finding(cell.get("id") or f"#{v['cell'] + 1}", _source(cell).split("\n", 1)[0],
                                       known.get("exercise"), v["kind"], v.get("expected", ""), v.get("got", ""),
                                       v.get("error") or v.get("message", "")))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attention_course check",
                                     description=tr("Re-run a chapter notebook and compare it with the reference "
                                                    "outputs."))
    parser.add_argument("notebook", type=Path,
                        help=tr("your chapter notebook (run and saved, or not: it is re-run)"))
    parser.add_argument("--reference", type=Path, default=None,
                        help=tr("reference outputs: a <chapter>.json or a folder of them (default: the kit's)"))
    parser.add_argument("--timeout", type=int, default=600, help=tr("seconds one cell may run (default 600)"))
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        parser.error(tr("no notebook {path}", path=args.notebook))
    result = check(args.notebook, args.reference, args.timeout)
    print(result.report(args.notebook.name))
    return 0 if result.passed else 1
