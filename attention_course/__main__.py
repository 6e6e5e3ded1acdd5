"""``python -m attention_course COMMAND``: the learner's commands (nothing here needs the grader).

- ``check NOTEBOOK [--reference PATH]``: re-run a chapter notebook and compare every checked output with the
  reference outputs shipped in the course kit; names each cell that differs and the exercise to look at
  (:mod:`attention_course.selfcheck`). Exit status 0 when it matches, 1 when it does not.
"""
from __future__ import annotations

import sys

from .language import N_, tr

# The help text (the docstring above, for maintainers, says the same).
HELP = N_("""python -m attention_course COMMAND: the learner's commands.

- check NOTEBOOK [--reference PATH]: re-run a chapter notebook and compare every checked output with the
  reference outputs shipped in the course kit; names each cell that differs and the exercise to look at.
  Exit status 0 when it matches, 1 when it does not.""")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(tr(HELP))
        return 0
    if argv[0] == "check":
        from .selfcheck import main as check_main

        return check_main(argv[1:])
    print(tr("unknown command {command}", command=repr(argv[0])) + "\n" + tr(HELP), file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
