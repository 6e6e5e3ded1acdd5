"""Run several nbgrader commands, each on its own course copy, in one Python process (test helper).

``python -m tests.nbgrader_many`` reads batches from stdin, one JSON line ``[[course_root, [args...]], ...]``
each, runs each command through nbgrader's own application, exactly as ``nbgrader <args>`` would (the
course's ``autograder/nbgrader_config.py``, its working directory and environment), and answers each batch
with one JSON line on stdout: ``{"ok": true}`` or ``{"ok": false, "error": ...}`` with the failing command's
log. Importing nbgrader costs about 3 s; stock grading of the nine chapters takes eighteen commands, so two
such processes instead of eighteen save most of a minute of CPU, and a caller can hand each process the
next chapter as soon as it is free (tests/nbgrader_run.py).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from io import StringIO


def run(root: str, args: list[str]) -> tuple[int, str]:
    from jupyter_core.application import NoStart
    from nbgrader.apps.nbgraderapp import NbGraderApp

    from autograder.course import Course

    saved_env, saved_cwd = os.environ.copy(), os.getcwd()
    # The config, and the kernels' environment: this process's own (the suite's one thread per torch process,
    # tests/conftest.py) plus the course's. Read before clearing: a kernel started with an empty environment
    # ran torch on every core, and two such kernels spinning against each other took 2.5x the CPU.
    env = Course(root).nbgrader_env()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(root)
    log = StringIO()
    app = NbGraderApp.instance()
    try:
        app.initialize([*args, "--log-level=WARN"])
        app.init_logging(logging.StreamHandler, [log], color=False, subapps=True)
        app.start()
        code = 0
    except NoStart:
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    finally:
        app.reset()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return code, log.getvalue()


def main() -> int:
    # Whatever nbgrader or its kernels print (Python or C, here or in a child) goes to stderr: only the
    # answers use the original stdout.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        error = ""
        for root, args in json.loads(line):
            code, log = run(root, args)
            if code:
                error = f"nbgrader {' '.join(args)} failed in {root} (exit {code}):\n{log[-3000:]}"
                break
        print(json.dumps({"ok": not error, "error": error}), file=answers, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
