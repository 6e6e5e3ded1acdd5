"""The mutation score (issue 26): the generator makes the realistic slips it names, each mutant is valid Python
changed in exactly one place, and a fixed, seeded sample of every chapter's mutants loses points under the
isolated engine (or is a documented equivalent). The whole run is ``python -m autograder mutants`` (its
figures are in docs/mutants.md); this file keeps it honest in the suite.
"""
from __future__ import annotations

import ast
import functools

import pytest

from autograder import mutants
from autograder.course import Course

COURSE = Course()
CHAPTERS = COURSE.chapters()


def changes(source: str) -> set[tuple[str, str, str]]:
    """{(operator, before, after)} of every mutant of ``source``."""
    return {(m.operator, m.before, m.after) for m in mutants.mutate_source(source)}


@pytest.mark.unit
@pytest.mark.parametrize("source,expected", [
    ("y = a + b * c", {("arith", "a + b * c", "a - b * c"), ("arith", "b * c", "b / c")}),
    ("y = q @ k", {("arith", "q @ k", "q * k")}),
    ("y = a < b", {("compare", "a < b", "a <= b")}),
    ("y = x if m is None else z", {("compare", "m is None", "m is not None")}),
    ("y = x[:n]", {("bounds", ":n", ":n + 1")}),
    ("y = x[1:-1]", {("bounds", "1:-1", "2:-1"), ("bounds", "1:-1", "1:-2")}),
    ("for i in range(n):\n    pass", {("bounds", "range(n)", "range(n + 1)")}),
    ("y = torch.tril(m)", {("bounds", "torch.tril(m)", "torch.tril(m, diagonal=1)"),
                           ("bounds", "torch.tril(m)", "torch.tril(m, diagonal=-1)")}),
    ("y = m.triu(diagonal=1)", {("bounds", "m.triu(diagonal=1)", "m.triu(diagonal=2)"),
                                ("bounds", "m.triu(diagonal=1)", "m.triu(diagonal=0)")}),
    ("y = local(x, window=w)", {("bounds", "local(x, window=w)", "local(x, window=w + 1)"),
                                ("bounds", "local(x, window=w)", "local(x, window=w - 1)")}),
    ("y = x.softmax(dim=-1)", {("dim", "x.softmax(dim=-1)", "x.softmax(dim=-2)")}),
    ("y = x.sum(0)", {("dim", "x.sum(0)", "x.sum(1)")}),
    ("n = x.shape[-1]", {("dim", "x.shape[-1]", "x.shape[-2]")}),
    ("y = x.transpose(-2, -1)", {("drop", "x.transpose(-2, -1)", "x")}),  # its dims swapped: the same call
    ("y = s.masked_fill(m, float('-inf'))", {("constant", "float('-inf')", "0.0"),
                                            ("drop", "s.masked_fill(m, float('-inf'))", "s"),
                                            ("swap", "s.masked_fill(m, float('-inf'))",
                                             "s.masked_fill(float('-inf'), m)")}),
    ("y = x + 1e-06", {("arith", "x + 1e-06", "x - 1e-06"), ("constant", "1e-06", "0.0")}),
    ("y = 0.5 * x", {("arith", "0.5 * x", "0.5 / x"), ("constant", "0.5", "1.0")}),
    ("k = 0", {("constant", "0", "1")}),
    ("y = s / math.sqrt(d)", {("arith", "s / math.sqrt(d)", "s * math.sqrt(d)"),
                              ("scale", "s / math.sqrt(d)", "s")}),
    ("y = x.contiguous()", {("drop", "x.contiguous()", "x")}),
    ("y = x.to(device)", {("drop-device", "x.to(device)", "x")}),
    ("y = F.dropout(x, p, training=self.training)",
     {("drop", "F.dropout(x, p, training=self.training)", "x"),
      ("drop", "F.dropout(x, p, training=self.training)", "F.dropout(x, p)"),
      ("swap", "F.dropout(x, p, training=self.training)", "F.dropout(p, x, training=self.training)")}),
    ("y = torch.maximum(a, b)", set()),  # symmetric: swapping its arguments changes nothing
])
def test_each_operator_makes_its_slip(source, expected):
    assert changes(source) == expected


@pytest.mark.unit
def test_no_grad_is_dropped_from_a_block_and_a_decorator():
    block = "def f(m, x):\n    with torch.no_grad():\n        y = m(x)\n    return y\n"
    (only,) = mutants.mutate_source(block)
    assert (only.operator, only.function) == ("drop", "f")
    assert "no_grad" not in only.source and "y = m(x)" in only.source
    decorated = "@torch.no_grad()\ndef g(m, x):\n    return m(x)\n"
    (only,) = mutants.mutate_source(decorated)
    assert only.operator == "drop" and only.source == "def g(m, x):\n    return m(x)\n"


@pytest.mark.unit
def test_a_mask_or_scale_line_is_deleted_but_a_first_assignment_is_not():
    source = "def f(s, m, d):\n    w = s\n    w = w.masked_fill(m, 0)\n    w /= d\n    return w\n"
    deleted = {m.before for m in mutants.mutate_source(source) if m.operator == "delete"}
    assert deleted == {"w = w.masked_fill(m, 0)", "w /= d"}


@pytest.mark.unit
def test_only_solution_code_is_mutated_and_guards_docstrings_and_comments_are_kept():
    source = ('def f(x, n):\n    """Doc: 1 + 2."""\n    k = n + 1\n    ### BEGIN SOLUTION\n'
              '    if x.dim() < 2:\n        raise ValueError("x < 2")\n'
              '    return x[:k] * 2.0  # the comment stays\n    ### END SOLUTION\n')
    found = mutants.mutate_source(source, "ch", "cell")
    assert {m.line for m in found} == {7}, "only the solution line, not the guard, docstring or the setup line"
    for m in found:
        assert "# the comment stays" in m.source and '"""Doc: 1 + 2."""' in m.source
        assert (m.chapter, m.cell, m.function) == ("ch", "cell", "f")
        body = m.diff().splitlines()[2:]  # below the two file headers
        assert sum(x.startswith("-") for x in body) == 1 and sum(x.startswith("+") for x in body) == 1


@pytest.mark.unit
def test_methods_are_attributed_to_their_class():
    source = "class A:\n    def forward(self, x):\n        return x + 1\n"
    assert {m.function for m in mutants.mutate_source(source)} == {"A.forward"}


@pytest.mark.unit
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_mutant_of_a_chapter_compiles_and_changes_one_node(chapter):
    found = mutants.generate(COURSE, chapter)
    assert found, f"{chapter} has no mutant"
    assert len({m.id for m in found}) == len(found), "mutant ids must be unique"
    for m in found:
        compile(m.source, m.id, "exec")
        assert m.source != m.reference and ast.dump(ast.parse(m.source)) != ast.dump(ast.parse(m.reference))
        assert m.operator in mutants.OPERATORS or m.operator == "drop-device"


def _m(cell: str, function: str = "f", source: str = "x = 1", operator: str = "arith") -> mutants.Mutant:
    return mutants.Mutant("ch", cell, function, operator, 1, "a", "b", source, "x = 0")


@pytest.mark.unit
def test_equivalents_are_not_counted_as_survivors(monkeypatch):
    kept, alike, device = _m("c", source="x = 2"), _m("c", source="x = 3"), _m("c", source="x = 4",
                                                                               operator="drop-device")
    monkeypatch.setitem(mutants.EQUIVALENT, alike.id, "no output can differ: proven in the test")
    graded = {kept.id: {"status": "killed"}, alike.id: {"status": "survived"}}
    verdicts = mutants.classified([kept, alike, device], graded)
    assert [verdicts[m.id]["status"] for m in (kept, alike, device)] == ["killed", "equivalent", "equivalent"]
    row = mutants.tally([kept, alike, device], verdicts)[("c", "f")]
    assert row == {"mutants": 3, "killed": 1, "survived": 0, "equivalent": 2}
    assert mutants.score(row) == 1.0
    with pytest.raises(ValueError, match="documented as equivalent but loses points"):
        mutants.classified([alike], {alike.id: {"status": "killed"}})


@pytest.mark.unit
def test_packing_keeps_mutants_of_one_cell_or_of_cells_that_reach_each_other_apart():
    a1, a2, b1, c1 = _m("a", source="x = 2"), _m("a", source="x = 3"), _m("b"), _m("c")
    own = {"a": ["ta"], "b": ["tb"], "c": ["tc"]}
    reach = {"ta": {"a"}, "tb": {"b"}, "tc": {"c", "a"}}  # c's tests call a's code
    bins = mutants.pack([a1, a2, b1, c1], own, reach)
    assert sorted(m.source for b in bins for m in b) == sorted(m.source for m in (a1, a2, b1, c1))
    for b in bins:
        cells = [m.cell for m in b]
        assert len(cells) == len(set(cells))
        assert not {"a", "c"} <= set(cells)
    assert len(bins) == 3  # a's two mutants and c's never share: b rides along with one of them


# -- the seeded sample, graded ------------------------------------------------------------------------------
SEED = 26
# Coverage decision (issue 44, the suite's 12 minutes): one mutant per chapter, not two. A chapter's grading is a
# control (the reference laid out for mutants) plus one grading per packed bin: two mutants made 19 bins over the 11
# chapters, one makes 11 (30 gradings down to 22). What remains still proves the claim in the suite: every chapter's
# mutants are graded through the engine, killed or a documented equivalent, with a control that keeps its points.
# Given up: the second mutant of each chapter; a survivor among the rest is what `python -m autograder mutants`
# (every mutant, run per chapter by maintainers; figures in docs/mutants.md) catches.
PER_CHAPTER = 1
# Every mutant the seed draws must be killed or a documented equivalent (no chapter has open survivors).


@pytest.mark.sandbox
@pytest.mark.timeout(600)  # 22 s on an idle 2-core machine, 259 s under a load of ~15: room for a loaded machine
def test_a_seeded_sample_of_every_chapters_mutants_loses_points(tmp_path_factory):
    from .conftest import course_with_engine

    with course_with_engine(tmp_path_factory) as (course, engine):
        for chapter in CHAPTERS:
            candidates = mutants.generate(course, chapter)
            picked = mutants.sample(candidates, PER_CHAPTER, SEED)
            verdicts = mutants.classified(picked, mutants.grade_mutants(course, chapter, picked, engine,
                                                                        log=lambda _: None))
            alive = [m.diff() for m in picked if verdicts[m.id]["status"] == "survived"]
            assert not alive, f"{chapter}: mutants that keep full marks:\n" + "\n".join(alive)


# -- documented equivalents: identical outputs on every edge case their docstring allows -------------------------


def _same(a, b, rtol: float = 0.0) -> bool:
    """Bit-identical results (NaN where the other has NaN), through tuples, lists and modules' parameters; with
    ``rtol``, equal to that relative tolerance (for an equivalent that only reorders a floating-point sum)."""
    import math

    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and bool(
            torch.allclose(a, b, rtol=rtol, atol=0.0, equal_nan=True))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y, rtol) for x, y in zip(a, b))
    if hasattr(a, "state_dict"):
        sa, sb = a.state_dict(), b.state_dict()
        return sa.keys() == sb.keys() and all(_same(sa[k], sb[k], rtol) for k in sa)
    if isinstance(a, float) and type(b) is float:
        return math.isclose(a, b, rel_tol=rtol, abs_tol=0.0) if rtol else a == b
    return type(a) is type(b) and a == b


def _probe_masked_softmax(ns):
    import torch

    g = torch.Generator().manual_seed(1)
    f = ns["masked_softmax"]
    for shape in [(1, 1), (1, 5), (3, 4), (2, 3, 5), (2, 2, 3, 6)]:
        for dtype in (torch.float16, torch.float32, torch.float64):
            for scale in (0.0, 1e-3, 1.0, 30.0, 1e4):
                s = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
                yield f(s)
                yield f(s, torch.randint(0, shape[-1] + 1, shape[:-2], generator=g))
                yield f(s, torch.randint(0, shape[-1] + 1, shape[:-1], generator=g))
                yield f(s, torch.zeros(shape[:-1], dtype=torch.long))  # every row empty
                yield f(s, torch.ones(shape[:-1], dtype=torch.long))  # one key each: a total of exactly 1
                yield f(s, mask=torch.rand(shape, generator=g) > 0.5)
                yield f(s, mask=torch.zeros(shape, dtype=torch.bool))
        ties = torch.zeros(shape, dtype=torch.float64)
        yield f(ties)
        special = torch.randn(shape, generator=g, dtype=torch.float64)
        special.view(-1)[0] = float("-inf")
        yield f(special)
        yield f(torch.full(shape, float("-inf")))
        yield f(torch.full(shape, -1e308, dtype=torch.float64))


def _probe_loops(ns):
    import torch

    g = torch.Generator().manual_seed(2)
    for T, d_in, d_k, d_v in [(1, 1, 1, 1), (1, 3, 2, 2), (4, 3, 2, 5), (6, 2, 4, 3)]:
        for dtype in (torch.float32, torch.float64):
            for scale in (0.0, 1.0, 20.0):
                r = lambda *s: torch.randn(*s, generator=g, dtype=dtype) * scale  # noqa: E731, B023
                yield ns["self_attention_loops"](r(T, d_in), r(d_in, d_k), r(d_in, d_k), r(d_in, d_v))


def _probe_self_attention(ns):
    import torch

    g = torch.Generator().manual_seed(3)
    for lead, T, d_in, d_out, dtype in [((), 1, 2, 3, torch.float64), ((2,), 4, 3, 5, torch.float32),
                                        ((3, 2), 5, 4, 2, torch.float64)]:
        torch.manual_seed(4)
        layer = ns["SelfAttention"](d_in, d_out).to(dtype)
        x = torch.randn(*lead, T, d_in, generator=g, dtype=dtype)
        with torch.no_grad():
            yield layer(x)
            for mask_shape in [(T, T), (1, T), (T, 1), (*lead, T, T), (*lead[-1:], 1, T)]:
                mask = torch.rand(mask_shape, generator=g) > 0.4
                yield layer(x, mask)
                yield layer.last_weights
                yield layer(x, torch.zeros(mask_shape, dtype=torch.bool))
                yield layer(x, torch.ones(mask_shape, dtype=torch.bool))


PROBES = {"masked_softmax:44:constant:d14a9f54ad": ("03_scoring_functions", _probe_masked_softmax),
          "self_attention_loops:38:swap:bb56c20876": ("04_self_attention", _probe_loops),
          "self_attention_module:31:delete:9461fb0ef9": ("04_self_attention", _probe_self_attention)}


# Chapter 9: a loop bound or a tile condition that only adds empty blocks, fully masked tiles or masks with
# nothing to hide. The probes cover every shape relation the docstrings allow (block sizes that divide the
# lengths and that do not, a block larger than T, one query or one key, Tq < Tk and Tq > Tk), causal or not.
def _ch9_cases():
    import torch

    for lead, Tq, Tk, d, dv in [((), 1, 1, 2, 3), ((1,), 4, 4, 3, 2), ((2,), 8, 8, 4, 4), ((2, 2), 6, 9, 3, 5),
                                ((1,), 9, 6, 5, 3), ((1,), 12, 4, 2, 2), ((2,), 1, 7, 4, 3), ((1,), 7, 1, 3, 2)]:
        for b in sorted({1, 2, 3, 4, max(Tq, Tk), max(Tq, Tk) + 2}):
            for causal in (False, True):
                for dtype, scale in ((torch.float64, 1.0), (torch.float32, 1.0), (torch.float64, 30.0)):
                    yield lead, Tq, Tk, d, dv, b, causal, dtype, scale


def _probe_online_softmax(ns):
    import torch

    g = torch.Generator().manual_seed(9)
    f = ns["online_softmax"]
    for shape in [(1,), (1, 1), (3, 4), (2, 6), (2, 3, 9), (4, 12)]:
        N = shape[-1]
        for b in sorted({1, 2, 3, 4, N, N + 1}):
            for dtype, scale in ((torch.float64, 1.0), (torch.float32, 3.0), (torch.float64, 300.0)):
                x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
                yield f(x, b)
                masked = x.clone()
                masked[..., : max(1, N // 2)] = float("-inf")  # a masked first block (left padding)
                masked[..., -1] = 0.0
                yield f(masked, b)
                yield f(x - 2000.0, b)  # every score far below 0
                yield f(torch.zeros(shape, dtype=dtype), b)


def _probe_tiled(ns):
    import torch

    g = torch.Generator().manual_seed(10)
    for lead, Tq, Tk, d, dv, b, causal, dtype, scale in _ch9_cases():
        r = lambda *s: (torch.randn(*s, generator=g, dtype=torch.float64) * scale).to(dtype)  # noqa: E731, B023
        yield ns["tiled_attention"](r(*lead, Tq, d), r(*lead, Tk, d), r(*lead, Tk, dv), block_size=b, causal=causal)


def _probe_flash_backward(ns):
    import torch

    g = torch.Generator().manual_seed(11)
    for lead, Tq, Tk, d, dv, b, causal, dtype, scale in _ch9_cases():
        r = lambda *s: (torch.randn(*s, generator=g, dtype=torch.float64) * scale).to(dtype)  # noqa: E731, B023
        q, k, v = (t.requires_grad_() for t in (r(*lead, Tq, d), r(*lead, Tk, d), r(*lead, Tk, dv)))
        out = ns["flash_attention"](q, k, v, causal=causal, block_size=b)
        yield out.detach()
        yield torch.autograd.grad(out, (q, k, v), r(*lead, Tq, dv))


def _probe_decode_step(ns):
    import torch

    g = torch.Generator().manual_seed(12)
    for B, H, d, dv, chunks in [(1, 1, 2, 3, (1,)), (1, 2, 3, 3, (1, 1, 1)), (2, 3, 4, 5, (3, 1, 1, 2, 1)),
                                (2, 1, 4, 2, (1, 4, 1)), (1, 2, 3, 4, (5,))]:
        for dtype, scale in ((torch.float64, 1.0), (torch.float32, 1.0), (torch.float64, 30.0)):
            T = sum(chunks)
            q, k, v = ((torch.randn(B, H, T, f, generator=g, dtype=torch.float64) * scale).to(dtype)
                       for f in (d, d, dv))
            cache, P = ns["KVCache"](), 0
            for t in chunks:
                yield ns["decode_step"](q[..., P:P + t, :], k[..., P:P + t, :], v[..., P:P + t, :], cache)
                P += t
            yield cache.keys, cache.values


def _probe_generate(ns):
    import nbformat
    import torch

    source = nbformat.read(COURSE.source_notebook("09_efficient_attention"), as_version=4)
    (toy,) = [c.source for c in source.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
              == "setup_toy_decoder"]
    exec(compile(toy, "09_efficient_attention:setup_toy_decoder", "exec"), ns)  # noqa: S102 - the course's own cell
    for seed, (V, E, H, B, P, n, dtype) in enumerate([(5, 4, 1, 1, 1, 1, torch.float64), (10, 8, 2, 3, 5, 7, torch.float64),
                                                       (7, 12, 4, 2, 6, 2, torch.float32), (16, 16, 2, 2, 1, 9, torch.float32)]):
        torch.manual_seed(seed)
        model = ns["ToyDecoder"](vocab_size=V, embed_dim=E, num_heads=H).to(dtype)
        prompt = torch.randint(0, V, (B, P))
        yield ns["generate"](model, prompt, n)
        yield model.project_lengths


CHAPTER_9_PROBES = {
    "online_softmax:35:bounds:5917beb1fe": ("09_efficient_attention", _probe_online_softmax),
    **{m: ("09_efficient_attention", _probe_tiled) for m in (
        "tiled_attention:30:bounds:490f6daab0", "tiled_attention:37:arith:eecc28a0e0",
        "tiled_attention:37:constant:c2796b0597", "tiled_attention:41:arith:06169c1c54",
        "tiled_attention:41:compare:6f74186cb1", "tiled_attention:41:constant:9029eadc32")},
    **{m: ("09_efficient_attention", _probe_flash_backward) for m in (
        "flash_attention:29:bounds:d1e14503e0", "flash_attention:32:bounds:b1d5e4b138",
        "flash_attention:33:arith:2b97ea97ad", "flash_attention:33:constant:af1d367486",
        "flash_attention:38:arith:17ef8b969d", "flash_attention:38:compare:6336c8ca39",
        "flash_attention:38:constant:6a7fd58863")},
    "kv_cache:51:compare:9133bbc25e": ("09_efficient_attention", _probe_decode_step),
    "kv_cache:51:constant:fc2593e602": ("09_efficient_attention", _probe_decode_step),
    "generate:23:bounds:05076ac92c": ("09_efficient_attention", _probe_generate),
}
PROBES.update(CHAPTER_9_PROBES)


# Chapter 8: depends_on_future's random projection (another seed, or a division by the same random numbers),
# its loop reaching the last output position (which has no later input row), and its copy of x made without
# detach (the copy still requires grad and is what the gradients are taken for). The probes cover every
# shape the docstring allows (unbatched, one position, several leading axes), float32 and float64, small and
# large values, causal functions and leaks one, three and T - 1 positions ahead, leaks that a centring hides
# from a plain sum, an x that requires grad (a leaf and a non-leaf), and a fn that overwrites its argument.
def _probe_depends_on_future(ns):
    import torch

    f = ns["depends_on_future"]
    g = torch.Generator().manual_seed(13)

    def centred(z):
        return z - z.mean(dim=-1, keepdim=True)

    def last_pair(z):
        out = z.clone()
        out[..., -2, :] = z[..., -2, :] + z[..., -1, :]
        return out

    def overwrites(z):
        out = z.cumsum(dim=-2)
        with torch.no_grad():
            z.zero_()
        return out

    for shape in [(1, 1), (2, 1), (1, 3), (5, 3), (2, 6, 4), (2, 2, 4, 2)]:
        T = shape[-2]
        mixers = [torch.randn(T, T, generator=g, dtype=torch.float64).tril() for _ in range(3)]
        if T > 1:
            mixers[1][0, T - 1] = 0.5  # the first position reads the last
            mixers[2][T - 2, T - 1] = -1e-3  # a small leak at the last pair only
        fns = [lambda z: z.cumsum(dim=-2), lambda z: centred(z.cumsum(dim=-2)), lambda z: 2 * z,
               lambda z: z + z.roll(-1, dims=-2), lambda z: centred(z + z.roll(-1, dims=-2)),
               lambda z: z + z.roll(-3, dims=-2), lambda z: z.flip(-2), lambda z: torch.tanh(z).cumsum(dim=-2) ** 2,
               *[(lambda w: lambda z: w.to(z.dtype) @ z)(w) for w in mixers]] + ([last_pair] if T > 1 else [])
        for dtype in (torch.float32, torch.float64):
            for scale in (1.0, 1e-3, 1e3):
                x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
                yield [f(fn, x) for fn in fns]
                yield f(overwrites, x), x
                leaf = x.clone().requires_grad_(True)
                yield f(lambda z: z.cumsum(dim=-2), leaf), f(lambda z: z + z.roll(-1, dims=-2), leaf), leaf.grad, leaf.detach()
                inner = leaf * 2
                yield f(lambda z: z.cumsum(dim=-2), inner), f(centred, inner), f(lambda z: z.flip(-2), inner), inner.detach()


def _probe_train_transformer(ns):
    """The progress bar's label: training from the same parameters on the same batches, with the bar shown."""
    import nbformat
    import torch

    source = nbformat.read(COURSE.source_notebook("08_transformer"), as_version=4)
    for given in ("torch_copy", "attention", "task"):  # the chapter's given code the model and batches need
        (cell,) = [c.source for c in source.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == given]
        exec(compile(cell, f"08_transformer:{given}", "exec"), ns)  # noqa: S102 - the course's own cell
    for seed, steps, batch in [(1, 1, 4), (2, 3, 16), (3, 6, 8)]:
        model = ns["set_parameters_"](ns["Seq2SeqTransformer"](ns["VOCAB_SIZE"], 8, 2, 16), seed)
        gen = torch.Generator().manual_seed(seed)
        yield ns["train_transformer"](model, lambda: ns["copy_batch"](batch, gen), steps, progress=True)  # noqa: B023
        yield model, model.training


CHAPTER_8_PROBES = {
    **{m: ("08_transformer", _probe_depends_on_future) for m in (
        "depends_on_future:13:drop:dfd648d0ff", "depends_on_future:19:constant:98efdd69f6",
        "depends_on_future:20:bounds:26667dcdd0", "depends_on_future:20:constant:662221aed7",
        "depends_on_future:21:arith:8c0b0f6cc0")},
    "train_transformer:26:delete:aef4b1d6b7": ("08_transformer", _probe_train_transformer),
}
PROBES.update(CHAPTER_8_PROBES)


# Chapter 10: lr_at on every schedule its docstring defines (total_steps > warmup_steps >= 1), and sample with every
# option on random rows and on rows whose nucleus boundary falls exactly on top_p.
def _probe_lr_at(ns):
    for peak, floor in [(1e-2, 1e-3), (1.0, 0.0), (3e-4, 3e-4), (0.5, 0.25)]:
        for warm in (1, 2, 5):
            for total in (warm + 1, warm + 2, warm + 7, 40):
                yield [ns["lr_at"](s, peak, floor, warm, total) for s in range(total + 4)]


def _probe_sample(ns):
    import torch

    g = torch.Generator().manual_seed(12)
    for B, V in [(1, 2), (3, 7), (8, 30)]:
        for dtype in (torch.float64, torch.float32):
            logits = (2.0 * torch.randn(B, V, generator=g, dtype=torch.float64)).to(dtype)
            for temperature, top_k, top_p in [(1.0, None, None), (0.7, None, 0.9), (1.3, 2, 0.5), (1.0, None, 0.5),
                                              (2.0, 2, None), (0.5, None, 0.2)]:
                gen = torch.Generator().manual_seed(B * V)
                yield torch.stack([ns["sample"](logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=gen)
                                   for _ in range(50)])
    yield ns["sample"](torch.zeros(400, 4, dtype=torch.float64), top_p=0.5, generator=torch.Generator().manual_seed(1))


CHAPTER_10_PROBES = {
    "lr_at:10:compare:18feb509da": ("10_language_model", _probe_lr_at),
    "lr_at:12:dim:f41ce81180": ("10_language_model", _probe_lr_at),
    "sample:24:arith:52edfa1800": ("10_language_model", _probe_sample),
    "sample:24:delete:2d01aac641": ("10_language_model", _probe_sample),
}
PROBES.update(CHAPTER_10_PROBES)


@functools.cache
def _mutants_of(chapter: str) -> tuple:
    """Every mutant of ``chapter`` (mutants.generate), generated once for the probe tests below."""
    return tuple(mutants.generate(COURSE, chapter))


@functools.cache
def _reference_outputs(chapter: str, probe) -> tuple:
    """What ``probe`` gives on the reference, computed once per (chapter, probe): the equivalents of one function
    share a probe, and each test below compares a mutant's outputs with these. Nothing compares in place (_same
    only reads), and a probe seeds its own generators, so a second run would give the same values."""
    return tuple(probe(mutants.namespace(COURSE, chapter)))


@pytest.mark.notebooks  # runs the chapter's code (mutants.namespace): seconds each, not the inner loop
@pytest.mark.parametrize("equivalent,killed", [
    ("depends_on_future:21:arith:8c0b0f6cc0", "depends_on_future:23:bounds:e806010b8e"),  # a one-step leak missed
    ("depends_on_future:13:drop:dfd648d0ff", "depends_on_future:13:drop:b78c079ae0"),  # fn given x itself
    ("train_transformer:26:delete:aef4b1d6b7", "train_transformer:20:compare:cc4926f42e"),  # the mask inverted
    ("online_softmax:35:bounds:5917beb1fe", "online_softmax:19:constant:ebf739477a"),  # running max started at 0
    ("tiled_attention:37:arith:eecc28a0e0", "tiled_attention:37:compare:6bfbbc1114"),  # the diagonal tile skipped
    ("flash_attention:33:arith:2b97ea97ad", "flash_attention:33:compare:09ff6e4c68"),  # the same, in backward
    ("kv_cache:51:compare:9133bbc25e", "kv_cache:54:compare:21bde98501"),  # a position hidden from itself
    ("generate:23:bounds:05076ac92c", "generate:29:arith:1381958b3b"),  # new tokens at the wrong positions
    ("lr_at:10:compare:18feb509da", "lr_at:13:constant:594a280546"),  # the cosine's amplitude doubled
    ("sample:24:delete:2d01aac641", "sample:22:compare:acb0e64fe4"),  # a token past an exact nucleus boundary
])
def test_each_probe_tells_a_real_slip_from_the_reference(equivalent, killed):
    """Each chapter's probe can fail: it sees a mutant of the same function that the engine kills."""
    chapter, probe, *_ = PROBES[equivalent]
    (m,) = [m for m in _mutants_of(chapter) if m.id == killed]
    reference = _reference_outputs(chapter, probe)
    try:
        mutated = list(probe(mutants.namespace(COURSE, chapter, {m.cell: m.source})))
    except (IndexError, RuntimeError):  # the slip crashes on a probe: a difference the probe saw
        return
    assert len(reference) != len(mutated) or any(not _same(a, b) for a, b in zip(reference, mutated))


@pytest.mark.unit
def test_every_documented_equivalent_has_a_probe():
    assert set(PROBES) == set(mutants.EQUIVALENT)


@pytest.mark.notebooks  # runs the chapter's code (mutants.namespace): seconds each, not the inner loop
@pytest.mark.parametrize("mutant_id", sorted(mutants.EQUIVALENT))
def test_a_documented_equivalent_gives_the_references_outputs(mutant_id):
    chapter, probe, *rtol = PROBES[mutant_id]
    (m,) = [m for m in _mutants_of(chapter) if m.id == mutant_id]
    reference = _reference_outputs(chapter, probe)
    mutated = list(probe(mutants.namespace(COURSE, chapter, {m.cell: m.source})))
    assert len(reference) == len(mutated) >= 3
    different = [i for i, (a, b) in enumerate(zip(reference, mutated)) if not _same(a, b, *rtol)]
    assert not different, f"{mutant_id} differs from the reference on probes {different}"


@pytest.mark.notebooks  # runs the chapter's code (mutants.namespace): seconds each, not the inner loop
def test_the_probe_tells_a_real_slip_from_the_reference():
    """The comparison can fail: the same probe sees a killed mutant of masked_softmax (its -inf fill)."""
    chapter, probe, *_ = PROBES["masked_softmax:44:constant:d14a9f54ad"]
    (m,) = [m for m in _mutants_of(chapter) if m.cell == "masked_softmax" and m.operator == "constant"
            and m.after == "0.0"]
    reference = _reference_outputs(chapter, probe)
    mutated = list(probe(mutants.namespace(COURSE, chapter, {m.cell: m.source})))
    assert any(not _same(a, b) for a, b in zip(reference, mutated))
