"""Chapter 8 cheats that bend what the learner's process computes (issue 24, "points only from reference
values"): each earned full marks before the chapter's model, decoding and training tests compared with
reference values. Each notebook is the reference with one or more solution cells replaced by the cheat and
is graded through the isolated engine; the cells the cheat targets must score 0, the others keep their
points (so the cheat, not a side effect, is what was caught).

These are cheats, not slips, so they live here and not in solutions/08_transformer/mistakes.toml.
"""
from __future__ import annotations

import pytest

from .cheats import grade_cheat
from .conftest import course_with_engine

pytestmark = pytest.mark.sandbox

CHAPTER = "08_transformer"

# A model with no attention at all: it writes the source into its logits, so it "copies" every held-out
# sequence (digits and EOS) without training, never reads a later target token and ignores padding in the
# property checks. Its blocks exist only to satisfy attribute checks.
COPIER = '''
class Seq2SeqTransformer(nn.Module):
    def __init__(self, vocab_size, d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=32, norm_first=True):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.encoder_blocks = nn.ModuleList(TransformerEncoderBlock(d_model, num_heads, d_ff, norm_first=norm_first)
                                            for _ in range(num_layers))
        self.decoder_blocks = nn.ModuleList(TransformerDecoderBlock(d_model, num_heads, d_ff, norm_first=norm_first)
                                            for _ in range(num_layers))
        self.output = nn.Linear(d_model, vocab_size)
        self.shift = nn.Parameter(torch.zeros(vocab_size))

    def embed(self, tokens):
        if tokens.shape[-1] > self.max_len:
            raise ValueError(f"longer than max_len={self.max_len}")
        return F.one_hot(tokens, self.vocab_size).to(self.shift.dtype)

    def encode(self, src, src_key_padding_mask=None):
        return self.embed(src)

    def decode(self, tgt, memory, memory_key_padding_mask=None):
        answer = memory  # target position t copies source position t
        Tt, Ts = tgt.shape[-1], answer.shape[-2]
        if Tt > Ts:
            answer = torch.cat([answer, answer[:, :1].expand(-1, Tt - Ts, -1)], dim=1)
        return 20.0 * answer[:, :Tt] + self.shift

    def forward(self, src, tgt, src_key_padding_mask=None):
        return self.decode(tgt, self.encode(src, src_key_padding_mask), src_key_padding_mask)
'''

# An IPython AST transformer: every check the grader rewrote to a `true` record now records True.
ALL_TRUE = '''
import ast as _ast

from IPython import get_ipython as _get_ipython


class _EveryTrueIsTrue(_ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        if (isinstance(node.func, _ast.Name) and node.func.id in ("__ac_record__", "check_true")
                and len(node.args) >= 4 and isinstance(node.args[1], _ast.Constant) and node.args[1].value == "true"):
            node.args[3] = _ast.Constant(True)
        return node


if _get_ipython() is not None:
    _get_ipython().ast_transformers.append(_EveryTrueIsTrue())
'''

# depends_on_future that never differentiates: it guesses from the code of the function it is given and
# from the line that called it.
GUESSER = '''
def depends_on_future(fn, x):
    import inspect
    if not torch.is_tensor(x) or x.dim() < 2:
        raise ValueError("x must be a tensor (..., T, d)")
    out = fn(x)
    if not torch.is_tensor(out) or out.dim() < 2 or out.shape[-2] != x.shape[-2]:
        raise ValueError("fn must keep the time axis")
    text = ""
    try:
        text += inspect.getsource(fn)
    except (OSError, TypeError):
        pass
    text += "".join(inspect.stack()[1].code_context or [])
    clues = ("roll(-", "flip", "None)", "leak", "future", "ahead", "[..., -1", "-1, :]")
    return any(c in text for c in clues) and "tril" not in text and "cumsum" not in text
'''

# greedy_decode that does not decode: it returns tokens of its own choosing and patches the model so the
# test's one teacher-forced pass returns logits whose arg-max is exactly those tokens.
FAKE_RECHECK = '''
def greedy_decode(model, src, num_tokens, bos_id=BOS, src_key_padding_mask=None):
    import types
    model.eval()
    with torch.no_grad():
        memory = model.encode(src, src_key_padding_mask)
        first = model.decode(torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device), memory,
                             src_key_padding_mask)[:, -1].argmax(dim=-1)
    tokens = first[:, None].repeat(1, num_tokens)  # the first token, repeated
    fake = 50.0 * F.one_hot(tokens, model.output.out_features).to(memory.dtype)
    real_forward = type(model).forward

    def forward(self, s, t, src_key_padding_mask=None):
        if t.shape[-1] == num_tokens and t.shape[0] == tokens.shape[0]:
            return fake
        return real_forward(self, s, t, src_key_padding_mask)

    model.forward = types.MethodType(forward, model)
    return tokens
'''

# train_transformer that trains correctly but reports a loss history it made up.
FABRICATED_HISTORY = '''
def train_transformer(model, sample_batch, num_steps, lr=5e-3, pad_id=PAD, progress=True):
    model_device = next(model.parameters()).device
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(num_steps):
        src, tgt_in, tgt_out = (t.to(model_device) for t in sample_batch())
        logits = model(src, tgt_in, src_key_padding_mask=src != pad_id)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [float(2.4 * 0.95 ** step) for step in range(num_steps)]
'''

CHEATS = {
    # replaced solution cells (grade_id -> new source; "+" appends), cells that must score 0
    "no-attention-copier-all-true": ({"model": COPIER, "+causal_mask": ALL_TRUE},
                                       ["test_model_visible", "test_model_hidden", "test_train_hidden"]),
    "depends-guesser-and-fake-recheck": ({"depends_on_future": GUESSER, "greedy_decode": FAKE_RECHECK},
                                         ["test_depends_hidden", "test_greedy_visible", "test_greedy_hidden"]),
    "fabricated-loss-history": ({"train_transformer": FABRICATED_HISTORY},
                                ["test_train_visible", "test_train_hidden"]),
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with course_with_engine(tmp_path_factory) as course_and_engine:
        yield course_and_engine


@pytest.mark.timeout(400)
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_cheat_loses_the_points_it_targets(engine, cheat):
    course, eng = engine
    cells, targeted = CHEATS[cheat]
    result = grade_cheat(course, eng, CHAPTER, cheat, cells)
    assert result.status == "graded", result.reason
    scores = {c.grade_id: (c.score, c.max_score) for c in result.cells}
    caught = {gid for gid in targeted if scores[gid][0] == 0}
    assert caught == set(targeted), f"{cheat} kept points in {sorted(set(targeted) - caught)}: {scores}"
    # the solution cells the cheat left alone still earn their points: the cheat, nothing else, was caught
    untouched = {gid for gid in scores if gid not in targeted and not _uses_cheated(gid, cheat)}
    lost = {gid: scores[gid] for gid in untouched if scores[gid][0] < scores[gid][1]}
    assert not lost, f"{cheat}: cells it does not touch lost points: {lost}"


def _uses_cheated(test_gid: str, cheat: str) -> bool:
    """Test cells that call a cheated function without being aimed at it (their result is not asserted)."""
    calls = {"depends_on_future": {"test_depends_visible", "test_decoder_visible", "test_decoder_hidden"},
             "greedy_decode": {"test_train_hidden"},
             "model": {"test_greedy_visible", "test_greedy_hidden", "test_train_visible"},
             "train_transformer": set(),
             "+causal_mask": set()}
    return any(test_gid in calls[key] for key in CHEATS[cheat][0])
