"""``python -m autograder COMMAND``: the course's instructor commands.

- ``release [CHAPTER...]``: regenerate ``chapters/`` from ``solutions/``.
- ``grade [CHAPTER...] [--workers N] [--scheduler tcp://HOST:PORT] [--db URL] [--force] [--submitted DIR]``:
  grade every submission in parallel into the gradebook, with feedback, grades CSV and class report.
- ``grade-one CHAPTER NOTEBOOK [--student NAME] [--json OUT] [--html OUT]``: grade one notebook in the
  isolated sandbox and print its per-cell result. NOTEBOOK may have any file name (the chapter is named on
  the command line); only batch grading, which finds chapters by nbgrader's layout, needs ``<chapter>.ipynb``.
- ``export [--format canvas|long|wide|all] [--out DIR] [--db URL]``: the grades for an LMS (see
  ``autograder/export.py``).
- ``grade`` and ``grade-one`` take ``--isolation auto|root|user|process`` (default auto: the strongest this
  account reaches) and ``--require LEVEL`` (refuse to grade below it); see docs/isolation.md.
- ``profile [CHAPTER...] [--course ROOT]``: build the chapters' reference profiles (the one reference run,
  cached in ``grading/expected/``); ``grade`` and stock nbgrader's kernels build them on first use anyway.
- ``kit --out DIR``: build the learner kit (releases with reference outputs, the ``attention_course`` wheel,
  the self-check's reference outputs, requirements, a README; no solutions, hidden tests or grader).
- ``translations update|status [CHAPTER...] [--check]``: the chapters' Chinese catalogues
  (``locales/zh_CN/LC_MESSAGES/<chapter>.po``) brought in line with the English releases, or their progress
  (see ``autograder/translations.py``).
- ``messages update|compile|status [--check]``: the catalogues of the course's own messages (check messages,
  self-check, feedback pages, class report: ``locales/zh_CN/LC_MESSAGES/attention_course.po`` and ``autograder.po``)
  brought in line with the code, compiled into the learner package, or their progress (``autograder/messages.py``).
- ``mutants [CHAPTER...]``: the mutation score of every graded function's hidden tests.
- ``similarity [CHAPTER...]``: submissions that look copied, from the gradebook's submitted notebooks.
- ``deadlines CHAPTER [--due ISO] [--extend STUDENT=HOURS]``: a chapter's due date and learners' extensions
  (the late-penalty policy is chosen in ``autograder/nbgrader_config.py``; see ``autograder/deadlines.py``).
- ``collect CHAPTER [--exchange DIR] [--update]``: nbgrader's collect, through this course's configuration, with
  each submission recorded under the account that owns its inbox entry and the time it arrived (the submission
  time ``grade`` uses; ``timestamp.txt`` is the learner's claim): see ``autograder/arrivals.py``.
- ``serve [--exchange DIR] [--budget N --per SECONDS | --no-budget] [--workers N | --scheduler ADDR] ...``: grade
  each submission as it arrives in the exchange and release its feedback at once, within a feedback budget per
  learner (see ``autograder/serve.py``; docs/instructors.md, "Running a class on JupyterHub").
- ``nbgrader ARGS...``: run nbgrader with this course's configuration
  (e.g. ``nbgrader autograde 03_scoring_functions``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .course import Course

# grade-one's options that take no value (every other --option takes the next word as its value).
_GRADE_ONE_FLAGS = {"-h", "--help"}


def notebook_argument(argv: list[str], chapters: list[str]) -> tuple[str, int] | None:
    """(CHAPTER, index in grade-one's ``argv`` of the NOTEBOOK argument), or None when argv has no such pair."""
    positional, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            positional += range(i + 1, len(argv))
            break
        if word.startswith("-") and len(word) > 1:
            if "=" not in word and word not in _GRADE_ONE_FLAGS:
                i += 1  # its value
        else:
            positional.append(i)
        i += 1
    if len(positional) >= 2 and argv[positional[0]] in chapters:
        return argv[positional[0]], positional[1]
    return None


def grade_one(argv: list[str]) -> int:
    """grade-one under any file name: the engine reads ``<chapter>.ipynb`` (the name nbgrader's layout gives
    it), so a notebook with another name is graded from a private copy under the chapter's name."""
    from .isolation import main as grade_one_main

    found = notebook_argument(argv, Course().chapters())
    if found is None:
        return grade_one_main(argv)  # argparse explains what is missing
    chapter, index = found
    given = Path(argv[index])
    if given.name == f"{chapter}.ipynb" or not given.is_file():
        return grade_one_main(argv)  # nothing to rename (a missing file is reported by the grader)
    with tempfile.TemporaryDirectory(prefix="grade-one-") as tmp:
        copy = Path(tmp) / f"{chapter}.ipynb"
        shutil.copyfile(given, copy)
        print(f"grading {given} as {chapter}.ipynb", file=sys.stderr)
        return grade_one_main([*argv[:index], str(copy), *argv[index + 1:]])


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    # Each command's module is imported when that command runs: grade-one does not load grade's sinks (nbgrader,
    # SQLAlchemy), nor grade the engine. Nothing imports this module, so these imports can close no cycle.
    if command == "release":
        from .release import main as release_main

        return release_main(rest)
    if command == "grade":
        from .batch import main as grade_main

        return grade_main(rest)
    if command == "grade-one":
        return grade_one(rest)
    if command == "profile":
        from .isolation import profile_main

        return profile_main(rest)
    if command == "export":
        from .export import main as export_main

        return export_main(rest)
    # Each of these commands is owned by the module of the same name (its docstring says what it does).
    if command in ("kit", "mutants", "similarity", "deadlines", "translations", "messages"):
        import importlib

        return importlib.import_module(f".{command}", __package__).main(rest)
    if command == "collect":  # autograder/arrivals.py owns the submission time
        from .arrivals import main as collect_main

        return collect_main(rest)
    if command == "serve":  # autograder/serve.py: grading on submission
        from .serve import main as serve_main

        return serve_main(rest)
    if command == "nbgrader":
        from attention_course.language import ENVIRONMENT, GRADER_HINTS

        from .class_language import class_language, write_hint_table

        course = Course()
        # Under stock nbgrader the kernels decide the checks and their messages are what its feedback shows: they
        # speak the class's language (autograder/class_language.py), not whatever the instructor's shell has, and
        # get the grader's hint table (hidden tests' hints too: the kernels run where the solutions are).
        language = class_language(course)
        with tempfile.TemporaryDirectory(prefix="attention-course-hints-") as tmp:
            hints = write_hint_table(language, Path(tmp) / "hints.json")
            env = {**course.nbgrader_env(), ENVIRONMENT: language, GRADER_HINTS: str(hints)}
            return subprocess.call([sys.executable, "-m", "nbgrader", *rest], env=env, cwd=course.root)
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
