"""The isolated engine with a stopwatch: ``AUTOGRADER_ENGINE=benchmarks.timed_engine`` (benchmarks only).

It grades exactly as :class:`autograder.isolation.Engine` and adds ``result.timings``, seconds per stage of that
notebook, which ``python -m autograder grade`` sums into its ``--stats`` JSON. The stages are the engine's own,
reported through its public ``on_stage`` hook (their names and meaning: ``autograder.isolation.STAGES`` and the
``Engine`` docstring), so this module knows nothing of the engine's insides and cannot drift from them.
"""
from __future__ import annotations

from pathlib import Path

from autograder import isolation
from autograder.isolation import Limits, feedback_html  # noqa: F401 - the engine module's interface


class Engine(isolation.Engine):
    def __init__(self, course_root: Path, limits: Limits = Limits()):
        self.stage_seconds: dict[str, float] = {}
        super().__init__(course_root, limits, on_stage=self.add_stage)

    def add_stage(self, name: str, seconds: float) -> None:
        self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + seconds

    def grade(self, chapter, submission, student):
        self.stage_seconds = {}
        result = super().grade(chapter, submission, student)  # calls add_stage once per stage before it returns
        timings = {**dict(result.timings), **{k: round(v, 4) for k, v in self.stage_seconds.items()}}
        return result.replace(timings=timings)  # a GradingResult is frozen
