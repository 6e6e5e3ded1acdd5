"""Runtime support for the Attention from Scratch notebooks.

- ``runtime``: the setup cell's device choice and seeding.
- ``encoding``: JSON-safe, pickle-free encoding of tensors and plain values.
- ``verdicts``: the pure decisions behind every check (shared by the learner's kernel and the trusted grader).
- ``checks``: the ``Checks`` object that graded test cells call.
- ``cells``: how a notebook cell is classified (setup, solution, graded test).
- ``expected``: reference values for checks decided inside a kernel (read from the grading engine's reference
  profile, the one reference run), and the reference run on other devices for the device audit.
- ``plots``: figures shared by several chapters.
- ``language``: the language messages are written in (``ATTENTION_COURSE_LANG``, else the kit's, else English) and
  the lookup every message goes through (its catalogue: ``data/attention_course.<lang>.json``).
"""
