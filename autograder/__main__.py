"""``python -m autograder COMMAND``: the course's instructor commands.

- ``release [CHAPTER...]``: regenerate ``chapters/`` from ``solutions/``.
- ``grade [CHAPTER...] [--workers N] [--scheduler tcp://HOST:PORT] [--db URL] [--force] [--submitted DIR]``:
  grade every submission in parallel into the gradebook, with feedback, grades CSV and class report.
- ``grade-one CHAPTER NOTEBOOK [--student NAME] [--json OUT] [--html OUT]``: grade one notebook in the
  isolated sandbox and print its per-cell result.
- ``grade`` and ``grade-one`` take ``--isolation auto|root|user|process`` (default auto: the strongest this
  account reaches) and ``--require LEVEL`` (refuse to grade below it); see docs/isolation.md.
- ``nbgrader ARGS...``: run nbgrader with this course's configuration (e.g. ``nbgrader autograde 03_scoring_functions``).
"""
from __future__ import annotations

import os
import subprocess
import sys

from .course import Course


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "release":
        from .release import main as release_main

        return release_main(rest)
    if command == "grade":
        from .batch import main as grade_main

        return grade_main(rest)
    if command == "grade-one":
        from .isolation import main as grade_one_main

        return grade_one_main(rest)
    if command == "nbgrader":
        course = Course()
        return subprocess.call([sys.executable, "-m", "nbgrader", *rest], env=course.nbgrader_env(),
                               cwd=course.root)
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
