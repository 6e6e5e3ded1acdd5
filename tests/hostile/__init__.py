"""The adversarial corpus: hostile or broken chapter-3 submissions, each built from the reference submission
(``autograder.submissions``) and graded through the real isolated engine by ``tests/test_isolation.py``.

Each case in :mod:`.cases` says how to build the notebook (or the raw file) and what the grader must
conclude: status, reason, exact score, failing cells, flags, and what must (not) appear in its output.
"""
