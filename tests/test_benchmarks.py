"""Benchmarks that cannot rot: every benchmark in benchmarks/ runs at its smallest size (``--smoke``) as its own
command and must print its figures (issue 42, "Performance").

A benchmark nothing runs breaks silently: ``bench_grading.py`` wrapped a private method of the isolated engine and
failed on chapter 9 once that method took a new argument. So each test here runs one benchmark the way a reader
does (``python benchmarks/NAME.py --smoke``) and asserts that it exits 0 and prints every line of figures it
promises, numbers included. No test reads a number's value as a speed: figures are machine-dependent and belong
to the benchmark's reader, never to an assertion. Two more tests keep the table honest: every benchmark has a smoke
size here, and no benchmark uses a private (underscore) name of another module.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.isolation import STAGES

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
NUM = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"  # a printed figure: 1, 0.25, 4.4, 1e+02
HELPERS = {"timed_engine.py"}  # imported by a benchmark (AUTOGRADER_ENGINE), not run on its own

# The engine's per-notebook stages, reported through Engine(on_stage=...): "reference profile" only when grade()
# had to build it (the benchmark builds the profiles before its clocks start).
ENGINE_STAGES = [s for s in STAGES if s != "reference profile"]

SMOKE = {
    # grading through the isolated engine, chapter 9 included: its memory-budget cells are the engine's second kind
    # of sandbox job, the path that broke
    "bench_grading.py": (pytest.mark.sandbox, [
        rf"^ours, whole class \(s\): +{NUM} +CPU {NUM}$",
        rf"^nothing to grade \(s\): +{NUM} +CPU {NUM} ",
        rf"^first notebook graded after \(s\): +{NUM} ",
        rf"^reference profiles, one-time \(s\): +{NUM} ",
        *(rf"^    {re.escape(stage)} +{NUM}$" for stage in ENGINE_STAGES),
        rf"^    feedback html +{NUM}$",
        rf"^    gradebook write +{NUM}$",
        rf"^    wall time x workers / notebooks +{NUM} ",
    ]),
    "isolation_overhead.py": (pytest.mark.sandbox, [
        rf"^stock nbgrader autograde : +{NUM} s per notebook$",
        rf"^\S.*: +{NUM} s per notebook, ratio to stock +{NUM} \(\+ {NUM} s engine start, \+ {NUM} s profile\)$",
    ]),
    # executes chapter 9's reference solutions (its notebook's cells) in-process
    "efficient_attention.py": (pytest.mark.notebooks, [
        *(rf"^ +256 +{m} +{NUM} +{NUM} +{NUM} +{NUM}$" for m in ("naive", "tiled", "sdpa")),
        *(rf"^ +128 +{m} +{NUM} +{NUM} +{NUM} +{NUM} +{NUM} +{NUM} +{NUM} +{NUM}$" for m in ("naive", "flash", "sdpa")),
        rf"^ +4 tokens: {NUM} ms/token with the cache, {NUM} ms/token recomputing \(cache takes {NUM} of the time\); "
        r"same tokens: True$",
    ]),
    "intake_memory.py": (pytest.mark.unit, [
        # accepted or refused (the intake's limits decide), never "crashed"
        rf"^intake +{name} +{NUM} MB +self +{NUM} MB +child +{NUM} MB +extra/size +{NUM}x +{NUM} s +"
        r"(accepted|refused: .+)$"
        for name in ("control", "meta19", "out19", "long19", "compact50")
    ]),
    # grading on submission (autograder/serve.py): throwaway accounts submit through nbgrader, a warm service grades
    "bench_serve.py": (pytest.mark.sandbox, [
        rf"^latency, submit returned -> feedback fetchable \(s\): median {NUM}  p95 {NUM}  \(1 submission, one "
        r"learner\)$",
        rf"^burst of 2, serve \(warm\) \(s\): {NUM}  {NUM} notebooks/s$",
        rf"^burst of 2, grade \(s\): {NUM}  {NUM} notebooks/s$",
        rf"^serve throughput / grade throughput: {NUM}$",
    ]),
    "bench_similarity.py": (pytest.mark.unit, [
        rf"^20 learners x \w+: fingerprinting {NUM} s, indexed comparison {NUM} s \(total {NUM} s\); naive all-pairs "
        rf"comparison of the same sets {NUM} s \(ratio naive/indexed {NUM}x\); \d+ pairs reported$",
    ]),
}


def run_smoke(name: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ)
    env.pop("ATTENTION_COURSE_ROOT", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(BENCHMARKS / name), "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    return done, time.monotonic() - started


@pytest.mark.parametrize("name", [pytest.param(name, marks=mark) for name, (mark, _) in SMOKE.items()])
def test_benchmark_prints_its_figures_at_its_smoke_size(name):
    done, seconds = run_smoke(name)
    print(f"{name} --smoke: {seconds:.1f} s")  # the suite's cost of this smoke run (shown with pytest -s)
    assert done.returncode == 0, \
        f"{name} --smoke exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    lines = done.stdout.splitlines()
    missing = [p for p in SMOKE[name][1] if not any(re.search(p, line) for line in lines)]
    assert not missing, f"{name} --smoke did not print lines matching {missing}; it printed:\n{done.stdout}"


def benchmark_scripts() -> list[str]:
    return sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS and not p.name.startswith("_"))


@pytest.mark.unit
def test_every_benchmark_has_a_smoke_size_that_the_suite_runs():
    scripts = benchmark_scripts()
    assert "bench_grading.py" in scripts  # the glob sees the folder
    assert sorted(SMOKE) == scripts, "a benchmark without a smoke run here (or a stale entry): give it --smoke"
    for name in scripts:
        assert "--smoke" in (BENCHMARKS / name).read_text(), f"{name} takes no --smoke"


def private_names(path: Path) -> list[str]:
    """Underscore names ``path`` takes from other modules: ``from m import _x``, and ``mod._x`` on anything but
    self/cls (dunders such as ``__file__`` are public)."""
    found = []

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if private(a.name)]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, ast.unparse(node)))
    return [f"line {line}: {text}" for line, text in sorted(set(found))]


@pytest.mark.unit
def test_benchmarks_use_only_public_names():
    used = {p.name: private_names(p) for p in sorted(BENCHMARKS.glob("*.py"))}
    assert used and not {name: names for name, names in used.items() if names}


@pytest.mark.unit
def test_the_private_name_check_sees_what_broke_bench_grading(tmp_path):
    old = tmp_path / "old_timed_engine.py"  # the shape of the benchmark before this change
    old.write_text("from autograder import isolation\nfrom autograder.batch import _make_engine\n"
                   "isolation._decide = None\n\nclass Engine(isolation.Engine):\n"
                   "    def _run(self, job):\n        return super()._run(job)\n")
    assert private_names(old) == ["line 2: from autograder.batch import _make_engine",
                                  "line 3: isolation._decide", "line 7: super()._run"]
