"""What one grading run did, counted: the line ``grade`` prints, the ``--stats`` file, and the per-stage seconds
that the run's steps (backend, sinks) add to as they go."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Summary:
    submissions: int = 0
    up_to_date: int = 0
    graded: int = 0
    zero: int = 0  # "not gradable": the grader could not grade the notebook (status "zero"; it scores 0)
    scored_zero: int = 0  # every recorded notebook worth 0 points, the not gradable ones included
    flagged: int = 0
    failed: int = 0
    seconds: float = 0.0
    failures: list = field(default_factory=list)
    profile_seconds: float = 0.0  # the one-time reference profiles (per chapter; cached on disk)
    first_result_seconds: float | None = None  # from the start of the run to the first graded notebook
    workers_started: int = 0
    # Seconds spent per stage, summed over notebooks (engine stages when the engine reports them: a result's
    # ``timings``) and once-per-run stages (csv, report).
    stages: dict = field(default_factory=dict)

    @property
    def processed(self) -> int:
        return self.graded + self.zero + self.failed

    def add_stage(self, name: str, seconds: float) -> None:
        self.stages[name] = self.stages.get(name, 0.0) + float(seconds)

    def line(self) -> str:
        per = f", {self.seconds / self.processed:.2f} s per notebook" if self.processed else ""
        extra = ""
        if self.processed:
            extra = f"; reference profiles {self.profile_seconds:.1f} s"
            if self.first_result_seconds is not None:
                extra += f", first notebook graded {self.first_result_seconds:.1f} s after the start"
        # The words of the class report and grades.csv (report.OUTCOMES).
        return (f"{self.submissions} submissions: {self.graded} graded, {self.zero} not gradable, "
                f"{self.scored_zero} scored zero, {self.flagged} flagged, "
                f"{self.failed} failed, {self.up_to_date} already up to date; {self.seconds:.1f} s{per}{extra}")

    def to_json(self) -> dict:
        data = asdict(self)
        data["processed"] = self.processed
        return data
