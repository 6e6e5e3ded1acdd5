"""The isolated engine with a stopwatch: ``AUTOGRADER_ENGINE=benchmarks.timed_engine`` (benchmarks only).

It grades exactly as :class:`autograder.isolation.Engine` (a subclass that only times) and adds
``result.timings``, seconds per stage of that notebook, which ``python -m autograder grade`` sums into
its ``--stats`` JSON:

- ``read + repair``: reading the submission and rebuilding its structure from the source;
- ``fork + job transfer``: the engine's round trip to the sandbox minus what the sandbox measured itself
  (the zygote forking a monitor, sending the job, reading the report back);
- ``sandbox setup + kernel start + teardown``: the sandbox's own time minus its cells' (namespaces,
  private root, cgroups, forking the kernel, waiting for it to exit);
- ``cell execution``: the learner's and the test cells, as the kernel timed them;
- ``decision``: the trusted decision of every graded cell from the records and the profile;
- ``engine other``: the rest of Engine.grade (profile lookup, merging outputs, JSON conversion).
"""
from __future__ import annotations

import time

from autograder import isolation
from autograder.isolation import Limits, feedback_html  # noqa: F401 - the engine module's interface

_clock: dict | None = None


def _timed(name, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if _clock is not None:
                _clock[name] = _clock.get(name, 0.0) + time.perf_counter() - t0
    return wrapper


# Module-level functions Engine._grade calls by name (this worker process only).
isolation.structure.load_submission = _timed("read + repair", isolation.structure.load_submission)
isolation.structure.repair = _timed("read + repair", isolation.structure.repair)
isolation._decide = _timed("decision", isolation._decide)


class Engine(isolation.Engine):
    def _run(self, job: dict) -> dict:
        t0 = time.perf_counter()
        report = super()._run(job)
        if _clock is not None and job.get("grading_mode") == "sandbox":
            round_trip = time.perf_counter() - t0
            inside = float(report.get("seconds") or 0.0)
            cells = report.get("cells") if isinstance(report.get("cells"), dict) else {}
            executing = sum(float(c.get("seconds") or 0.0) for c in cells.values() if isinstance(c, dict))
            _clock["fork + job transfer"] = _clock.get("fork + job transfer", 0.0) + max(0.0, round_trip - inside)
            _clock["sandbox setup + kernel start + teardown"] = \
                _clock.get("sandbox setup + kernel start + teardown", 0.0) + max(0.0, inside - executing)
            _clock["cell execution"] = _clock.get("cell execution", 0.0) + executing
        return report

    def grade(self, chapter, submission, student):
        global _clock
        self.profile(chapter)  # cached after the first call; not part of a notebook's cost
        _clock = {}
        t0 = time.perf_counter()
        try:
            result = super().grade(chapter, submission, student)
        finally:
            clock, _clock = _clock, None
        total = time.perf_counter() - t0
        clock["engine other"] = max(0.0, total - sum(clock.values()))
        return result.replace(timings={k: round(v, 4) for k, v in clock.items()})  # a GradingResult is frozen
