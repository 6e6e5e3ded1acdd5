"""Reference values for checks decided inside a kernel, and the reference run on other devices.

There is one reference run per chapter: the grading engine's *reference profile*
(:meth:`autograder.isolation.Engine.profile`), which runs the setup, solution and graded test cells of
``solutions/<chapter>/<chapter>.ipynb`` in the sandbox, each test cell seeded as :class:`.checks.Checks` seeds it
(:func:`.cells.cell_seed`), and caches every check's record in a profile file. A ``matches_reference`` check
decided inside a kernel (stock ``nbgrader autograde``) looks its value up there (:func:`reference_value`).

This module owns the profile *file format* (:func:`read_profile`, :func:`reference_table`; the grader reads its
profiles with them too) but not where profiles live or when they are stale: that is the grader's business. The
kernel asks the grader, by running its command ``python -m autograder profile CHAPTER --course ROOT`` (which
builds the profile when missing and prints its path), so this package never imports ``autograder`` and ships
alone in the learner kit. A learner's kernel has no grader and no solutions; a hidden check there says so.

:func:`execute_reference` runs the same cells in a plain kernel on another device (``meta``, ``cuda``): the
course's device audit (tests/test_devices.py) compares those runs with the profile; they never supply
expected values.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .cells import is_graded_run, is_graded_test, records_in
from .encoding import decode
from .language import tr


def find_course_root(start: Path | None = None) -> Path | None:
    env = os.environ.get("ATTENTION_COURSE_ROOT")
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "autograder" / "nbgrader_config.py").is_file() and (candidate / "solutions").is_dir():
            return candidate
    return None


def solution_notebook(root: Path, chapter: str) -> Path:
    return root / "solutions" / chapter / f"{chapter}.ipynb"


def execute_reference(notebook: Path, timeout: int = 600, device: str = "cpu"):
    """Execute the reference's setup, solution and test cells in reference mode; return the notebook.

    ``device`` is where the tests put their inputs: the expectations are computed on the CPU; other
    devices (``cuda``, ``meta``) are used by the course's own device tests.
    """
    env = {"ATTENTION_COURSE_GRADING": "reference", "ATTENTION_COURSE_DEVICE": device}
    return execute_notebook(reference_cells(notebook), env, timeout)


def reference_cells(notebook: Path):
    """The notebook with only what a reference run executes: setup, solution and graded test cells."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    nb.cells = [c for c in nb.cells if is_graded_run(c)]
    return nb


def execute_notebook(nb, env: dict, timeout: int = 600, record_timing: bool = True):
    """Run ``nb`` in place in a fresh kernel, in a scratch folder, with ``env`` set for the kernel."""
    from nbclient import NotebookClient

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        with tempfile.TemporaryDirectory() as scratch:
            # killed once its outputs are in: a graceful shutdown waits for torch's teardown (about 0.8 s)
            NotebookClient(nb, timeout=timeout, kernel_name="python3", shutdown_kernel="immediate",
                           record_timing=record_timing, resources={"metadata": {"path": scratch}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def records_table(nb) -> dict:
    """``{"cell/check": record}`` for every check recorded by the graded test cells of ``nb``."""
    table = {}
    for cell in nb.cells:
        if is_graded_test(cell):
            for rec in records_in(cell):
                table[f"{rec['cell']}/{rec['check']}"] = rec
    return table


def run_reference(notebook: Path, timeout: int = 600, device: str = "cpu") -> dict:
    """The reference's records, ``{"cell/check": record}``; any error in the run raises."""
    return records_table(execute_reference(notebook, timeout, device))


def profile_digest(path: Path) -> str:
    """The digest a profile file is named by (``isolation-<chapter>-<digest>.json``) and must carry inside."""
    return Path(path).stem.rsplit("-", 1)[1]


def read_profile(path: Path) -> dict | None:
    """The profile stored at ``path``, or None when it is missing, unreadable or not the file its name promises
    (a half-written or renamed file carries another digest)."""
    try:
        prof = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return prof if isinstance(prof, dict) and prof.get("digest") == profile_digest(path) else None


def reference_table(prof: dict) -> dict:
    """The profile's reference run (the grading seed) as ``{"cell/check": record}``: the reference values that
    checks decided inside a kernel look up. ``form`` says whether the learner's value must have the form of the
    reference's (every check but those at a self-consistency site, whose expected value is the learner's own:
    the trusted side's rule, autograder/trusted.py ``decide_cell``)."""
    return {c["key"]: {"cell": gid, "check": c["check"], "kind": c["kind"], "params": c["params"], "got": c["ref_got"],
                       "form": c.get("site") not in spec.get("keep_want_sites", [])}
            for gid, spec in prof["cells"].items() for c in spec["checks"]}


def drawn_seeds(prof: dict) -> dict[str, int]:
    """``{grade_id: seed}`` for the test cells whose inputs the grader drew when it built the profile (a memory
    budget's cell: autograder/memory_budget.py); the other cells start from :func:`.cells.cell_seed`."""
    return {gid: spec["seed"] for gid, spec in prof["cells"].items()
            if isinstance(spec.get("seed"), int) and not isinstance(spec.get("seed"), bool)}


def load_expected(root: Path, chapter: str) -> dict:
    """``{"cell/check": record}`` of the chapter's reference run, from its reference profile."""
    return reference_table(load_profile(root, chapter))


def load_profile(root: Path, chapter: str) -> dict:
    """The chapter's reference profile.

    The grader's command finds the profile for the current source (building it when missing, in its own
    interpreter, so nothing of the calling kernel leaks into the reference run) and prints its path."""
    done = subprocess.run([sys.executable, "-m", "autograder", "profile", chapter, "--course", str(root)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = [line.strip() for line in done.stdout.splitlines() if line.strip().endswith(".json")]
    prof = read_profile(Path(printed[-1])) if done.returncode == 0 and printed else None
    if prof is None:
        tail = "\n".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-15:])
        raise RuntimeError(f"the reference run of {chapter} failed:\n{tail}")
    return prof


_loaded: dict[str, dict] = {}
_seeds: dict[str, dict[str, int]] = {}


def _load(chapter: str | None) -> None:
    """Load the chapter's reference table and drawn seeds once, or RuntimeError saying why not."""
    if chapter is None:
        raise RuntimeError(tr("the setup cell has not run: run start_chapter(...) first"))
    if chapter not in _loaded:
        root = find_course_root()
        if root is None or not solution_notebook(root, chapter).is_file():
            raise RuntimeError(tr("this is a hidden grading check: it needs the reference solutions, which only the "
                                  "grader has"))
        prof = load_profile(root, chapter)
        _loaded[chapter], _seeds[chapter] = reference_table(prof), drawn_seeds(prof)


def drawn_seed(chapter: str | None, cell_id: str) -> int | None:
    """The seed the grader drew for this test cell's inputs when it built the reference profile, or None (the
    cell starts from its own seed, or this kernel has no grader)."""
    try:
        _load(chapter)
    except RuntimeError:
        return None
    return _seeds.get(chapter, {}).get(cell_id)


def _reference_record(chapter: str | None, cell_id: str, check_id: str) -> dict:
    """The reference run's record of one check (its chapter's table loaded once), or RuntimeError saying why not."""
    _load(chapter)
    rec = _loaded[chapter].get(f"{cell_id}/{check_id}")
    if rec is None:
        raise RuntimeError(f"no reference record for check {cell_id}/{check_id}")
    return rec


def reference_value(chapter: str | None, cell_id: str, check_id: str):
    """The reference's decoded value for one check, for deciding it inside a kernel."""
    return decode(_reference_record(chapter, cell_id, check_id)["got"])


def reference_form(chapter: str | None, cell_id: str, check_id: str, kind: str | None = None):
    """The reference's decoded value for one check of ``kind``, as the form a learner's value must have (see
    :mod:`.verdicts`, "The form rule"), or None where there is none to hold it to: a kernel without the
    solutions (a learner's), a self-consistency site, a check the reference run did not record, or one the
    reference recorded as another kind (the grader rewrites ``true(f(x) == 3)`` to ``equals(f(x))``, so the profile
    holds the number where stock nbgrader's unrewritten cell checks a bool). Stock ``nbgrader autograde`` asks it
    for every check (:class:`.checks.Checks`), so it refuses what ``grade`` refuses."""
    try:
        rec = _reference_record(chapter, cell_id, check_id)
    except RuntimeError:
        return None
    if not rec.get("form", True) or (kind is not None and rec.get("kind") != kind):
        return None
    return decode(rec["got"])


def reference_expected(chapter: str | None, cell_id: str, check_id: str, kind: str, expected: str):
    """The reference run's expected value (the ``expected`` parameter of a check of ``kind``, still encoded), which
    the trusted side decides the check with, or None where the kernel's own expected value stands: a kernel without
    the solutions, a self-consistency site (the trusted side keeps the learner's there too), a check the reference
    did not record or recorded as another kind. Stock ``nbgrader autograde`` decides with it
    (:class:`.checks.Checks`): a test whose expected value calls the learner's code (``out = block(x)`` against the
    same block fed through a cache) is then held to the reference's value under both graders, where stock used to
    hold it to the learner's own, so a mistake upstream within the visible checks' tolerance cost points under
    ``grade`` only (issue 43: chapter 10's ``rmsnorm-eps-outside-root``, 25 under stock and 23 under ``grade``)."""
    try:
        rec = _reference_record(chapter, cell_id, check_id)
    except RuntimeError:
        return None
    if not rec.get("form", True) or rec.get("kind") != kind:
        return None
    return rec["params"].get(expected)
