import contextlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Reference outputs and figures are produced on the CPU unless a test asks for CUDA explicitly.
os.environ.setdefault("MPLBACKEND", "Agg")
# One CPU thread per torch process unless a test asks for more.
# The suite runs one pytest worker per core and each may start kernels of its own: torch's default of one
# OpenMP thread per core, spinning while it waits, made every notebook 5-15x slower under that load.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"
# Where a test does ask for more threads, waiting threads sleep instead of spinning: with the other core busy,
# spinning once made chapter 8's two-thread regeneration take 304 s instead of 21 s. (Numerics are unchanged.)
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

# Every test carries exactly one of these (see README, "For maintainers"):
#   unit       pure Python, no notebook executed, no server: `pytest -m unit` is the inner loop (seconds)
#   notebooks  executes notebooks (nbclient, nbval, stock nbgrader)
#   sandbox    grades through the isolated engine (zygote, namespaces, cgroups)
#   services   starts a server (PostgreSQL, Dask, a browser, JupyterLab) on 127.0.0.1
KINDS = ("unit", "notebooks", "sandbox", "services")


# CPU seconds each test file takes in the whole suite on 2 cores (`pytest --cpu-report`, scripts/cpu_report.py;
# measured 2026-11-28 on a fresh clone at b353ecc on idle cores, where the reference profiles are built inside
# whichever of the first two files takes the lock first). Whole files go to the xdist workers in this order,
# longest first (scripts/run_tests.sh passes --no-loadscope-reorder, which would otherwise order them by their
# number of tests and leave single long tests, the services, for last), so the suite does not end with one worker
# finishing a long file while the other idles. Only the order depends on these numbers: a stale one
# costs time, never a result; a file not listed goes last.
FILE_SECONDS = {"test_chapters.py": 225, "test_release.py": 141, "test_catalogues.py": 124, "test_isolation.py": 100,
                "test_shortcuts.py": 70, "test_kit.py": 60, "test_batch.py": 58, "test_unprivileged.py": 53,
                "test_ch9_cheats.py": 51, "test_benchmarks.py": 48, "test_kit_language.py": 46,
                "test_deadlines.py": 41, "test_exchange.py": 31, "test_serve.py": 31, "test_mutants.py": 29,
                "test_devices.py": 27, "test_jupyterhub.py": 27, "test_dask.py": 22, "test_translations.py": 22,
                "test_book.py": 21, "test_initialisation.py": 19, "test_postgres.py": 18,
                "test_malformed_class.py": 16, "test_selfcheck.py": 16, "test_ch8_cheats.py": 13,
                "test_formgrader.py": 13, "test_similarity.py": 13, "test_class_language.py": 9,
                "test_book_walk.py": 8, "test_report.py": 7, "test_intake.py": 7, "test_verdict_properties.py": 5,
                "test_check_hints.py": 4, "test_active_content.py": 4, "test_new_gradebook.py": 4,
                "test_grade_one.py": 3, "test_trust.py": 3}


@pytest.hookimpl(tryfirst=True)  # before -m deselects, so every collected test is checked
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.name, 0))  # stable: a file's own order is kept
    wrong = []
    for item in items:
        kinds = sorted({m.name for m in item.iter_markers() if m.name in KINDS})
        if len(kinds) != 1:
            wrong.append(f"{item.nodeid}: {kinds or 'none'}")
        elif kinds[0] in ("notebooks", "sandbox"):
            # The caches must exist before any course copy is made (copies take what is there).
            item.fixturenames[:0] = ["engine_profiles"]
    if wrong:
        raise pytest.UsageError("every test needs exactly one of the markers " + ", ".join(KINDS)
                                + ":\n  " + "\n  ".join(wrong))


# -- where the suite's time goes: CPU seconds per file ---------------------------------------------------------
# On 2 cores the suite is CPU-bound, so the number that matters for its length is CPU time, not a worker's wall
# time (a file that starts two nbgrader processes keeps both cores busy while its worker shows one wall clock).
# `--cpu-report=FILE` writes, per test file, the CPU seconds of the worker and of the processes it started and
# waited for (kernels, nbgrader, the sandbox), and its wall seconds; scripts/cpu_report.py sums the workers'
# files. Servers that detach (PostgreSQL) are not counted, nor is what a Chromium or a sandbox's double fork leaves
# unreaped; so each worker also records the whole machine's busy and idle CPU time over its session (/proc/stat),
# and the script reports them for the run: idle core-seconds are what more parallelism could still use, busy ones
# what only less work can save.


def pytest_addoption(parser):
    parser.addoption("--cpu-report", default=None, help="write CPU and wall seconds per test file to this file")


def _cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


_SPENT: dict[str, list[float]] = {}
_MACHINE: dict[str, list[float]] = {}  # "start" and "finish": [epoch seconds, busy core-seconds, idle core-seconds]


def _machine_seconds() -> list[float] | None:
    """[now, busy, idle] in core-seconds since boot for the whole machine (/proc/stat's first line: iowait counts as
    idle), or None where there is no /proc/stat."""
    import time

    try:
        with open("/proc/stat") as fh:
            jiffies = [int(v) for v in fh.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = jiffies[3] + jiffies[4]
    return [time.time(), (sum(jiffies) - idle) / tick, idle / tick]


def pytest_sessionstart(session):
    if session.config.getoption("--cpu-report") and (now := _machine_seconds()):
        _MACHINE["start"] = now


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not item.config.getoption("--cpu-report"):
        yield
        return
    import time

    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    spent = _SPENT.setdefault(item.path.name, [0.0, 0.0])
    spent[0] += _cpu_seconds() - cpu
    spent[1] += time.monotonic() - wall


def pytest_sessionfinish(session):
    target = session.config.getoption("--cpu-report")
    if target and _SPENT:
        import json

        if "start" in _MACHINE and (now := _machine_seconds()):
            _MACHINE["finish"] = now
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # one file per worker, summed by the script
        Path(f"{target}.{worker}").write_text(json.dumps({**_SPENT, "__machine__": _MACHINE}, indent=1))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


# -- one reference run per chapter per suite ------------------------------------------------------------------
# The engine's reference profiles (grading/expected/isolation-<chapter>-<hash>.json, keyed by the source's hash,
# git-ignored) are the one reference run: the engine decides from them and stock nbgrader's kernels look their
# reference values up in them (attention_course.expected). Building them once, in the repository, lets every
# throwaway course copy reuse them instead of re-running the reference.


class _BuildLock:
    """One builder at a time across pytest-xdist workers: the second finds the caches built and reuses them."""

    def __enter__(self):
        import fcntl

        path = ROOT / "grading" / ".reference-build.lock"
        path.parent.mkdir(exist_ok=True)
        self.fh = open(path, "w")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.fh.close()  # releases the lock


# Seconds to build each chapter's reference profile on this 2-core machine (measured one chapter after another in
# one engine). Order only, like FILE_SECONDS: chapter 8's alone is as long as all the others together, so it goes
# first and the other engine builds the rest meanwhile (a fixed split of every other chapter left one core idle for
# 12 s of each suite run). A chapter missing here is built last; a stale number costs time, never a result.
PROFILE_SECONDS = {"08_transformer": 15.1, "09_efficient_attention": 4.7, "10_language_model": 2.7,
                   "02_kernel_regression": 2.3, "03_scoring_functions": 1.2, "06_positional_encoding": 0.6,
                   "07_attention_vs_cnn": 0.5, "05_multi_head_attention": 0.5, "04_self_attention": 0.5,
                   "01_cognitive_attention": 0.4, "11_serving_and_long_context": 1.5}


@pytest.fixture(scope="session")
def engine_profiles():
    """The reference profiles of every chapter, built once per suite: two warm engines, one per core, each taking
    the next chapter as it is free, the longest first (PROFILE_SECONDS)."""
    from autograder.course import Course
    from autograder.isolation import GraderError, build_profiles

    course = Course()
    with _BuildLock():
        try:
            build_profiles(course.root, sorted(course.chapters(), key=lambda ch: -PROFILE_SECONDS.get(ch, 0)),
                           engines=2)
        except GraderError as exc:
            pytest.fail(str(exc))
    return course.grading / "expected"


def copy_reference_cache(course_root: Path) -> None:
    """Give a throwaway course copy the repository's cached reference profiles."""
    import shutil

    src = ROOT / "grading" / "expected"
    dest = Path(course_root) / "grading" / "expected"
    dest.mkdir(parents=True, exist_ok=True)
    for p in src.glob("*.json"):
        shutil.copy(p, dest / p.name)


@contextlib.contextmanager
def engine_on(course):
    """One warm isolated engine on ``course`` with the suite's grading limits; fails where isolated grading is
    unavailable."""
    from autograder.isolation import Engine, Limits

    with Engine(course.root, Limits(cell_timeout_s=120, notebook_timeout_s=300, memory_mb=2048)) as engine:
        missing = engine.missing_capabilities()
        if missing:
            pytest.fail(f"isolated grading is not available on this machine: missing {', '.join(missing)}")
        yield engine


@contextlib.contextmanager
def course_with_engine(tmp_path_factory):
    """A throwaway course copy (with the cached references) and one warm isolated engine on it, for a module
    that grades many notebooks: yields (course, engine)."""
    from autograder.course import Course

    course = Course().copy_to(tmp_path_factory.mktemp("course"))
    copy_reference_cache(course.root)
    with engine_on(course) as engine:
        yield course, engine
