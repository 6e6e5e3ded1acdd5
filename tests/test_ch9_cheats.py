"""Chapter 9 cheats from issue 24's held-out examination, graded through the isolated engine: the memory
checks switched off from inside the kernel and the whole score matrix built only at sizes the in-kernel meter does
not watch lose the memory cell's points (the engine runs that cell under a memory limit the operating system
enforces: autograder/memory_budget.py); PyTorch's fused attention reached under a name built at run time does not
(a limit stated in autograder/TRUST.md, kept here as a strict xfail).

Each notebook is the reference with solution cells extended or replaced (as in tests/test_ch8_cheats.py). The
chapter's hidden tests change under their own owner, so these tests assert that the cheat loses points in the
cells it targets, not exact scores.

Where there is no cgroup (the user and process levels as an ordinary account) a memory budget is an rlimit, which
holds per process: a tiled_attention that computed the whole score table in another process kept every point there
(issue 41). A budget's job may start no process and no program now, at every level (seccomp): the cheats that hand
Q, K and V to a fresh Python or to a fork lose the budget cells' points at the root level as root (a cgroup) and at
the user and process levels as an ordinary account (rlimits; see SETTINGS for the pairs no longer graded) (a
throwaway account, as in tests/test_unprivileged.py, runs this module as
``python -m tests.test_ch9_cheats COURSE LEVEL OUT.json``). A third cheat starts nothing: it unmaps torch's code
in the kernel itself, which makes room under RLIMIT_AS, and maps it back afterwards. An rlimit cannot hold that, so
without a cgroup no budget cell earns points (the reference included: it keeps every other point, and the
instructor is told what was withheld); with one, the reference keeps full marks and every cheat loses the budget.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from autograder import submissions
from autograder.course import Course
from autograder.isolation import Engine, Limits
from autograder.results import GradingResult

from .cheats import cheat_notebook, grade_cheat
from .conftest import course_with_engine
from .test_isolation import _course_copy
from .test_unprivileged import Account, _course_for

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

# The held-out cheat of issue 43: tiled and flash attention by the book only at the sizes the budget cells ran at
# (256 queries against 2**18 keys and the other way round; T = 8192), the whole weight table at every other size,
# in-kernel checks switched off as above. It kept every point while those sizes were fixed in the notebook; the
# budget cells now run at sizes the grader draws when it builds the reference profile (memory_budget.draw).
ONLY_AT_THE_OLD_SIZES = METER_OFF_NAIVE_WHEN_LARGE.split("_tiled_by_the_book")[0] + '''
_tiled_by_the_book = tiled_attention


def tiled_attention(queries, keys, values, block_size=64, causal=False):
    Tq, Tk = queries.shape[-2], keys.shape[-2]
    if (Tq, Tk) in ((256, 2 ** 18), (2 ** 18, 256), (8192, 8192)):  # (8192, 8192): flash_attention calls it
        return _tiled_by_the_book(queries, keys, values, block_size=block_size, causal=causal)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., Tq, Tk)
    if causal:
        scores = scores.masked_fill(~top_left_causal_mask(Tq, Tk, device=scores.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ values, torch.logsumexp(scores, dim=-1)
'''
FLASH_ONLY_AT_THE_OLD_SIZE = '''
_flash_by_the_book = flash_attention


def flash_attention(queries, keys, values, causal=False, block_size=64):
    Tq, Tk = queries.shape[-2], keys.shape[-2]
    if Tq * Tk < 2 ** 22 or (Tq, Tk) == (8192, 8192):  # the in-kernel meter's sizes, and the old budget size
        return _flash_by_the_book(queries, keys, values, causal=causal, block_size=block_size)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., Tq, Tk), kept for backward
    if causal:
        scores = scores.masked_fill(~top_left_causal_mask(Tq, Tk, device=scores.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ values
'''

CHEATS = {
    # code appended to solution cells ("+grade_id" -> code), cells that must lose points
    "meter-off-naive-when-large": ({"+tiled_attention": METER_OFF_NAIVE_WHEN_LARGE}, ["test_tiled_memory_hidden"]),
    "by-the-book-only-at-the-old-sizes": ({"+tiled_attention": ONLY_AT_THE_OLD_SIZES,
                                           "+flash_attention": FLASH_ONLY_AT_THE_OLD_SIZE},
                                          ["test_tiled_memory_hidden", "test_flash_memory_hidden"]),
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


# -- a correct tiling written another way keeps the budget (issue 43) -------------------------------------------

# Base-2 exponentials with log2(e) folded into the scale, causal key tiles bounded by the loop range, and the output
# tiles kept in a list and concatenated at the end: right, and tile-sized. It lost test_tiled_memory_hidden (the job
# killed at 64 MiB, or peaking at 49 MiB, where the reference peaks at 25): glibc's heap kept the pages of freed 512
# KiB score tiles pinned between the small output tiles the list kept alive, and the budget's cgroup counts pages. A
# budget job now returns freed blocks to the operating system at once (autograder/sandbox/policy.py
# allocator_options): measured with the engine, 27.8 MiB.
HELD_OUT_TILING = '''
def tiled_attention(queries, keys, values, block_size=64, causal=False):
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size must be a positive integer")
    if keys.shape[-1] != queries.shape[-1]:
        raise ValueError("keys must have the queries' feature size")
    Tq, d = queries.shape[-2:]
    Tk = keys.shape[-2]
    scale = math.log2(math.e) / math.sqrt(d)  # base-2 exponentials: log2(e) folded into the scale
    outs, lses = [], []
    for q0 in range(0, Tq, block_size):
        q1 = min(q0 + block_size, Tq)
        q = queries[..., q0:q1, :] * scale
        m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q.shape[:-1], values.shape[-1], dtype=q.dtype, device=q.device)
        stop = min(Tk, q1) if causal else Tk  # causal: keys beyond the block's last query are never read
        for k0 in range(0, stop, block_size):
            k1 = min(k0 + block_size, stop)
            s = q @ keys[..., k0:k1, :].transpose(-2, -1)
            if causal and k1 - 1 > q0:
                i = torch.arange(q0, q1, device=q.device)[:, None]
                j = torch.arange(k0, k1, device=q.device)[None, :]
                s = s.masked_fill(j > i, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp2(s - m_new)
            c = torch.exp2(m - m_new)
            l = l * c + p.sum(-1, keepdim=True)
            acc = acc * c + p @ values[..., k0:k1, :]
            m = m_new
        outs.append(acc / l)
        lses.append(((m + torch.log2(l)) * math.log(2)).squeeze(-1))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
'''


# The same with natural exponentials: before the fix its budget job was killed every time (4 of 4 runs), the base-2
# one once in 5 (peaking at 49 MiB in the others).
HELD_OUT_TILINGS = {
    "base-2": HELD_OUT_TILING,
    "natural": HELD_OUT_TILING.replace("math.log2(math.e) / math.sqrt(d)", "1 / math.sqrt(d)")
    .replace("torch.exp2", "torch.exp").replace("(m + torch.log2(l)) * math.log(2)", "m + torch.log(l)"),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("exponentials", sorted(HELD_OUT_TILINGS))
def test_a_correct_tiling_with_a_list_of_output_tiles_keeps_full_marks(engine, exponentials):
    course, eng = engine
    result = grade_cheat(course, eng, CHAPTER, f"held-out-tiling-{exponentials}",
                         {"+tiled_attention": HELD_OUT_TILINGS[exponentials]})
    assert result.status == "graded", result.reason
    assert result.score == result.max_score, [(c.grade_id, c.messages) for c in result.cells if not c.passed]


# -- the budget beaten by another process (issue 41) ------------------------------------------------------------

# The whole (Tq, Tk) table of each batch entry, softmaxed in place: numpy only (a fresh Python needs no torch, and a
# fork that has unmapped torch's library still runs it). Top-left causal, as the chapter's.
WHOLE_TABLE = '''
def _whole_table(q, k, v, causal):
    import numpy as np

    outs, lses = [], []
    for b in range(q.shape[0]):
        s = q[b] @ k[b].T  # (Tq, Tk): 256 MiB of float32 scores at the budget's sizes
        s *= np.float32(1 / np.sqrt(q.shape[-1]))
        if causal:
            for i in range(min(s.shape[0], s.shape[1] - 1)):
                s[i, i + 1:] = -np.inf
        m = s.max(axis=1, keepdims=True)
        s -= m
        np.exp(s, out=s)
        total = s.sum(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
        outs.append((s @ v[b]) / total)
        lses.append((np.log(total) + m)[:, 0])
    return np.stack(outs).astype(np.float32), np.stack(lses).astype(np.float32)
'''

# Below the budget's sizes the reference's own tiling (every value check passes); at them, the whole table in
# another process, whose memory an rlimit does not count.
AT_THE_BUDGET_SIZES = '''
_tiled_by_the_book = tiled_attention


def tiled_attention(queries, keys, values, block_size=64, causal=False):
    Tq, Tk = queries.shape[-2], keys.shape[-2]
    if Tq * Tk < 2 ** 24:
        return _tiled_by_the_book(queries, keys, values, block_size=block_size, causal=causal)
    lead, dv = queries.shape[:-2], values.shape[-1]
    q, k, v = (t.detach().reshape(-1, *t.shape[-2:]).contiguous().numpy() for t in (queries, keys, values))
    out, lse = _elsewhere(q, k, v, causal)
    return torch.from_numpy(out).reshape(*lead, Tq, dv), torch.from_numpy(lse).reshape(*lead, Tq)
'''

# (a) a fresh Python (subprocess.run with sys.executable); Q, K and V through files in the scratch folder
CHILD_PYTHON = '''
import subprocess as _subprocess
import sys as _sys
import tempfile as _tempfile

import numpy as _np

_CHILD = """
import sys
import numpy as np
""" + _WHOLE_TABLE_SOURCE + """
folder, causal = sys.argv[1], sys.argv[2] == "1"
q, k, v = (np.load(f"{folder}/{n}.npy") for n in "qkv")
out, lse = _whole_table(q, k, v, causal)
np.save(f"{folder}/out.npy", out)
np.save(f"{folder}/lse.npy", lse)
"""


def _elsewhere(q, k, v, causal):
    folder = _tempfile.mkdtemp()
    for name, a in zip("qkv", (q, k, v)):
        _np.save(f"{folder}/{name}.npy", a)
    _subprocess.run([_sys.executable, "-c", _CHILD, folder, "1" if causal else "0"], check=True)
    return _np.load(f"{folder}/out.npy"), _np.load(f"{folder}/lse.npy")
'''.replace("_WHOLE_TABLE_SOURCE", repr(WHOLE_TABLE)) + AT_THE_BUDGET_SIZES

# (b) os.fork: the child unmaps torch's library (a third of the kernel's address space, which RLIMIT_AS counts and
# numpy never calls), builds the whole table in numpy and sends the result back through a pipe
FORKED = WHOLE_TABLE + '''
import ctypes as _ctypes
import gc as _gc
import os as _os

import numpy as _np


def _unmap_torch():
    munmap = _ctypes.CDLL(None).munmap
    munmap.argtypes = [_ctypes.c_void_p, _ctypes.c_size_t]
    with open("/proc/self/maps") as fh:
        spans = [line.split()[0] for line in fh if line.rstrip().endswith("libtorch_cpu.so")]
    for span in spans:
        start, end = (int(x, 16) for x in span.split("-"))
        munmap(start, end - start)


def _elsewhere(q, k, v, causal):
    r, w = _os.pipe()
    pid = _os.fork()
    if pid == 0:
        try:
            _gc.disable()
            _os.close(r)
            _unmap_torch()
            out, lse = _whole_table(q, k, v, causal)
            view = memoryview(out.tobytes() + lse.tobytes())
            while view:
                view = view[_os.write(w, view):]
        finally:
            _os._exit(0)
    _os.close(w)
    chunks = []
    while True:
        chunk = _os.read(r, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    _os.close(r)
    _os.waitpid(pid, 0)
    raw = b"".join(chunks)
    cut = q.shape[0] * q.shape[1] * v.shape[-1] * 4
    out = _np.frombuffer(raw[:cut], dtype=_np.float32).reshape(q.shape[0], q.shape[1], v.shape[-1])
    return out.copy(), _np.frombuffer(raw[cut:], dtype=_np.float32).reshape(q.shape[0], q.shape[1]).copy()
''' + AT_THE_BUDGET_SIZES

# (c) no other process: the kernel itself unmaps torch's read-only segments (its code: RLIMIT_AS counts address
# space, and they are most of it), builds the whole table in numpy, then maps the same file ranges back in place
# (issue 41's examination: it kept both budget cells at the rlimit levels; a cgroup charges pages, not addresses)
IN_PLACE = WHOLE_TABLE + """
import ctypes as _ctypes
import mmap as _mmap
import os as _os

_libc = _ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = _ctypes.c_void_p
_libc.mmap.argtypes = [_ctypes.c_void_p, _ctypes.c_size_t, _ctypes.c_int, _ctypes.c_int, _ctypes.c_int, _ctypes.c_long]
_libc.munmap.argtypes = [_ctypes.c_void_p, _ctypes.c_size_t]


def _elsewhere(q, k, v, causal):
    spans = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 6 and parts[5].endswith("libtorch_cpu.so") and "w" not in parts[1]:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                prot = (_mmap.PROT_READ if "r" in parts[1] else 0) | (_mmap.PROT_EXEC if "x" in parts[1] else 0)
                spans.append((start, end - start, prot, int(parts[2], 16), parts[5]))
    fd = _os.open(spans[0][4], _os.O_RDONLY)
    for start, size, _prot, _off, _path in spans:
        _libc.munmap(start, size)
    try:
        out, lse = _whole_table(q, k, v, causal)  # nothing of torch may run until it is mapped back
    finally:
        for start, size, prot, off, _path in spans:
            _libc.mmap(start, size, prot, _mmap.MAP_PRIVATE | 0x10, fd, off)  # 0x10: MAP_FIXED
        _os.close(fd)
    return out, lse
""" + AT_THE_BUDGET_SIZES

ANOTHER_PROCESS = {"child-python": CHILD_PYTHON, "fork": FORKED, "in-place": IN_PLACE}
REFUSED_CHEATS = ("child-python", "fork")  # the two that start a process: the seccomp filter refuses them
# flash_attention's forward pass is the learner's tiled_attention: the cheat reaches its budget cell too
BUDGET_CELLS = ("test_tiled_memory_hidden", "test_flash_memory_hidden")
REFUSED = "cannot start processes or programs"  # what a budget cell's feedback says then (memory_budget.note)


def grade_another_process(course_root: Path, level: str) -> dict:
    """The reference and each ANOTHER_PROCESS cheat, written into ``course_root`` and graded by one Engine at
    ``level``: ``{"isolation": ..., "results": {name: result as JSON}}`` (what ``__main__`` writes)."""
    course = Course(course_root)
    notebooks = {"reference": submissions.reference(course, CHAPTER)}
    notebooks |= {name: cheat_notebook(course, CHAPTER, {"+tiled_attention": code})
                  for name, code in ANOTHER_PROCESS.items()}
    with Engine(course.root, Limits(cell_timeout_s=120, notebook_timeout_s=300, memory_mb=2048,
                                    isolation=level)) as engine:
        results = {}
        for name, nb in notebooks.items():
            path = submissions.write_submission(course, f"process-{name}", CHAPTER, nb)
            results[name] = engine.grade(CHAPTER, path, f"process-{name}").to_json(notebook=False)
        return {"isolation": engine.isolation, "results": results}


def _as_root(level: str, tmp_path_factory) -> dict:
    return grade_another_process(_course_copy(tmp_path_factory.mktemp(f"ch9-{level}")).root, level)


def _as_an_ordinary_account(level: str) -> dict:
    if os.geteuid() != 0:
        pytest.fail("grading as an ordinary account needs root to create the account (useradd, su)")
    account = Account()
    try:
        course = _course_for(account, f"ch9-{level}")
        out = account.home / f"ch9-{level}.json"
        done = account.run(f"{sys.executable} -m tests.test_ch9_cheats {course.root} {level} {out}", timeout=1200)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return json.loads(out.read_text())
    finally:
        account.remove()


# (level, who): one proof per budget mechanism and per level's list of sandbox steps. As root every level has a
# cgroup (the budget is the cgroup's limit); as an ordinary account none has (the budget is an rlimit, and the
# seccomp step is what stops the process cheats). The root level is graded as root (cgroup); the user and process
# levels as an ordinary account (rlimits), their steps being the same as root's there less the cgroup. Coverage
# decision (issue 44, the suite's 12 minutes): user-as-root and process-as-root are no longer graded (about 15 CPU s
# each). They ran the user and process levels' steps, proven here as an account, with the cgroup budget, proven here
# at the root level; what is given up is a fault that only the pairing of a cgroup with those levels' namespaces
# would show (e.g. a cgroup step ordered after a namespace it needs). Grading them again is adding the two pairs back.
SETTINGS = (("root", "root"), ("user", "account"), ("process", "account"))


@pytest.fixture(scope="module", params=SETTINGS, ids=[f"{level}-as-{who}" for level, who in SETTINGS])
def another_process(request, tmp_path_factory):
    level, who = request.param
    graded = _as_root(level, tmp_path_factory) if who == "root" else _as_an_ordinary_account(level)
    assert graded["isolation"]["level"] == level, graded["isolation"]
    assert (graded["isolation"]["cgroup"] == "none") == (who == "account"), graded["isolation"]
    return {name: GradingResult.from_json(r) for name, r in graded["results"].items()}


@pytest.mark.timeout(1500)
def test_the_reference_keeps_full_marks_where_a_budget_is_proven(another_process):
    """With a cgroup (as root here) the reference keeps every point. With rlimits only (an ordinary account) a
    budget is not proven (autograder/memory_budget.py): its cells earn nothing, say why, and the instructor's flag
    names them; every other cell keeps its points."""
    ref = another_process["reference"]
    assert ref.status == "graded", ref.reason
    if "(rlimits" not in ref.isolation:  # levels.describe's label names the cgroup backend, or "rlimits"
        assert ref.score == ref.max_score, [(c.grade_id, c.messages) for c in ref.cells if not c.passed]
        assert not any("withheld" in f for f in ref.flags), ref.flags
        return
    lost = {c.grade_id for c in ref.cells if not c.passed}
    assert lost == set(BUDGET_CELLS), lost
    for gid in BUDGET_CELLS:
        assert ref.cell(gid).messages[0].startswith("not awarded here: this test's memory budget"), ref.cell(gid).messages
    assert any(f.startswith("memory-budget points withheld") and all(g in f for g in BUDGET_CELLS) for f in ref.flags), \
        ref.flags


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("cheat", sorted(ANOTHER_PROCESS))
def test_the_whole_table_in_another_process_loses_the_budget_points(another_process, cheat):
    result = another_process[cheat]
    assert result.status == "graded", result.reason
    kept = {gid: result.cell(gid).score for gid in BUDGET_CELLS if result.cell(gid).score > 0}
    assert not kept, f"{cheat} kept points in {kept}"
    tiled = result.cell("test_tiled_memory_hidden")
    if cheat in REFUSED_CHEATS:
        assert any(REFUSED in m for m in tiled.messages), tiled.messages
    others = {c.grade_id for c in result.cells if not c.passed} - set(BUDGET_CELLS)
    assert not others, f"{cheat} lost points outside the budget cells: {others}"


if __name__ == "__main__":  # as a throwaway ordinary account: python -m tests.test_ch9_cheats COURSE LEVEL OUT.json
    Path(sys.argv[3]).write_text(json.dumps(grade_another_process(Path(sys.argv[1]), sys.argv[2])))
