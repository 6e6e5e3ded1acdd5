"""The similarity check's child process: learner text processed on the trusted side, inside stated budgets.

The similarity check (autograder/similarity.py) reads every learner's notebook and code on the grader's own
side, outside any sandbox, so a learner's file is its input. It never runs in ``grade``'s process: it runs
in a fresh Python (``python -m autograder.similarity REQUEST``) that first sets its own limits, before it
reads any learner file, and the parent waits for it with a wall-clock limit:

- ``RLIMIT_CPU``: :attr:`Budget.cpu_s`; past it the kernel stops the child (SIGXCPU, then SIGKILL);
- ``RLIMIT_AS``: :attr:`Budget.memory_bytes` of address space; an allocation past it fails (Python raises
  MemoryError: one submission that needs more is listed as "not compared", the rest go on);
- ``RLIMIT_FSIZE``: :attr:`Budget.result_bytes` for the result it writes (the parent reads no more);
- ``RLIMIT_CORE`` 0: a stopped child leaves no core file;
- wall clock: :attr:`Budget.wall_s`, enforced by the parent, which kills the child's whole process group.

A child that does not finish is one line of fixed text (:func:`run`'s reason), never a stalled or killed
``grade``: the caller writes it into ``similarity.csv``, the class report and its own output. The reason
never quotes the child's output (it may hold learner text): only which budget it used up, or its exit status.

The budgets are data, scaled by the number of notebooks the child reads (:meth:`Budget.for_class`); the
numbers and why are in the constants below.
"""
from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

MIB = 1 << 20
# CPU seconds: the fixed part is the interpreter, nbformat and the course's release and reference notebooks of
# every chapter (about 1 s); the part per notebook covers reading a notebook at the intake's 50 MB size cap
# (in a child of its own, with its own budget) and normalising all of a notebook's code, which the intake bounds
# at 4 MiB (1 MiB a cell): the scanner's slowest input there, 4 MiB of unread `a=1` lines, takes 4.4 s of CPU on
# the 2-core development machine under load (blank lines 1.7 s, `id(0)` lines 2.7 s, one token per character 0.8 s
# as the token cap stops it; /tmp/sim_worst.py in commit message). 10 s is 2.2 times that. An ordinary class of 500
# needs well under a minute; this is a ceiling, not an estimate.
CPU_BASE_S = 60
CPU_PER_NOTEBOOK_S = 10.0
# Wall clock: the CPU budget three times over (the stage runs beside the workers' shutdown and other jobs on a
# shared machine), plus the start.
WALL_FACTOR = 3.0
WALL_EXTRA_S = 30.0
# Address space, per process of the stage. The fixed part: the interpreter and its modules (about 45 MB), the
# comparison's index, and the intake's reader (autograder/intake.py reads each notebook in a child of its own,
# which inherits this hard limit and may grow by 1 GiB on its own budget: the base leaves that budget whole, so
# a notebook grading reads is never one the check cannot read). The part per notebook: what the check keeps of
# each learner, the code it read (at most the intake's 4 MiB of text, up to 4 bytes a character: 16 MiB) and its
# token and fingerprint arrays (about 16 bytes per token, at most similarity.TOKEN_CAP tokens: 1 MiB): 24 MiB
# with room. Normalising one notebook needs up to 130 MB more while it runs (4 MiB of `a=1` lines), within the base.
MEMORY_BASE_BYTES = 2048 * MIB
MEMORY_PER_NOTEBOOK_BYTES = 24 * MIB
# The result the child hands back: every pair's side-by-side code (escaped HTML) and the CSV rows. A class of
# 500 with thousands of similar pairs writes tens of MB; past this the stage reports that its result was too
# large rather than have the parent read it.
RESULT_BYTES = 256 * MIB

EXIT_MEMORY = 3  # the child ran out of its address space outside one submission
EXIT_RESULT_TOO_LARGE = 4  # writing the result hit RLIMIT_FSIZE
EXIT_ERROR = 5  # any other exception in the child (its type name is in the result file)


@dataclass(frozen=True)
class Budget:
    cpu_s: int
    memory_bytes: int
    wall_s: float
    result_bytes: int = RESULT_BYTES

    @classmethod
    def for_class(cls, notebooks: int) -> "Budget":
        cpu = int(CPU_BASE_S + CPU_PER_NOTEBOOK_S * max(0, notebooks))
        return cls(cpu_s=cpu, memory_bytes=MEMORY_BASE_BYTES + MEMORY_PER_NOTEBOOK_BYTES * max(0, notebooks),
                   wall_s=WALL_FACTOR * cpu + WALL_EXTRA_S)

    def describe(self) -> str:
        return (f"{self.cpu_s} CPU s, {self.memory_bytes // MIB} MiB of memory, {self.wall_s:.0f} s of wall "
                f"clock")


@dataclass
class Outcome:
    result: dict | None  # what the child's work returned, or None
    reason: str = ""  # why there is no result: fixed text naming the budget or the exit status
    limits: dict | None = None  # the limits the child reported it ran under (its getrlimit)


_LIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE,
           "core": resource.RLIMIT_CORE}


def apply(budget: Budget) -> dict:
    """In the child, before it reads any learner file: its own limits, soft and hard (it cannot raise them
    again unless it is root, and the code that runs next is the grader's, not the learner's). Returns what
    ``getrlimit`` now says, for the parent to check."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # SIGXCPU at the soft limit; the hard limit one second later is SIGKILL, which nothing can catch.
    resource.setrlimit(resource.RLIMIT_CPU, (budget.cpu_s, budget.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (budget.memory_bytes, budget.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (budget.result_bytes, budget.result_bytes))
    return {name: list(resource.getrlimit(which)) for name, which in _LIMITS.items()}


def package_root() -> Path:
    """The folder that holds the ``autograder`` package this process runs: the child imports the same code."""
    return Path(__file__).resolve().parent.parent


def run(module: str, request: dict, budget: Budget) -> Outcome:
    """Run ``python -m MODULE REQUEST_FILE`` under ``budget`` and read back its result.

    ``request`` (JSON) reaches the child's :func:`child` with the budget; the child writes its work's result as
    JSON beside it. Returns the result, or None with the reason the child has none."""
    with tempfile.TemporaryDirectory(prefix="autograder-similarity-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps({"request": request, "budget": asdict(budget), "result": str(res)}),
                       encoding="utf-8")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package_root()), env.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen([sys.executable, "-m", module, str(req)], cwd=package_root(), env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=budget.wall_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Outcome(None, f"stopped after its wall-clock budget of {budget.wall_s:.0f} s")
        except BaseException:  # Ctrl-C in grade: the child goes too
            _kill_group(proc)
            raise
        _kill_group(proc)  # anything it started is gone with it
        data = _read_result(res, budget)
        limits = data.get("limits") if isinstance(data, dict) else None
        if rc == 0 and isinstance(data, dict) and "result" in data:
            return Outcome(data["result"], "", limits)
        return Outcome(None, _why(rc, budget, data), limits)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read_result(path: Path, budget: Budget) -> dict | None:
    try:
        if path.stat().st_size > budget.result_bytes:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _why(rc: int, budget: Budget, data: dict | None) -> str:
    """The reason, from the exit status and the budgets only (never from what the child wrote or printed)."""
    if rc in (-signal.SIGXCPU, -signal.SIGKILL):
        return f"stopped after its CPU budget of {budget.cpu_s} s"
    if rc == EXIT_MEMORY:
        return f"stopped: it needed more than its memory budget of {budget.memory_bytes // MIB} MiB"
    if rc == EXIT_RESULT_TOO_LARGE:
        return f"stopped: its result was larger than {budget.result_bytes // MIB} MiB"
    if rc == EXIT_ERROR:
        error = data.get("error") if isinstance(data, dict) else None
        kind = error if isinstance(error, str) and error.isidentifier() and len(error) <= 64 else "an exception"
        return f"stopped by an error in the check ({kind})"
    if rc < 0:
        return f"stopped by signal {-rc}"
    return f"stopped with exit status {rc} and no result"


def child(argv: list[str], work) -> int:
    """The child's main: limits first, then ``work(request) -> JSON-able result``, written for the parent."""
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    budget = Budget(**spec["budget"])
    limits = apply(budget)
    out = Path(spec["result"])
    try:
        result = work(spec["request"])
        _write(out, {"result": result, "limits": limits})
    except MemoryError:
        _write_small(out, {"error": "MemoryError", "limits": limits})
        return EXIT_MEMORY
    except OSError as exc:
        if exc.errno == errno.EFBIG:  # RLIMIT_FSIZE (Python ignores SIGXFSZ, so the write fails instead)
            return EXIT_RESULT_TOO_LARGE
        _write_small(out, {"error": type(exc).__name__, "limits": limits})
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - reported to the parent by type only
        _write_small(out, {"error": type(exc).__name__, "limits": limits})
        return EXIT_ERROR
    return 0


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _write_small(path: Path, data: dict) -> None:
    try:
        _write(path, data)
    except (OSError, MemoryError):
        pass
