"""The Chinese kit in a learner's hands (issue 45, "done when"): ``python -m autograder kit --lang zh`` installs in a
fresh ordinary account with no repository, its chapter 3 completed with the reference's code passes the self-check,
and the self-check and the checks speak Chinese there without being asked (the kit's recorded language), while
``ATTENTION_COURSE_LANG=en`` still switches a learner back to English.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest

from attention_course.cells import grade_id, is_solution
from autograder import kit
from autograder.course import Course

from .test_kit import GENERIC_ONE_THREAD, Learner

COURSE = Course()
CHAPTER = "03_scoring_functions"
WRONG_MASKED_SOFTMAX = '''def masked_softmax(scores, valid_lens=None, mask=None):
    """我的第一次尝试：对键做 softmax。"""
    return torch.softmax(scores, dim=-1)
'''
CHECK = ("import torch\nfrom attention_course.checks import Checks\n"
         "Checks('test_cell').shape('scores', torch.zeros(3, 2), (2, 3))\n")


def completed(nb: dict, wrong: dict[str, str] | None = None) -> dict:
    """The kit's chapter with the reference's code typed into every solution cell (without nbgrader's markers, as a
    learner's notebook has none), or the code of ``wrong`` for the cells it names."""
    source = json.loads(COURSE.source_notebook(CHAPTER).read_text())
    answers = {grade_id(c): "".join(c["source"]) for c in source["cells"] if is_solution(c)}
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        if is_solution(cell):
            code = (wrong or {}).get(grade_id(cell)) or answers[grade_id(cell)]
            cell["source"] = "\n".join(line for line in code.splitlines()
                                       if not re.search(r"### (BEGIN|END) SOLUTION", line))
    return nb


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
    """A fresh account holding the Chinese kit of chapter 3 (nothing else), installed as its README says."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a fresh ordinary account (useradd); CI runs as root")
    built = kit.build_kit(COURSE, tmp_path_factory.mktemp("zhkit") / "attention-kit", torch_index=None,
                          chapters=[CHAPTER], lang="zh_CN")
    name = f"zhlearner{os.getpid()}"
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
    try:
        who = Learner(name)
        shutil.copytree(built, who.kit)
        subprocess.run(["chown", "-R", f"{name}:{name}", str(who.kit)], check=True)
        done = who.run("python3 -m venv .venv && .venv/bin/pip install --quiet -r requirements.txt")
        assert done.returncode == 0, f"installing the Chinese kit failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        yield who
    finally:
        subprocess.run(["userdel", "-r", name], capture_output=True)


def _chapter(learner: Learner) -> dict:
    return json.loads((learner.kit / "chapters" / CHAPTER / f"{CHAPTER}.ipynb").read_text(encoding="utf-8"))


@pytest.mark.services
@pytest.mark.timeout(1800)
def test_the_chinese_kit_completes_chapter_3_and_its_self_check_passes_in_chinese(learner):
    learner.write("completed-03.ipynb", completed(_chapter(learner)))
    done = learner.run(".venv/bin/python -m attention_course check completed-03.ipynb", env=GENERIC_ONE_THREAD)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "自检通过：completed-03.ipynb 在全部" in done.stdout and "self-check passed" not in out, out[-4000:]


@pytest.mark.services
@pytest.mark.timeout(1800)
def test_the_chinese_kits_self_check_names_a_wrong_exercise_in_chinese(learner):
    learner.write("wrong-03.ipynb", completed(_chapter(learner), {"masked_softmax": WRONG_MASKED_SOFTMAX}))
    done = learner.run(".venv/bin/python -m attention_course check wrong-03.ipynb", env=GENERIC_ONE_THREAD)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    assert "自检未通过：wrong-03.ipynb 中有" in done.stdout, out[-4000:]
    assert "请看：练习 1" in done.stdout, out[-4000:]  # a heading still in English is named in Chinese too
    assert "FAIL" not in done.stdout and "self-check FAILED" not in done.stdout, out[-4000:]


@pytest.mark.services
@pytest.mark.timeout(1800)
def test_checks_speak_the_kits_language_unless_the_learner_asks_for_english(learner):
    script = f".venv/bin/python -c {shlex.quote(CHECK)}"
    chinese = learner.run(script, env=GENERIC_ONE_THREAD)
    assert chinese.returncode != 0 and "scores：形状为 (2, 3)：结果的形状是 (3, 2)，应为 (2, 3)" in chinese.stderr, chinese.stderr[-2000:]
    english = learner.run(script, env={**GENERIC_ONE_THREAD, "ATTENTION_COURSE_LANG": "en"})
    assert "scores: shape is (2, 3): result has shape (3, 2) but should have shape (2, 3)" in english.stderr, \
        english.stderr[-2000:]
