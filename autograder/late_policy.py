"""The course's late-penalty policy, exactly as nbgrader defines it: read by grading and by every sink that shows
a late or held submission (the gradebook writer, the CSVs, the report, the LMS exports). The facts it applies
(due dates, extensions, recorded arrivals) are nbgrader's gradebook columns, written by the ``deadlines`` command
(autograder/deadlines.py, whose docstring says which and how a submission is held).

:class:`Policy` loads ``autograder/nbgrader_config.py`` with traitlets, builds nbgrader's ``AssignLatePenalties``
preprocessor from it and asks it for the plugin (``c.AssignLatePenalties.plugin_class``: nbgrader's own, or
``autograder.deadlines.PerHourPenalty``), then applies nbgrader's own clamp: so ``grade`` and ``nbgrader autograde``
compute every penalty with the same code and the same configuration."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from nbgrader.plugins import LateSubmissionPlugin

from .course import Course


def describe(plugin) -> str:
    """One line for learners and instructors: which policy is in force."""
    if hasattr(plugin, "describe"):
        return plugin.describe()
    method = getattr(plugin, "penalty_method", None)
    if type(plugin) is LateSubmissionPlugin:
        return "a late notebook scores zero" if method == "zero" else "no late penalty"
    return f"late penalty by {type(plugin).__module__}.{type(plugin).__name__}"


def config_file(course: Course) -> Path:
    """The nbgrader configuration stock nbgrader reads for this course (``Course.nbgrader_env``)."""
    return course.root / "autograder" / "nbgrader_config.py"


def load_config(course: Course):
    """The course's nbgrader configuration, read by traitlets as nbgrader's apps read it."""
    from traitlets.config.loader import PyFileConfigLoader

    path = config_file(course)
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


HELD = ("held for the instructor: no arrival time the grader can trust (none recorded, or one just before the due "
        "date that collect saw only after it; timestamp.txt is the learner's claim); the final "
        "score is withheld until the instructor records one (python -m autograder deadlines CHAPTER --received "
        "STUDENT=ISO)")


HELD_UNSURE = ("held for the instructor: collect recorded a change time just before the due date but saw the "
               "submission only after it, and a change through a shared file mapping can reach a file that long "
               "before its change time shows it (autograder/arrivals.py); the final score is withheld until the "
               "instructor records the arrival (python -m autograder deadlines CHAPTER --received STUDENT=ISO)")


def held(duedate: _dt.datetime | None, timestamp: _dt.datetime | None, score: float,
         unsure_until: _dt.datetime | None = None) -> bool:
    """Whether a submission's final score is withheld: a due date is set, there are points to lose (a zero is
    final whenever it arrived), and either no arrival time is recorded or the due date lies between the recorded
    time and ``unsure_until``, the latest the submission could have reached its state (``Arrival.unsure_until``:
    a ``ctime`` can lag a change through a shared mapping). ``duedate`` includes any extension."""
    if duedate is None or score <= 0:
        return False
    return timestamp is None or (unsure_until is not None and timestamp <= duedate < unsure_until)


@dataclass
class Lateness:
    """How late one submission was and what it cost."""
    seconds_late: float
    penalty: float | None  # None: nbgrader's "no penalty assigned" (also when on time)
    held: bool = False  # no arrival time while a due date is set: the whole score withheld (penalty == score)
    reason: str = ""  # HELD or HELD_UNSURE when held

    @property
    def points(self) -> float:
        return float(self.penalty or 0.0)


class Policy:
    """The course's late-penalty policy: nbgrader's plugin, built the way ``AssignLatePenalties`` builds it."""

    def __init__(self, config=None):
        from nbgrader.preprocessors import AssignLatePenalties

        self._pre = AssignLatePenalties(config=config) if config is not None else AssignLatePenalties()
        self._pre.init_plugin()  # plugin_class(parent=self), as nbgrader does before every notebook
        self.plugin = self._pre.plugin_inst

    @classmethod
    def for_course(cls, course: Course | None = None) -> "Policy":
        return cls(load_config(course or Course()))

    def describe(self) -> str:
        return describe(self.plugin)

    def penalty(self, student_id: str, score: float, seconds_late: float) -> float | None:
        """The penalty nbgrader's AssignLatePenalties would store: None when on time or when the plugin
        assigns none, else the plugin's answer clamped to [0, score]."""
        if not seconds_late or seconds_late <= 0:
            return None
        raw = self.plugin.late_submission_penalty(student_id, score, seconds_late)
        if raw is None:
            return None
        return float(self._pre._check_late_penalty(SimpleNamespace(score=score), raw))

    def lateness(self, student_id: str, score: float, timestamp: _dt.datetime | None,
                 duedate: _dt.datetime | None, extension: _dt.timedelta | None = None,
                 unsure_until: _dt.datetime | None = None) -> Lateness:
        """nbgrader's ``SubmittedAssignment.total_seconds_late`` and the penalty. ``timestamp`` is the recorded
        arrival (autograder/arrivals.py), ``unsure_until`` its ``Arrival.unsure_until``. No due date: on time. A
        due date and no arrival, or one the arrival may have missed: :func:`held`, the whole score withheld (never
        "on time")."""
        due = duedate + extension if duedate is not None and extension is not None else duedate
        if held(due, timestamp, score, unsure_until):
            return Lateness(0.0, float(score), held=True, reason=HELD if timestamp is None else HELD_UNSURE)
        if timestamp is None or duedate is None:
            return Lateness(0.0, None)
        late = max(0.0, (timestamp - due).total_seconds())
        return Lateness(late, self.penalty(student_id, score, late))


def how_late(seconds: float) -> str:
    """``2 h 05 min`` / ``12 min`` / ``40 s``: how late, for people."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"
