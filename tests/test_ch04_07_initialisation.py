"""Chapters 4-7: a correct module initialised differently from the reference still earns full marks.

The spec fixes no initialisation, so every graded check of a module must copy its parameters in or test
only what does not depend on them (issue 17, class 4). Each case below patches the reference module's
``__init__`` to re-initialise its parameters (torch's attention recipe of xavier weights and zero biases,
or small normal weights) and grades the result through the isolated engine.
"""
from __future__ import annotations

import pytest

from autograder import submissions
from autograder.course import Course

from .conftest import course_with_engine

pytestmark = pytest.mark.sandbox

COURSE = Course()

XAVIER_QKV = """self.attention_weights = None
        for lin in (self.W_q, self.W_k, self.W_v):  # re-initialised: xavier weights, zero biases
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)"""
NORMAL_QKV = """self.attention_weights = None
        for lin in (self.W_q, self.W_k, self.W_v):  # re-initialised: small normal weights and biases
            nn.init.normal_(lin.weight, std=0.02)
            if lin.bias is not None:
                nn.init.normal_(lin.bias, std=0.02)"""

CASES = {
    "ch4-xavier": ("04_self_attention", "self_attention_module", "self.attention_weights = None", XAVIER_QKV),
    "ch4-normal": ("04_self_attention", "self_attention_module", "self.attention_weights = None", NORMAL_QKV),
    "ch5-xavier": ("05_multi_head_attention", "multi_head_attention", "self.attention_weights = None",
                   XAVIER_QKV.replace("self.W_v)", "self.W_v, self.W_o)")),
    "ch5-normal": ("05_multi_head_attention", "multi_head_attention", "self.attention_weights = None",
                   NORMAL_QKV.replace("self.W_v)", "self.W_v, self.W_o)")),
    "ch6-learned-zeros": ("06_positional_encoding", "learned_positional_embedding",
                          "self.embedding = nn.Embedding(max_len, d_model)",
                          "self.embedding = nn.Embedding(max_len, d_model)\n"
                          "        nn.init.zeros_(self.embedding.weight)  # re-initialised: all zeros"),
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with course_with_engine(tmp_path_factory) as course_and_engine:
        yield course_and_engine


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(CASES))
def test_reinitialised_module_keeps_full_marks(engine, case):
    course, eng = engine
    chapter, cell, find, replace = CASES[case]
    # A find/replace patch of the reference, the same mechanism as a catalogued mistake, except that this
    # one is correct and must lose nothing.
    variant = submissions.Mistake(case, "re-initialised module", cell, find, replace, (), "")
    nb = submissions.with_mistake(course, chapter, variant)
    path = submissions.write_submission(course, f"variant-{case}", chapter, nb)
    result = eng.grade(chapter, path, f"variant-{case}")
    lost = {g: c["messages"] for g, c in result["cells"].items() if not c["passed"]}
    assert result["status"] == "graded", result["reason"]
    assert result["score"] == result["max_score"] > 0 and not lost, lost
