"""The learner's self-check (``python -m attention_course check``) compares with the reference, not with the
learner's own saved outputs (issue 25).

A notebook that has been run and saved stores its own outputs; ``pytest --nbval`` on it compares the learner with
themselves. The self-check runs the learner's code under nbval against the reference outputs of the release:
a wrong answer saved with its own outputs fails, naming the cell, both texts and the exercise; a correct notebook
saved passes; both on torch's generic kernels with one thread (as on an old CPU).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from attention_course import selfcheck
from attention_course.cells import grade_id, is_solution
from autograder.course import Course

COURSE = Course()
CHAPTER = "03_scoring_functions"
GENERIC_ONE_THREAD = {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _release() -> dict:
    return json.loads(COURSE.release_notebook(CHAPTER).read_text())


def _answered(skip: str | None = None) -> dict:
    """The release with the reference's answers typed in (without nbgrader's markers), except cell ``skip``."""
    source = json.loads(COURSE.source_notebook(CHAPTER).read_text())
    answers = {grade_id(c): "".join(c["source"]) for c in source["cells"] if is_solution(c)}
    nb = _release()
    for cell in nb["cells"]:
        cell["source"] = "".join(cell["source"])  # one string, as Jupyter hands it to the kernel
        if is_solution(cell) and grade_id(cell) != skip:
            cell["source"] = "\n".join(line for line in answers[grade_id(cell)].splitlines()
                                       if not re.search(r"### (BEGIN|END) SOLUTION", line))
    return nb


# -- pure parts --------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_merged_notebook_has_the_learners_code_and_the_references_outputs():
    reference = selfcheck.reference_outputs(_release())
    learner = _answered()
    for cell in learner["cells"]:
        if cell["cell_type"] == "code":  # as saved after a run: the learner's own outputs and tags
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "mine\n"}]
            cell["execution_count"] = 99
            cell["metadata"]["tags"] = ["nbval-ignore-output"]
    learner["cells"].append({"cell_type": "code", "id": "my-scratch", "metadata": {}, "source": "print(1)",
                             "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}],
                             "execution_count": 100})
    dropped = next(c["id"] for c in learner["cells"] if c["cell_type"] == "code" and c["id"].startswith("code-"))
    learner["cells"] = [c for c in learner["cells"] if c["id"] != dropped]
    merged, missing = selfcheck.merged_notebook(learner, reference)
    assert missing == [dropped]
    for cell in merged["cells"]:
        if cell["cell_type"] != "code":
            continue
        if cell["id"] == "my-scratch":  # runs, is not compared
            assert cell["outputs"] == [] and cell["execution_count"] is None
            continue
        ref = reference["cells"][cell["id"]]
        assert cell["outputs"] == ref["outputs"] and cell["execution_count"] == ref["execution_count"]
        assert cell["metadata"]["tags"] == ref["metadata"].get("tags", [])
        assert cell["source"] == next(c["source"] for c in learner["cells"] if c["id"] == cell["id"])


@pytest.mark.unit
def test_every_cell_points_at_the_exercise_to_look_at():
    where = selfcheck.exercises(_release())
    assert where["test-masked-softmax-visible"] == "Exercise 1: `masked_softmax`"
    assert where["masked-softmax"] == "Exercise 1: `masked_softmax`"
    # The worked example's printout sits under Exercise 4 and uses scaled_dot_product_attention.
    assert where["code-025"] == "Exercise 4: `scaled_dot_product_attention`"
    # The heatmap demo draws masked_softmax's weights.
    assert where["code-009"] == "Exercise 1: `masked_softmax`"


@pytest.mark.unit
def test_the_reference_outputs_keep_every_text_and_drop_pictures():
    reference = selfcheck.reference_outputs(_release())
    assert reference["chapter"] == CHAPTER
    for cell in _release()["cells"]:
        if cell["cell_type"] != "code":
            continue
        kept = reference["cells"][cell["id"]]["outputs"]
        assert len(kept) == len(cell["outputs"])
        for mine, theirs in zip(kept, cell["outputs"]):
            assert not any(k.startswith("image/") for k in mine.get("data", {}))
            assert mine.get("text") == theirs.get("text")
            assert mine.get("data", {}).get("text/plain") == theirs.get("data", {}).get("text/plain")


# -- the self-check on saved notebooks ------------------------------------------------------------------------------


def _run_all_and_save(nb: dict, path) -> None:
    """What Jupyter's "run all" then "save" leaves: the learner's own outputs stored, errors included."""
    from nbclient import NotebookClient

    node = nbformat.reads(json.dumps(nb), as_version=4)
    env = dict(os.environ, ATTENTION_COURSE_DEVICE="cpu", **GENERIC_ONE_THREAD)
    env.pop("ATTENTION_COURSE_GRADING", None)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(node, timeout=600, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    nbformat.write(node, path)


def _check(path, reference) -> subprocess.CompletedProcess:
    env = dict(os.environ, **GENERIC_ONE_THREAD)
    return subprocess.run([sys.executable, "-m", "attention_course", "check", str(path), "--reference", str(reference)],
                          cwd=path.parent, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory):
    """The reference outputs as the kit ships them (here from the committed release)."""
    folder = tmp_path_factory.mktemp("reference")
    (folder / f"{CHAPTER}.json").write_text(json.dumps(selfcheck.reference_outputs(_release())))
    return folder


WRONG_SDPA_PRINTOUT = 'print("weights =\\n", example_weights.numpy().round(4))'


@pytest.mark.notebooks
@pytest.mark.timeout(900)
def test_a_wrong_answer_saved_with_its_own_outputs_fails_naming_the_cell(tmp_path, reference_dir):
    """masked_softmax that ignores the mask (it raises nothing) and a printout the learner changed: stored after a
    run, each compares equal with itself; against the reference both cells fail, named with the exercise."""
    nb = _answered(skip="masked_softmax")
    for cell in nb["cells"]:
        if grade_id(cell) == "masked_softmax":
            cell["source"] = ("def masked_softmax(scores, valid_lens=None, mask=None):\n"
                              "    return torch.softmax(scores, dim=-1)\n")
        if cell["id"] == "code-025":
            assert WRONG_SDPA_PRINTOUT in cell["source"]
            cell["source"] = cell["source"].replace(WRONG_SDPA_PRINTOUT, WRONG_SDPA_PRINTOUT.replace("round(4)", "round(2)"))
    path = tmp_path / f"{CHAPTER}.ipynb"
    _run_all_and_save(nb, path)
    done = _check(path, reference_dir)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    out = done.stdout
    assert "FAIL cell test-masked-softmax-visible" in out and "look at: Exercise 1: `masked_softmax`" in out, out
    assert "FAIL cell code-025" in out and "look at: Exercise 4: `scaled_dot_product_attention`" in out, out
    printed = out.split("FAIL cell code-025", 1)[1]
    assert "the reference printed:" in printed and "[[0.3722 0.3524 0.2755]" in printed  # the reference's text
    assert "your notebook printed:" in printed and "[[0.37 0.35 0.28]" in printed  # and the learner's
    assert out.rstrip().splitlines()[-1].startswith("self-check FAILED")


@pytest.mark.notebooks
@pytest.mark.timeout(900)
def test_a_correct_notebook_saved_passes(tmp_path, reference_dir):
    path = tmp_path / "my copy of chapter 3.ipynb"  # any file name: the chapter is in the notebook's metadata
    _run_all_and_save(_answered(), path)
    done = _check(path, reference_dir)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "self-check passed" in done.stdout
