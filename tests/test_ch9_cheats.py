"""Chapter 9 cheats from issue 24's held-out examination, graded through the isolated engine: the memory
checks switched off from inside the kernel and the whole score matrix built only at sizes the in-kernel meter does
not watch lose the memory cell's points (the engine runs that cell under a memory limit the operating system
enforces: autograder/memory_budget.py); PyTorch's fused attention reached under a name built at run time does not
(a limit stated in autograder/TRUST.md, kept here as a strict xfail).

Each notebook is the reference with solution cells extended or replaced (as in tests/test_ch8_cheats.py). The
chapter's hidden tests change under their own owner, so these tests assert that the cheat loses points in the
cells it targets, not exact scores.
"""
from __future__ import annotations

import pytest

from .cheats import grade_cheat
from .conftest import course_with_engine

pytestmark = pytest.mark.sandbox

CHAPTER = "09_efficient_attention"

# Every in-kernel memory check switched off: the meter the tests use measures nothing, and an IPython AST
# transformer makes every `true` check record True. Then tiled_attention builds the whole (Tq, Tk) score matrix,
# but only at the sizes of the memory budget (the in-kernel meter watched smaller ones); below them it is the
# reference's own tiling, so every value check still passes.
METER_OFF_NAIVE_WHEN_LARGE = '''
import ast as _ast

from IPython import get_ipython as _get_ipython


class TensorMemoryMeter:  # the setup cell's meter, switched off
    largest, operators = 0, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _EveryTrueIsTrue(_ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        if (isinstance(node.func, _ast.Name) and node.func.id in ("__ac_record__", "check_true")
                and len(node.args) >= 4 and isinstance(node.args[1], _ast.Constant) and node.args[1].value == "true"):
            node.args[3] = _ast.Constant(True)
        return node


if _get_ipython() is not None:
    _get_ipython().ast_transformers.append(_EveryTrueIsTrue())

_tiled_by_the_book = tiled_attention


def tiled_attention(queries, keys, values, block_size=64, causal=False):
    Tq, Tk = queries.shape[-2], keys.shape[-2]
    if Tq * Tk < 2 ** 24:
        return _tiled_by_the_book(queries, keys, values, block_size=block_size, causal=causal)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., Tq, Tk): 256 MiB
    if causal:
        scores = scores.masked_fill(~top_left_causal_mask(Tq, Tk, device=scores.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ values, torch.logsumexp(scores, dim=-1)
'''

CHEATS = {
    # code appended to solution cells ("+grade_id" -> code), cells that must lose points
    "meter-off-naive-when-large": ({"+tiled_attention": METER_OFF_NAIVE_WHEN_LARGE}, ["test_tiled_memory_hidden"]),
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with course_with_engine(tmp_path_factory) as course_and_engine:
        yield course_and_engine


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_cheat_loses_the_points_it_targets(engine, cheat):
    course, eng = engine
    cells, targeted = CHEATS[cheat]
    result = grade_cheat(course, eng, CHAPTER, cheat, cells)
    assert result.status == "graded", result.reason
    kept = {gid: result.cell(gid).score for gid in targeted if result.cell(gid).score > 0}
    assert not kept, f"{cheat} kept points in {kept}"


# tiled_attention that is PyTorch's fused CPU attention, reached under a name built at run time (no source scan
# finds it), with the in-kernel checks switched off as above so "no call to PyTorch's fused attention" records True.
FUSED_UNDER_A_RUNTIME_NAME = METER_OFF_NAIVE_WHEN_LARGE.split("_tiled_by_the_book")[0] + '''
def tiled_attention(queries, keys, values, block_size=64, causal=False):
    op = getattr(torch.ops.aten, "_scaled_dot_product_" + "flash_attention_for_cpu")
    lead, d, dv = queries.shape[:-2], queries.shape[-1], values.shape[-1]
    q, k, v = (t.reshape(-1, 1, *t.shape[-2:]) for t in (queries, keys, values))
    v = F.pad(v, (0, max(0, d - dv)))
    q, k = F.pad(q, (0, max(0, dv - d))), F.pad(k, (0, max(0, dv - d)))
    out, lse = op(q, k, v, is_causal=causal, scale=d ** -0.5)[:2]
    return out[..., :dv].reshape(*lead, out.shape[-2], dv), lse.reshape(*lead, lse.shape[-1])
'''


@pytest.mark.timeout(600)
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="a limit autograder/TRUST.md states: the grader observes values and memory from "
                   "outside the learner's process, and PyTorch's fused CPU attention is right and fits the budget; "
                   "'no fused attention' is decided inside the learner's process, which the cheat controls")
def test_fused_attention_under_a_runtime_name_loses_the_memory_points(engine):
    """The held-out cheat "a forbidden library call reached under a name built at run time": it keeps
    test_tiled_memory_hidden's points (measured: 2 of 2). Strict: the day a mechanism closes it, this fails and
    TRUST.md's limit is to be removed."""
    course, eng = engine
    result = grade_cheat(course, eng, CHAPTER, "fused", {"+tiled_attention": FUSED_UNDER_A_RUNTIME_NAME})
    if result.status != "graded" or result.cell("test_tiled_memory_hidden") is None:  # not the expected failure
        pytest.fail(f"the cheat was not graded: {result.status} {result.reason}")
    assert result.cell("test_tiled_memory_hidden").score == 0
