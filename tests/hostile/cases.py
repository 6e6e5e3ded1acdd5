"""The hostile submissions. Points of chapter 3: masked_softmax visible 2 / hidden 3, scores 4 / 4,
additive attention 2 / 2, scaled dot-product attention (sdpa) 3 / 5, variance 1 / 1: 27 in all.

"Wrong" below means the catalogued mistake ``sdpa-missing-scale`` (no 1/sqrt(d)), which loses exactly the
two sdpa cells (8 points): a hostile trick that rescued it would show up as points there.

Every case is graded at the root level; tests/hostile/levels.py says which are graded at every other level too
(all but LEVEL_INDEPENDENT) and what each level changes in their outcome.
"""
from __future__ import annotations

import copy
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from attention_course.cells import grade_id
from autograder import submissions
from autograder.course import Course
from autograder.learner_files import suspicion

CHAPTER = "03_scoring_functions"
FULL = 27.0
SDPA = ("test_sdpa_visible", "test_sdpa_hidden")  # 3 + 5 points
# 20 points: all need the scores cell (dot_score; AdditiveAttention reuses additive_score since issue 28)
SCORES_AND_SDPA = ("test_scores_visible", "test_scores_hidden", "test_additive_attention_visible",
                   "test_additive_attention_hidden", *SDPA)
ALL_CELLS = ("test_masked_softmax_visible", "test_masked_softmax_hidden", "test_scores_visible",
             "test_scores_hidden", "test_additive_attention_visible", "test_additive_attention_hidden",
             "test_sdpa_visible", "test_sdpa_hidden", "test_variance", "test_variance_hidden")
VARIANCE = ("test_variance", "test_variance_hidden")  # 1 + 1 points
# The limits the corpus is graded under (the reasons below quote them). No case races a clock unless a clock is what
# it tests: these timeouts are far past any case's work on a busy machine (the reference takes about 1 s on an idle
# one; the memory bomb's kernel, touching pages up to the 1536 MB limit, was OOM-killed 0.9 s after it started on an
# idle machine and 2-9 s later beside two spinning processes: with the 3 s cell limit it once timed out instead).
# The two cases that test a clock carry their own short one (Case.limits); what they wait for never ends, so no
# machine is too slow or too fast for them, and waiting costs the suite little.
LIMITS = dict(cell_timeout_s=60, notebook_timeout_s=120, memory_mb=1536, max_procs=64, max_output_mb=5)
CELL_CLOCK = dict(cell_timeout_s=3)  # infinite_loop: the cell's clock; the rest of the notebook has LIMITS' time
NOTEBOOK_CLOCK = dict(cell_timeout_s=3, notebook_timeout_s=8)  # swallows_interrupt: the notebook's clock


@dataclass
class Ctx:
    """Where things are while the corpus is graded (paths are on the host, outside any sandbox)."""

    course: Course  # the throwaway course copy the engine grades in
    repo: Path  # the real repository (its solutions/ must stay out of reach too)
    port: int  # a TCP server on 127.0.0.1 run by the test
    canary: Path  # a host file nobody may write
    other_student: Path  # another learner's submission


@dataclass(frozen=True)
class Special:
    """A submission that is not a regular file, made by run.write_cases where the notebook would be: a symbolic
    link or a hard link to ``target``, or a FIFO (class 3 of issue 24). ``grade``'s discovery refuses these
    before any engine sees them (tests/test_malformed_class.py); these cases are what the engine itself does
    with one, as `grade-one` and every worker receive it."""

    kind: str  # "symlink" | "hardlink" | "fifo"
    target: Path | None = None


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    build: Callable[[Ctx], "nbformat.NotebookNode | bytes | Special"]
    status: str
    score: float
    reason: str = ""
    failing: tuple[str, ...] = ()  # exactly these graded cells score 0 (when status is "graded")
    flags: tuple[str, ...] = ()
    file_name: str = f"{CHAPTER}.ipynb"
    outputs_contain: tuple[str, ...] = ()  # in the executed notebook's outputs
    outputs_lack: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)
    suspicions: tuple[str, ...] = ()  # the result's, for the instructor only (none but where a case expects one)
    limits: dict = field(default_factory=dict)  # this case's own limits over LIMITS (the clock cases: run.grade_case)
    student: str = ""  # the id the notebook is graded under (a folder name the learner chose); "": the case's name
    # How run.grade_cases schedules it. ``waits``: the case only sleeps until the notebook's wall clock kills it,
    # so a second engine grades it beside the others (the batch's waits then overlap its work). ``alone``: graded
    # only once that second engine is closed, so that neither engine's processes count with the case's: at the
    # process-rlimits level every process of the account counts against one RLIMIT_NPROC (fork_bomb);
    # grader_pipes_via_proc writes into every pipe of the grader's process it can reach. (No case's outcome
    # depends on how busy the machine is: LIMITS above; the suite grades the corpus beside a CpuBurner, tests/load.py.)
    waits: bool = False
    alone: bool = False


# -- building blocks --------------------------------------------------------------------------------------


def reference(ctx: Ctx) -> nbformat.NotebookNode:
    return submissions.reference(ctx.course, CHAPTER)


def blank(ctx: Ctx) -> nbformat.NotebookNode:
    return submissions.blank(ctx.course, CHAPTER)


def wrong(ctx: Ctx) -> nbformat.NotebookNode:
    m = next(m for m in submissions.load_mistakes(ctx.course, CHAPTER) if m.id == "sdpa-missing-scale")
    return submissions.with_mistake(ctx.course, CHAPTER, m)


def _index(nb, gid: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if grade_id(c) == gid)


def insert_after(nb, gid: str, code: str):
    nb = copy.deepcopy(nb)
    cell = nbformat.v4.new_code_cell(textwrap.dedent(code).strip("\n"))
    nb.cells.insert(_index(nb, gid) + 1, cell)
    return nb


def prepend(nb, gid: str, code: str):
    nb = copy.deepcopy(nb)
    cell = nb.cells[_index(nb, gid)]
    cell.source = textwrap.dedent(code).strip("\n") + "\n" + cell.source
    return nb


def append(nb, gid: str, code: str):
    nb = copy.deepcopy(nb)
    cell = nb.cells[_index(nb, gid)]
    cell.source = cell.source + "\n" + textwrap.dedent(code).strip("\n") + "\n"
    return nb


def append_cell(nb, code: str):
    nb = copy.deepcopy(nb)
    nb.cells.append(nbformat.v4.new_code_cell(textwrap.dedent(code).strip("\n")))
    return nb


def replace_in(nb, gid: str, find: str, repl: str):
    nb = copy.deepcopy(nb)
    cell = nb.cells[_index(nb, gid)]
    assert cell.source.count(find) == 1, (gid, find)
    cell.source = cell.source.replace(find, repl)
    return nb


# -- the hostile code -------------------------------------------------------------------------------------

SWALLOW = """
import signal, time
signal.signal(signal.SIGALRM, lambda *a: None)   # ignore the timeout alarm...
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    try:
        time.sleep(0.05)
    except BaseException:                         # ...and swallow any interrupt that still arrives
        pass
"""

# One block twice the memory limit, every page touched by the call that makes it: with a memory cgroup the kernel is
# OOM-killed while torch fills it (and no cell alarm can cut that short: Python runs signal handlers between
# bytecodes, never inside a call into torch); with RLIMIT_AS the allocation fails at once, before any page is touched.
MEMORY_BOMB = """
hog = torch.ones({mb} * 2**20 // 4)   # {mb} MB in one block, every page touched
"""

FORK_BOMB = """
import os, time
children = []
for _ in range(300):                         # bounded: 300 children, each sleeping
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
"""

PRINT_100MB = """
line = "x" * (1 << 20)
for _ in range(100):
    print(line)
"""

PATCH_NUMPY_TORCH = """
import numpy as np, torch, builtins
import numpy.testing
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(torch.as_tensor(a), dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
np.allclose = lambda *a, **k: True
np.isclose = lambda a, b, *r, **k: np.ones(np.broadcast(np.asarray(a), np.asarray(b)).shape, dtype=bool)
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
np.isnan = lambda a, *r, **k: np.zeros(np.shape(a), dtype=bool)
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
"""

PATCH_BUILTINS = """
import builtins
_real_isinstance, _real_type = builtins.isinstance, builtins.type
def isinstance(obj, classinfo):          # claim every tensor/array/number is whatever is asked
    return True if obj is not None else _real_isinstance(obj, classinfo)
builtins.isinstance = isinstance
builtins.all = lambda it: True
builtins.abs = lambda x: 0
builtins.max = lambda *a, **k: 0
builtins.AssertionError = type("AssertionError", (Exception,), {})
"""

RIGGED_EQ = """
class AlwaysEqual:
    '''Equal to anything, close to anything, with any shape you ask for.'''
    shape = property(lambda self: self)
    dtype = property(lambda self: self)
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __len__(self): return 3
    def __getitem__(self, i): return self
    def __array__(self, *a, **k): raise TypeError("no")
    def __float__(self): return 0.0
    def __bool__(self): return True
    def __iter__(self): return iter([self, self])
    def __matmul__(self, o): return self
    def __truediv__(self, o): return self

def scaled_dot_product_attention(queries, keys, values, mask=None):
    return AlwaysEqual(), AlwaysEqual()
"""

TENSOR_SUBCLASS = """
class Agreeable(torch.Tensor):
    '''Carries wrong values but answers every comparison with "equal".'''
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal"):
            return True
        if name in ("isclose", "eq", "__eq__"):
            return torch.ones_like(torch.Tensor.as_subclass(args[0], torch.Tensor), dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})

_wrong_sdpa = scaled_dot_product_attention
def scaled_dot_product_attention(queries, keys, values, mask=None):
    out, w = _wrong_sdpa(queries, keys, values, mask)
    return out.as_subclass(Agreeable), w.as_subclass(Agreeable)
"""

# a fake record, with the worked example's correct output (the learner can read it in the visible test),
# printed before and after every real check of the sdpa cells, plus a fake "all passed" text
FAKE_RECORDS = """
import base64, numpy as np
from IPython.display import display
_MIME = "application/vnd.attention-course.check+json"
_right = np.array([[0.32861, 0.66715, 0.36943, 0.55214], [0.32951, 0.66365, 0.34863, 0.54977],
                   [0.32732, 0.66671, 0.39057, 0.55726]])
def _fake(cell, check, value):
    got = {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": list(value.shape), "device": "cpu",
                      "type": "Tensor", "b64": base64.b64encode(value.tobytes()).decode()}}
    display({_MIME: {"cell": cell, "check": check, "kind": "close", "got": got,
                     "params": {"want": got, "rtol": None, "atol": None, "hint": "", "check_dtype": True}},
             "text/plain": f"\\u2713 {check}: values match"}, raw=True)
_wrong_sdpa = scaled_dot_product_attention
def scaled_dot_product_attention(queries, keys, values, mask=None):
    _fake("test_sdpa_visible", "worked-example", _right)
    print("\\u2713 all checks passed")
    out = _wrong_sdpa(queries, keys, values, mask)
    _fake("test_sdpa_visible", "worked-example", _right)
    return out
"""

FAKE_RECORDS_FREE_CELL = """
_fake("test_sdpa_visible", "worked-example", _right)   # in a cell of its own: not the test cell's output
"""

CHECK_LIBRARY_SWAP = """
import sys, types
import attention_course.checks as C, attention_course.verdicts as V
_orig_run = C.Checks._run
def _run(self, check_id, kind, got, params, describe):      # record the expected value as the answer
    if "want" in params:
        got = params["want"]
    return _orig_run(self, check_id, kind, got, params, describe)
C.Checks._run = _run
C.Checks.close = lambda self, check_id, got, want, **k: _orig_run(self, check_id, "close", want,
                                                                 {"want": want, "hint": ""}, check_id)
V.decide = lambda *a, **k: V.PASS
V.compare = lambda *a, **k: V.PASS
fake = types.ModuleType("attention_course.verdicts")
fake.decide = V.decide
sys.modules["attention_course.verdicts"] = fake
sys.modules["attention_course.checks"].CheckFailed = Warning
"""

RECORDER_TAMPER = """
import sys
_wrong_sdpa = scaled_dot_product_attention
def scaled_dot_product_attention(queries, keys, values, mask=None):
    ns = get_ipython().user_ns
    for name in [n for n in ns if n.startswith("__ac_")]:       # find the grader's recorders...
        real = ns[name]
        def scrape(*args, _real=real, **kwargs):                 # ...and record the expected value instead
            caller = sys._getframe(1)
            for var in ("want", "expected", "reference", "target"):
                if var in caller.f_locals:
                    args = args[:3] + (caller.f_locals[var],) + args[4:]
            return _real(*args, **kwargs)
        ns[name] = scrape
    return _wrong_sdpa(queries, keys, values, mask)
"""

# reads the hidden test's source while it runs (linecache), then tries to carry it into the feedback: as an
# exception class name and message in the hidden cell, as a message in a later visible cell, and as the
# dtype/type of a forged record
EXFILTRATE = """
import sys, linecache, base64, numpy as np
from IPython.display import display
_stash = {}
_wrong_sdpa = scaled_dot_product_attention
def scaled_dot_product_attention(queries, keys, values, mask=None):
    src = "".join(linecache.getlines(sys._getframe(1).f_code.co_filename))
    if "BEGIN HIDDEN TESTS" in src:
        _stash["hidden"] = src.split("BEGIN HIDDEN TESTS", 1)[1]
        name = "".join(ch if ch.isalnum() else "_" for ch in _stash["hidden"])[:40]
        raise type(name, (Exception,), {})(_stash["hidden"])
    return _wrong_sdpa(queries, keys, values, mask)
"""

EXFILTRATE_LATER = """
def dot_product_variance(d, num_samples=20000, scaled=False, generator=None):
    leak = _stash.get("hidden", "nothing")
    got = {"tensor": {"dtype": leak[:300], "np_dtype": "float64", "shape": [1], "device": leak[:50],
                      "type": leak[:80], "b64": base64.b64encode(np.zeros(1).tobytes()).decode()}}
    display({"application/vnd.attention-course.check+json":
             {"cell": "test_variance", "check": f"unscaled-d{d}", "kind": "close", "got": got}}, raw=True)
    raise ValueError(leak[:1000])
"""

# rewrites the kernel's own result: real records of the sdpa cells replaced by forged ones (the visible
# worked example's values, which the learner can read in the visible test, and zeros for hidden checks),
# errors removed, written to every open descriptor, then exits before the real result is sent
FORGE_RESULT = """
import copy, json, os, struct, base64, numpy as np
import gc
gc.unfreeze()  # the zygote froze what it made (runner.init_shell): back into the lists gc.get_objects reads
plumbing = next(d for d in gc.get_objects() if isinstance(d, dict) and "_CAPTURE" in d and "run_cells" in d)
MIME = "application/vnd.attention-course.check+json"
right = np.array([[0.32861, 0.66715, 0.36943, 0.55214], [0.32951, 0.66365, 0.34863, 0.54977],
                  [0.32732, 0.66671, 0.39057, 0.55726]])
def tensor(a):
    return {"tensor": {"dtype": "float64", "np_dtype": "float64", "shape": list(a.shape), "device": "cpu",
                       "type": "Tensor", "b64": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}}
cells = copy.deepcopy(plumbing["_CAPTURE"].cells)
for cell in cells.values():
    cell["outputs"] = [o for o in cell["outputs"] if o.get("output_type") != "error"]
    for o in cell["outputs"]:
        rec = o.get("data", {}).get(MIME)
        if rec and rec["cell"] == "test_sdpa_visible" and rec["check"] == "worked-example":
            rec["got"] = tensor(right)
        elif rec and rec["cell"] == "test_sdpa_hidden" and "tensor" in rec["got"]:
            rec["got"] = tensor(np.zeros(rec["got"]["tensor"]["shape"]))
frame = json.dumps({"done": True, "cells": cells, "truncated": False}).encode()
for fd in range(3, 100):
    try:
        os.write(fd, struct.pack(">I", len(frame)) + frame)
    except OSError:
        pass
os._exit(0)
"""

# a result frame the grader cannot use (cells as nonsense), sent first
ODD_RESULT = """
import json, os, struct
frame = json.dumps({"done": True, "truncated": "yes", "cells": {
    "-1": {"outputs": [{"output_type": "error", "ename": {"x": 1}}]}, "abc": 5, "99999": {"outputs": []},
    "3": {"outputs": ["text", {"output_type": "weird"}, {"output_type": "stream", "name": "stdin", "text": 1}],
          "execution_count": True}}}).encode()
for fd in range(3, 100):
    try:
        os.write(fd, struct.pack(">I", len(frame)) + frame)
    except OSError:
        pass
os._exit(0)
"""

GARBAGE_RESULT = """
import os
for fd in range(3, 100):
    try:
        os.write(fd, b"garbage! " * 1000)
    except OSError:
        pass
"""

READ_SECRETS = """
import glob, json, os
targets = [{sol!r}, {repo_sol!r}, {gradebook!r}, {other!r}, {expected!r}, "/work/authoring/build_ch03.py",
           "/etc/shadow", "/root/.bash_history"]
found = []
for p in targets:
    try:
        with open(p, "rb") as fh:
            found.append((p, len(fh.read())))
    except Exception as exc:
        print("blocked", type(exc).__name__, p)
for top in ("", "/usr", "/etc", "/scratch", "/proc", "/work", "/work/main", "/root"):
    found += glob.glob(top + "/*/solutions/*/*.ipynb") + glob.glob(top + "/*/grading/gradebook.db")
print("FOUND", found)
print("VISIBLE /work/main:", sorted(os.listdir({repo!r})))
for p in [t for t in found if isinstance(t, tuple)]:           # would paste the reference answers in
    for cell in json.load(open(p[0]))["cells"]:
        if cell.get("metadata", {{}}).get("nbgrader", {{}}).get("solution"):
            exec("".join(cell["source"]), globals())
"""

WRITE_GRADEBOOK = """
import os, sqlite3
attempts = {{"gradebook": {gradebook!r}, "canary": {canary!r}, "other student": {other!r},
            "course": {course_file!r}, "etc": "/etc/attention-was-here", "usr": "/usr/attention-was-here",
            "root": "/attention-was-here"}}
for what, path in attempts.items():
    try:
        with open(path, "a") as fh:
            fh.write("full marks please")
        print("WROTE", what)
    except Exception as exc:
        print("blocked", what, type(exc).__name__)
try:
    db = sqlite3.connect({gradebook!r})
    db.execute("create table if not exists grade (student text, score real)")
    db.execute("insert into grade values ('me', 100)")
    db.commit()
    print("WROTE gradebook via sqlite")
except Exception as exc:
    print("blocked sqlite", type(exc).__name__)
with open(os.path.join(os.environ["HOME"], "notes.txt"), "w") as fh:  # the scratch folder (HOME) is the learner's own
    fh.write("ok")
print("scratch ok", open("notes.txt").read())
"""

NETWORK = """
import socket
for host in ("127.0.0.1", "localhost"):
    try:
        s = socket.create_connection((host, {port}), timeout=2)
        s.sendall(b"stolen hidden tests")
        s.close()
        print("CONNECTED", host)
    except Exception as exc:
        print("no network", host, type(exc).__name__)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("DNS works")
except Exception as exc:
    print("no dns", type(exc).__name__)
"""

WARNING = """
import sys, warnings
warnings.warn("this answer triggers a warning", UserWarning)
print("a note on stderr", file=sys.stderr)
"""


# computes in float64 where the inputs are float32 (a dtype mistake) and replaces the property everything
# reads a tensor's dtype through, so those results claim to be float32: the grader reads dtypes from the
# tensor's storage through accessors captured before learner code ran, and the hidden float32 checks fail
DTYPE_BENT = """
_real_dtype = torch._C.TensorBase.dtype
_bent = set()
_correct_sdpa = scaled_dot_product_attention
def scaled_dot_product_attention(queries, keys, values, mask=None):
    out, w = _correct_sdpa(queries, keys, values, mask)
    if _real_dtype.__get__(queries) == torch.float32:
        out, w = out.double(), w.double()
        _bent.update((torch._C.TensorBase.data_ptr(out), torch._C.TensorBase.data_ptr(w)))
    return out, w
def _claimed_dtype(self):
    real = _real_dtype.__get__(self)
    if real == torch.float64 and torch._C.TensorBase.data_ptr(self) in _bent:
        return torch.float32
    return real
torch.Tensor.dtype = property(_claimed_dtype)
"""

# a pre_run_cell hook keeps the source of every cell as it runs (hidden tests included); a later visible test's function
# raises it, zlib-compressed and base64-encoded (no literal window of hidden code survives), in its message
PRE_RUN_EXFILTRATE = """
import base64, zlib
_seen = []
def _keep(info):
    _seen.append(info.raw_cell)  # every cell from here on, the hidden tests among them
get_ipython().events.register("pre_run_cell", _keep)
def dot_product_variance(d, num_samples=20000, scaled=False, generator=None):
    blob = base64.b64encode(zlib.compress("\\n".join(_seen).encode())).decode()
    raise ValueError("EXFIL:" + blob)
"""

# sdpa without any input validation (a real mistake: the hidden raises checks fail); under the grader it
# swaps the raises recorder for a wrapper that forwards a function raising the "right" error, so bad input
# looks rejected: the recorder accepts calls from the test cell's own code only, the forwarded ones are refused
RECORDER_FORWARD = """
import os, sys
def scaled_dot_product_attention(queries, keys, values, mask=None, valid_lens=None):
    if os.environ.get("ATTENTION_COURSE_GRADING") == "sandbox":
        ns = sys._getframe(1).f_globals
        real = ns.get("__ac_raises__")
        if real is not None and not getattr(real, "bent", False):
            def bent(site, check_id, fn, *args, **kwargs):
                kind = TypeError if "integer" in str(check_id) else ValueError
                def refuse(*a, **k):
                    raise kind("queries, keys and values must be float tensors of matching sizes")
                return real(site, check_id, refuse)
            bent.bent = True
            ns["__ac_raises__"] = bent
    weights = masked_softmax(dot_score(queries, keys) / math.sqrt(queries.shape[-1]), valid_lens=valid_lens, mask=mask)
    return weights @ values, weights
"""

DEEP_JSON_OUTPUT = """
from IPython.display import display
deep = "bottom"
for _ in range(600):
    deep = {"down": [deep]}
display({"application/json": deep, "text/plain": "a very deep JSON value"}, raw=True)
"""

LONE_SURROGATE_OUTPUT = """
import sys
print("half a character: \\ud800 and more text")
sys.stderr.write("on stderr too: \\udfff\\n")
"""


# a kernel that says the grader broke: a progress frame that claims no cell has run yet, then an "abort" (what the
# kernel sends when its jail cannot be built) whose text paints the instructor's terminal, on every descriptor
FORGED_ABORT = """
import json, os, struct
def frame(obj):
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data
paint = "\\x1b[2J\\x1b[31mFATAL\\r\\x07 grader exploded\\x1b]0;pwned\\x07\\x1b[0m\\u202e"
for fd in range(3, 100):
    try:
        os.write(fd, frame({"progress": None}) + frame({"abort": "Traceback\\nRuntimeError: " + paint}))
    except OSError:
        pass
os._exit(4)
"""

# an exception of the notebook's own, whose class name and message ask the instructor for the marks, raised where the
# kernel encodes its result (json.dumps patched, for that call only): it escapes the kernel's cell loop, and the
# kernel's last words, the traceback, carry the class name and the message to the monitor (issue 41, class 7)
FORGED_EXCEPTION = """
import json
class GraderBugNotTheLearnersFaultPleaseAwardFullMarksByHand(Exception):
    pass
_real_dumps = json.dumps
def _dumps(obj, *args, **kwargs):
    if isinstance(obj, dict) and obj.get("done"):
        raise GraderBugNotTheLearnersFaultPleaseAwardFullMarksByHand(
            "grader bug, not the learner's fault -- please award full marks by hand")
    return _real_dumps(obj, *args, **kwargs)
json.dumps = _dumps
"""
FORGED_WORDS = ("grader bug", "full marks by hand", "GraderBug", "FullMarks")

# a result frame that is valid JSON to Python's reader but holds NaN, which the grader's own writers refuse
FORGED_NAN_RESULT = """
import os, struct
data = b'{"done":true,"truncated":false,"cells":{"0":{"outputs":[],"execution_count":NaN}}}'
for fd in range(3, 100):
    try:
        os.write(fd, struct.pack(">I", len(data)) + data)
    except OSError:
        pass
os._exit(0)
"""

# 100 MB of numbers as the result: under the raw size cap, but every "9e15" decodes to a float object and
# re-encodes as "9000000000000000.0"
# (the cell ignores its timeout alarm, so a slow machine cannot cut the write short and make this another case;
# writev sends the parts without copying them into one 100 MB buffer)
OVERSIZED_RESULT = """
import os, signal, struct
signal.signal(signal.SIGALRM, signal.SIG_IGN)
head, numbers, tail = b'{"done":true,"cells":{},"truncated":false,"pad":[', b"9e15," * (20 << 20), b'0]}'
for fd in range(3, 100):
    try:
        os.writev(fd, [struct.pack(">I", len(head) + len(numbers) + len(tail)), head, numbers, tail])
    except OSError:
        pass
os._exit(0)
"""

# the grader's own pipes, one, two and three levels up (monitor, zygote, engine), opened through /proc: a pipe
# opened there is writable whichever end the descriptor is. Reached, a forged report would reach the engine.
GRADER_PIPES = """
import json, os, struct
data = json.dumps({"status": "error", "reason": "forged"}).encode()
reached, pid = 0, os.getppid()
for _ in range(3):
    if pid <= 1:
        break
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:"):
                with open(f"/proc/{pid}/fd/{fd}", "wb", buffering=0) as fh:
                    fh.write(struct.pack(">I", len(data)) + data)
                    reached += 1
    except OSError as exc:
        print("refused", type(exc).__name__)
    try:
        with open(f"/proc/{pid}/stat") as fh:
            pid = int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        break
print("reached", reached, "of the grader's pipes")
"""

# System V IPC outlives the process that made it: a 256 MB shared memory segment, touched, stays on the host
# (and outside the memory limit) unless the grader refuses it or removes it
SYSV_IPC = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
calls = {"shmget": lambda: libc.shmget(IPC_PRIVATE, ctypes.c_size_t(256 << 20), IPC_CREAT | 0o600),
         "msgget": lambda: libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600),
         "semget": lambda: libc.semget(IPC_PRIVATE, 4, IPC_CREAT | 0o600)}
for name, call in calls.items():
    ident = call()
    if ident < 0:
        print(name, "refused", errno.errorcode[ctypes.get_errno()])
        continue
    print(name, "created", ident)
    if name == "shmget":
        addr = libc.shmat(ident, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value):
            ctypes.memset(addr, 1, 256 << 20)
            print("shm touched")
"""

# an empty list where a number is expected: a value of another type and size never passes
EMPTY_VARIANCE = """
def dot_product_variance(d, num_samples=20000, scaled=False, generator=None):
    return []
"""


# Every kind of output a front-end renders as active content (issue 24, class 1), and a markdown cell of the
# learner's own: the engine keeps them as plain text behind a note, the autograded notebook holds none of them.
ACTIVE_OUTPUTS = r"""
from IPython.display import HTML, SVG, Javascript, Latex, Markdown, display
display(HTML('<script>document.title = "ACTIVEMARK html"</script><b>bold</b>'))
display(Javascript('document.title = "ACTIVEMARK js"'))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="document.title=1"><text>ACTIVEMARK svg</text></svg>'))
display(Markdown('[click](javascript:alert("ACTIVEMARK md"))'))
display(Latex(r'$\href{javascript:alert(1)}{ACTIVEMARK tex}$'))
display({"application/vnd.jupyter.widget-view+json": {"model_id": "ACTIVEMARK", "version_major": 2,
                                                      "version_minor": 0}, "text/plain": "a widget"}, raw=True)
class _Rich:
    def _repr_html_(self):
        return '<img src=x onerror="document.title=1">ACTIVEMARK repr'
_Rich()
"""
ACTIVE_MIMES = ("text/html", "application/javascript", "image/svg+xml", "text/markdown", "text/latex",
                "application/vnd.jupyter.widget-view+json")


# A folder name as `grade`'s discovery passes it on (learner_files.student_id keeps it: it is printable): matplotlib
# parsed `$...$` as mathtext and `grade` crashed in the class report; a CSV cell starting with `=` is a formula.
HOSTILE_ID = "=cmd|' -C calc'!A0 $\\alpha$ <b>id</b>"


def _active_outputs(ctx: Ctx) -> nbformat.NotebookNode:
    nb = insert_after(reference(ctx), "setup", ACTIVE_OUTPUTS)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell('<script>document.title = "ACTIVEMARK cell"</script>'))
    return nb


def _hostile_file(ctx: Ctx, levels: int = 50) -> bytes:
    """The reference with a lone surrogate in a cell's source and metadata nested ``levels`` deep."""
    nb = nbformat.from_dict(json.loads(json.dumps(reference(ctx))))
    cell = nb.cells[_index(nb, "scaled_dot_product_attention")]
    cell.source += "\n_note = '\ud800 half a character'\n"
    data = json.loads(json.dumps(nb))
    deep = "bottom"
    for _ in range(levels):
        deep = {"down": deep}
    data["metadata"]["deep"] = deep
    return json.dumps(data).encode("ascii")  # ensure_ascii writes the lone surrogate as \ud800


# 5 MB of empty lists: 1.7 million values, about 140 MB once parsed (issue 41, class 5). Measured, never parsed.
NODE_BOMB = b'{"cells": [], "metadata": {"x": [' + b"[]," * (5 * 2**20 // 3) + b"[]]}}"


def _read_secrets(ctx: Ctx):
    code = READ_SECRETS.format(
        sol=str(ctx.course.source_notebook(CHAPTER)), repo_sol=str(ctx.repo / "solutions" / CHAPTER / f"{CHAPTER}.ipynb"),
        gradebook=str(ctx.course.grading / "gradebook.db"), other=str(ctx.other_student),
        expected=str(next((ctx.course.grading / "expected").glob("isolation-*.json"), "")), repo=str(ctx.repo))
    return insert_after(blank(ctx), "setup", code)


def _write_gradebook(ctx: Ctx):
    code = WRITE_GRADEBOOK.format(gradebook=str(ctx.course.grading / "gradebook.db"), canary=str(ctx.canary),
                                  other=str(ctx.other_student), course_file=str(ctx.course.source_notebook(CHAPTER)))
    return insert_after(reference(ctx), "setup", code)


def _edited_test(ctx: Ctx):
    nb = wrong(ctx)
    i = _index(nb, "test_sdpa_visible")
    nb.cells[i].source = 'print("all tests passed")'
    j = _index(nb, "test_sdpa_hidden")
    nb.cells[j].metadata["nbgrader"]["points"] = 0  # and claim the hidden cell is worth nothing
    k = _index(nb, "test_variance")
    nb.cells[k].metadata["nbgrader"]["points"] = 100  # or a lot
    return nb


def _deleted_test(ctx: Ctx):
    nb = wrong(ctx)
    del nb.cells[_index(nb, "test_sdpa_hidden")]
    return nb


def _duplicated(ctx: Ctx):
    nb = reference(ctx)
    nb.cells.append(copy.deepcopy(nb.cells[_index(nb, "test_variance")]))
    extra = copy.deepcopy(nb.cells[_index(nb, "scaled_dot_product_attention")])
    extra.id = "my-copy"
    nb.cells.insert(_index(nb, "scaled_dot_product_attention") + 1, extra)
    return nb


def _fake_records(ctx: Ctx):
    nb = insert_after(wrong(ctx), "scaled_dot_product_attention", FAKE_RECORDS)
    return insert_after(nb, "test_sdpa_hidden", FAKE_RECORDS_FREE_CELL)


CASES = [
    Case("infinite_loop", "`while True: pass` at the top of the scores cell: the cell times out, the notebook "
         "goes on, and everything that needs dot_score fails",
         lambda ctx: prepend(reference(ctx), "scores", "while True:\n    pass"),
         "graded", FULL - 20, failing=SCORES_AND_SDPA,
         outputs_contain=("CellTimeout", f"the cell did not finish within {CELL_CLOCK['cell_timeout_s']} s"),
         limits=CELL_CLOCK),
    Case("swallows_interrupt", "ignores the alarm and swallows every interrupt: the wall clock kills it",
         lambda ctx: insert_after(reference(ctx), "setup", SWALLOW),
         "zero", 0.0, reason=f"timeout: notebook exceeded {NOTEBOOK_CLOCK['notebook_timeout_s']} s",
         limits=NOTEBOOK_CLOCK, waits=True),
    Case("memory_bomb", "allocates one block of twice the memory limit and touches every page",
         lambda ctx: insert_after(reference(ctx), "setup", MEMORY_BOMB.format(mb=2 * LIMITS["memory_mb"])),
         "zero", 0.0, reason=f"kernel died (out of memory: limit {LIMITS['memory_mb']} MB)"),
    Case("fork_bomb", "forks 300 sleeping children",
         lambda ctx: insert_after(reference(ctx), "setup", FORK_BOMB),
         "zero", 0.0, reason=f"process limit exceeded: the notebook tried to run more than {LIMITS['max_procs']} processes or "
                             "threads (fork bomb?)", alone=True),
    Case("os_exit", "os._exit(0) in a cell",
         lambda ctx: insert_after(reference(ctx), "scores", "import os\nos._exit(0)"),
         "zero", 0.0, reason="kernel died (exited with status 0 before the notebook finished)"),
    Case("sys_exit", "sys.exit() at the top of the scores cell: an error in that cell, like in Jupyter",
         lambda ctx: prepend(reference(ctx), "scores", "import sys\nsys.exit()"),
         "graded", FULL - 20, failing=SCORES_AND_SDPA, outputs_contain=("SystemExit",)),
    Case("segfault", "dereferences NULL through ctypes",
         lambda ctx: insert_after(reference(ctx), "scores", "import ctypes\nctypes.string_at(0)"),
         "zero", 0.0, reason="kernel died (segfault)"),
    Case("print_100mb", "prints 100 MB: output is capped, the answers still count",
         lambda ctx: insert_after(reference(ctx), "setup", PRINT_100MB),
         "graded", FULL, outputs_contain=("[output truncated",)),
    Case("patch_numpy_torch", "wrong sdpa, and torch/numpy comparison functions patched to say 'equal'",
         lambda ctx: insert_after(wrong(ctx), "setup", PATCH_NUMPY_TORCH),
         "graded", FULL - 8, failing=SDPA),
    Case("patch_builtins", "wrong sdpa, then isinstance/all/abs/max patched: nothing after the patch scores, "
         "and the grader's own plumbing keeps working",
         lambda ctx: insert_after(wrong(ctx), "test_sdpa_visible", PATCH_BUILTINS),
         "graded", FULL - 10, failing=(*SDPA, *VARIANCE)),
    Case("rigged_eq", "sdpa returns an object whose __eq__ is always true",
         lambda ctx: insert_after(reference(ctx), "scaled_dot_product_attention", RIGGED_EQ),
         "graded", FULL - 8, failing=SDPA),
    Case("tensor_subclass", "wrong sdpa returning a tensor subclass that claims equality",
         lambda ctx: insert_after(wrong(ctx), "scaled_dot_product_attention", TENSOR_SUBCLASS),
         "graded", FULL - 8, failing=SDPA),
    Case("fake_records", "wrong sdpa printing fake check records (right values, before and after the real "
         "check) and a fake 'all checks passed'",
         _fake_records, "graded", FULL - 8, failing=SDPA),
    Case("check_library_swap", "wrong sdpa; the check library patched to record the expected value as the "
         "answer, decide() patched to pass, sys.modules edited",
         lambda ctx: insert_after(wrong(ctx), "setup", CHECK_LIBRARY_SWAP),
         "graded", FULL - 8, failing=SDPA),
    Case("recorder_tamper", "wrong sdpa that replaces the grader's recorders during the test and scrapes "
         "the test's frame for an expected value",
         lambda ctx: insert_after(wrong(ctx), "scaled_dot_product_attention", RECORDER_TAMPER),
         "graded", FULL - 8, failing=SDPA),
    Case("exfiltrate_hidden_source", "wrong sdpa that reads the hidden test's source while it runs and tries "
         "to carry it into the feedback (exception names and messages, forged record dtype/type names)",
         lambda ctx: insert_after(insert_after(wrong(ctx), "scaled_dot_product_attention", EXFILTRATE),
                                  "dot_product_variance", EXFILTRATE_LATER),
         "graded", FULL - 10, failing=(*SDPA, *VARIANCE)),
    Case("forge_result_channel", "wrong sdpa; rewrites the kernel's result (forged records, errors removed) and "
         "sends it first: only what the learner already knows (the visible example, as hardcoding would) can "
         "pass, the hidden test still fails",
         lambda ctx: append_cell(wrong(ctx), FORGE_RESULT),
         "graded", FULL - 5, failing=("test_sdpa_hidden",)),
    Case("odd_result_frame", "the reference, then a nonsense result frame sent first: graded on what it "
         "contains (nothing), never a grader failure",
         lambda ctx: append_cell(reference(ctx), ODD_RESULT), "graded", 0.0, failing=ALL_CELLS),
    Case("garbage_result_channel", "the reference, then bytes that are not frames on every descriptor",
         lambda ctx: insert_after(reference(ctx), "setup", GARBAGE_RESULT),
         "zero", 0.0, reason="the notebook interfered with the grader's result channel"),
    Case("read_solutions", "blank answers; tries to read solutions/, the gradebook, the expectations and "
         "another learner's notebook, and to paste the reference answers in",
         _read_secrets, "graded", 0.0, failing=ALL_CELLS,
         outputs_contain=("FOUND []", "VISIBLE /work/main: ['.venv', 'attention_course']")),
    Case("write_gradebook", "tries to write the gradebook (file and sqlite), another learner's notebook, "
         "the course and a host file",
         _write_gradebook, "graded", FULL, outputs_contain=("scratch ok ok", "blocked sqlite"),
         outputs_lack=("WROTE",)),
    Case("network", "connects to a server on 127.0.0.1 and resolves a name",
         lambda ctx: insert_after(reference(ctx), "setup", NETWORK.format(port=ctx.port)),
         "graded", FULL, outputs_contain=("no network 127.0.0.1", "no dns"), outputs_lack=("CONNECTED",)),
    Case("edited_test_cell", "wrong sdpa; the visible sdpa test replaced by a print, points edited",
         _edited_test, "graded", FULL - 8, failing=SDPA,
         flags=("edited test cell test_sdpa_visible restored", "edited test cell test_sdpa_hidden restored",
                "edited test cell test_variance restored")),
    Case("deleted_test_cell", "wrong sdpa; the hidden sdpa test cell deleted",
         _deleted_test, "graded", FULL - 8, failing=SDPA, flags=("deleted test cell test_sdpa_hidden restored",)),
    Case("duplicated_grade_id", "a second copy of a test cell and of a solution cell",
         _duplicated, "graded", FULL,
         flags=("duplicated grade_id scaled_dot_product_attention: the extra copy runs as an ordinary cell",
                "duplicated grade_id test_variance: extra copy removed")),
    Case("malformed_json", "a truncated file", lambda ctx: b'{"cells": [{"cell_type": "code", "sou',
         "zero", 0.0, reason="malformed JSON"),
    Case("empty_file", "zero bytes", lambda ctx: b"", "zero", 0.0, reason="empty file"),
    Case("wrong_file_name", "the right notebook under another name", lambda ctx: reference(ctx),
         "zero", 0.0, reason=f"wrong file name: expected {CHAPTER}.ipynb",
         file_name="scoring.ipynb"),
    Case("not_a_notebook", "valid JSON that is not a notebook", lambda ctx: json.dumps({"hello": 1}).encode(),
         "zero", 0.0, reason="not a notebook (no list of cells)"),
    Case("dtype_bent", "correct values computed in float64 for float32 inputs, with torch.Tensor.dtype replaced "
         "so those results claim float32: the dtype comes from the storage, the hidden float32 checks fail",
         lambda ctx: insert_after(reference(ctx), "scaled_dot_product_attention", DTYPE_BENT),
         "graded", FULL - 5, failing=("test_sdpa_hidden",)),
    Case("recorder_forwarding", "sdpa without input validation that, under the grader, swaps the raises "
         "recorder for a wrapper forwarding a function that raises the expected error: refused, the hidden "
         "raises checks fail",
         lambda ctx: insert_after(reference(ctx), "scaled_dot_product_attention", RECORDER_FORWARD),
         "graded", FULL - 5, failing=("test_sdpa_hidden",), outputs_contain=("[check record refused",)),
    Case("pre_run_cell_exfiltration", "a pre_run_cell hook keeps the hidden test cells' source; a visible test's "
         "function raises it zlib-compressed and base64-encoded: the feedback carries no learner text",
         lambda ctx: insert_after(reference(ctx), "dot_product_variance", PRE_RUN_EXFILTRATE),
         "graded", FULL - 2, failing=VARIANCE, outputs_contain=("EXFIL:",),
         extra={"feedback_lacks": ("EXFIL",)}),
    Case("deep_json_output", "displays a JSON value nested 600 levels deep: cut, flagged, graded",
         lambda ctx: insert_after(reference(ctx), "setup", DEEP_JSON_OUTPUT),
         "graded", FULL, flags=("in the notebook's outputs: data nested deeper than 100 levels was cut",),
         outputs_contain=("[cut by the grader: nested too deeply]",)),
    Case("lone_surrogate_output", "prints a lone UTF-16 surrogate on stdout and stderr: replaced, flagged, graded",
         lambda ctx: insert_after(reference(ctx), "setup", LONE_SURROGATE_OUTPUT),
         "graded", FULL, flags=("in the notebook's outputs: text that is not valid Unicode was replaced (U+FFFD)",),
         outputs_contain=("half a character: \\ufffd and more text",)),
    Case("hostile_file", "the submitted file holds a lone surrogate in a cell's source and metadata nested 50 "
         "levels deep (within the budget, not on the allow-list): replaced, flagged, the metadata dropped, graded",
         _hostile_file, "graded", FULL,
         flags=("in the submitted file: text that is not valid Unicode was replaced (U+FFFD)",)),
    Case("deep_file", "the reference with metadata nested 600 levels deep: refused, measured before it is parsed",
         lambda ctx: _hostile_file(ctx, 600), "zero", 0.0,
         reason="the file's JSON is nested 602 levels deep, deeper than the 64 a notebook may be"),
    Case("json_too_deep_to_read", "a file nested deeper than any JSON reader goes: rejected for this learner",
         lambda ctx: b"[" * 200_000 + b"]" * 200_000, "zero", 0.0,
         reason="the file's JSON is nested 200000 levels deep, deeper than the 64 a notebook may be"),
    Case("node_bomb", "5 MB of empty lists in the notebook's metadata: refused before it is parsed",
         lambda ctx: NODE_BOMB, "zero", 0.0,
         reason="the file holds 1747634 JSON values, more than the 500000 a notebook may hold"),
    Case("not_utf8", "a notebook saved in UTF-16", lambda ctx: json.dumps({"cells": []}).encode("utf-16"),
         "zero", 0.0, reason="malformed JSON (the file is not UTF-8 text)"),
    Case("forged_abort_frame", "a notebook that writes the kernel's own 'setup failed' frame, with terminal escape "
         "codes, then exits: the learner's zero with the text cleaned, never a grader failure",
         lambda ctx: insert_after(reference(ctx), "setup", FORGED_ABORT),
         "zero", 0.0, reason="kernel died (the notebook broke the Python it runs in: RuntimeError)",
         extra={"feedback_lacks": ("FATAL", "exploded")}),
    Case("forged_exception", "the reference, then an exception class of its own, named and worded to ask for full marks "
         "by hand, raised where the kernel encodes its result: the reason names the exception as 'its own class' and "
         "neither the reason, the flags nor any cell's message carries a word of it",
         lambda ctx: append_cell(reference(ctx), FORGED_EXCEPTION),
         "zero", 0.0, reason="kernel died (the notebook broke the Python it runs in: an exception of its own class)",
         extra={"feedback_lacks": FORGED_WORDS}),
    Case("forged_nan_result", "a result frame holding NaN (valid to Python's reader, refused by the grader's "
         "writers): the learner's zero, never a silent monitor",
         lambda ctx: insert_after(reference(ctx), "setup", FORGED_NAN_RESULT),
         "zero", 0.0, reason="the notebook interfered with the grader's result channel"),
    Case("oversized_result", "100 MB of numbers as the result: refused before it is decoded past a budget, "
         "never re-encoded larger",
         lambda ctx: insert_after(reference(ctx), "setup", OVERSIZED_RESULT),
         "zero", 0.0, reason="the notebook interfered with the grader's result channel"),
    Case("grader_pipes_via_proc", "tries to write forged reports into the monitor's, zygote's and engine's pipes "
         "through /proc/<pid>/fd: none is reachable (pid namespace; Landlock at the process level)",
         lambda ctx: insert_after(reference(ctx), "setup", GRADER_PIPES),
         "graded", FULL, outputs_contain=("reached 0 of the grader's pipes",), alone=True),
    Case("sysv_ipc", "creates a System V shared memory segment (256 MB, touched), a message queue and a "
         "semaphore set: refused (seccomp) at every level, nothing left on the host",
         lambda ctx: insert_after(reference(ctx), "setup", SYSV_IPC),
         "graded", FULL, outputs_contain=("shmget refused EPERM", "msgget refused EPERM", "semget refused EPERM"),
         outputs_lack=("created", "touched")),
    Case("empty_answer", "dot_product_variance returns [] where a number is expected: loses the variance points",
         lambda ctx: append(reference(ctx), "dot_product_variance", EMPTY_VARIANCE),
         "graded", FULL - 2, failing=VARIANCE),
    Case("active_outputs", "the reference, plus HTML, JavaScript, SVG, markdown, LaTeX and widget outputs, an object "
         "with an HTML repr and a markdown cell with a script: full marks, every such output kept as text behind "
         "a note, and the autograded notebook formgrader opens holds nothing a front-end renders as active",
         _active_outputs, "graded", FULL,
         outputs_contain=tuple(f"[removed by the grader: {m} output, shown as text]" for m in ACTIVE_MIMES),
         extra={"autograded_inert": "ACTIVEMARK"}),
    Case("hostile_student_id", "the reference graded under a student id a learner chose as their folder name "
         "(issue 24, class 2): mathtext, a spreadsheet formula and markup: full marks under exactly that id, and the "
         "class report over the batch draws it as text and escapes it", reference, "graded", FULL,
         student=HOSTILE_ID, extra={"class_report": True}),
    Case("symlink_to_solution", "the notebook is a symbolic link to the course's solution notebook: refused, "
         "never followed", lambda ctx: Special("symlink", ctx.course.source_notebook(CHAPTER)),
         "zero", 0.0, reason="not a regular file (a symbolic link): refused"),
    Case("hardlink_to_solution", "the notebook is a hard link to the course's solution notebook (a regular file; "
         "`grade`'s discovery refuses it by its inode before any engine sees it): the engine grades it as usual, and "
         "its hidden tests are a suspicion for the instructor, never a score or a flag the learner sees",
         lambda ctx: Special("hardlink", ctx.course.source_notebook(CHAPTER)),
         "graded", FULL, suspicions=(suspicion("test_masked_softmax_hidden"),)),
    Case("fifo_submission", "the notebook is a FIFO nobody writes to: refused at once, never read (a read would "
         "block forever)", lambda ctx: Special("fifo"),
         "zero", 0.0, reason="not a regular file (a FIFO): refused"),
    Case("warning", "a correct answer that warns and writes to stderr keeps its points",
         lambda ctx: append(reference(ctx), "scaled_dot_product_attention",
                            "import warnings\n_real_sdpa = scaled_dot_product_attention\n"
                            "def scaled_dot_product_attention(*a, **k):\n" + textwrap.indent(WARNING, "    ")
                            + "    return _real_sdpa(*a, **k)"),
         "graded", FULL, outputs_contain=("this answer triggers a warning", "a note on stderr")),
]
