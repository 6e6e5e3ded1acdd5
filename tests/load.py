"""A busy machine on demand: processes that spin while a test runs (CpuBurner), and how many times the hostile
corpus is graded under them (corpus_runs, batch_params).

CI machines are shared: a test that passes only on an idle machine fails there. In every run of the suite the
hostile corpus is graded at one level beside a CpuBurner of one spinning process: the suite runs one pytest worker
per core, so with the other worker busy on its own file the grading engine and its kernels share the 2 cores with
at least two other runnable processes: a load of 3 or more on 2 cores, each kernel getting at most 2/3 of a core.
(One spinner per core, before, made it 4 and took as much from the other worker's file as from this batch.)
``HOSTILE_RUNS=N`` grades it N times in a row at every level, each under a burner of one spinning process per core,
the full overload whatever else runs (tests/test_isolation.py, tests/test_unprivileged.py)::

    HOSTILE_RUNS=5 .venv/bin/python -m pytest tests/test_isolation.py -k "test_hostile_notebook and root" -n 0
"""
from __future__ import annotations

import os
import subprocess
import sys

# spins until stopped, or until the process that started it (argv[1]) is gone: a test killed before it could stop it
SPIN = "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    for _ in range(1_000_000):\n        pass\n"


class CpuBurner:
    """``processes`` Python processes (default: one per core) spinning at normal priority until the block ends.

    They compete with everything else for the CPUs (a nice'd burner would only take idle time); each is stopped by
    its own pid. ``cpu_seconds``: the CPU time they took, once stopped (what the rest of the machine lost to them)."""

    def __init__(self, processes: int | None = None):
        self.processes = processes or os.cpu_count() or 1
        self.procs: list[subprocess.Popen] = []
        self.cpu_seconds = 0.0

    def __enter__(self) -> "CpuBurner":
        try:
            for _ in range(self.processes):
                self.procs.append(subprocess.Popen([sys.executable, "-S", "-c", SPIN, str(os.getpid())], stdin=subprocess.DEVNULL,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def running(self) -> int:
        return sum(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        self.cpu_seconds += sum(cpu_seconds_of(p.pid) for p in self.procs if p.poll() is None)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def cpu_seconds_of(pid: int) -> float:
    """User plus system CPU time of a running process (/proc/<pid>/stat), 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def corpus_runs() -> int:
    """How many times each level's hostile corpus is graded in a row (``HOSTILE_RUNS``, default 1)."""
    value = os.environ.get("HOSTILE_RUNS", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"HOSTILE_RUNS must be a whole number of at least 1, not {value!r}")
    return int(value)


def batch_params(levels: tuple[str, ...], loaded: tuple[str, ...]) -> tuple[list[tuple[str, int, int]], list[str]]:
    """The hostile corpus's batches as params and ids: ``(level, run, spinning processes beside it)``, 0 for none.

    One run per level (the suite): the levels in ``loaded`` beside one spinning process (the other pytest worker
    keeps the other core busy), ids the level's name. ``HOSTILE_RUNS=N`` (N > 1): N runs of each level in a row,
    every one beside one spinning process per core, ids ``<level>-run<k>``."""
    runs = corpus_runs()
    if runs == 1:
        return [(level, 1, int(level in loaded)) for level in levels], list(levels)
    every_core = os.cpu_count() or 1
    params = [(level, k, every_core) for level in levels for k in range(1, runs + 1)]
    return params, [f"{level}-run{k}" for level, k, _ in params]
