"""nbgrader configuration for the course.

The course root is the repository root (the folder above this file), so this file works unchanged in a
copy of the course. ``solutions/`` is nbgrader's source, ``chapters/`` its release; submissions, grading
output and the gradebook live under the git-ignored ``grading/``. nbgrader reads this file when
``JUPYTER_CONFIG_PATH`` points at this folder (``python -m autograder nbgrader ...`` sets it).
"""
import os

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.root = _root
c.CourseDirectory.course_id = "attention-from-scratch"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "chapters"
c.CourseDirectory.submitted_directory = os.path.join("grading", "submitted")
c.CourseDirectory.autograded_directory = os.path.join("grading", "autograded")
c.CourseDirectory.feedback_directory = os.path.join("grading", "feedback")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(_root, "grading", "gradebook.db")
# mistakes.toml (the mistake catalogue) and library.toml (each exercise's library one-liner, for the shortcut lint)
# stay with the source and never reach learners.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*", "mistakes.toml",
                            "library.toml"]

# Hidden tests are delimited explicitly; solution regions use nbgrader's defaults.
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Generous limits for stock autograde; our isolated grader sets its own.
c.ExecutePreprocessor.timeout = 300
# Once a notebook's outputs are in, its kernel is killed rather than asked to shut down: a graceful shutdown
# waits for Python to tear torch and matplotlib down, about 0.8 s of a chapter kernel's 3 s start-and-stop (stock
# autograde of five blank chapter-5 notebooks: 16.8 s, 12.9 s killed). Nothing the grade reads comes after.
c.ExecutePreprocessor.shutdown_kernel = "immediate"

# Defence in depth behind autograder/safe_output.py (which already strips every active output from the
# autograded notebooks): nbconvert's HTML exporter, as formgrader and generate_feedback use it, runs cell
# outputs through its HTML sanitiser. Formgrader's own pages need inline scripts, so no script-blocking
# Content-Security-Policy can be served for them; the sanitised notebook is what keeps them inert.
c.HTMLExporter.sanitize_html = True

# The class's language (docs/instructors.md, "The class's language"): feedback pages, their check messages and the
# class report. Unset: English. autograder/class_language.py reads it.
#   c.AttentionCourse.language = "zh_CN"

# Late submissions (docs/instructors.md, "Deadlines"). A chapter's due date is set with
# `python -m autograder deadlines CHAPTER --due ISO` (or `nbgrader db assignment add CHAPTER --duedate=...`),
# a learner's extension with `--extend STUDENT=HOURS`. The policy below is read both by stock
# `nbgrader autograde` and by `python -m autograder grade` (autograder/deadlines.py loads this file), so
# both assign the same penalties. nbgrader's default is no penalty; uncomment ONE of:
#
# nbgrader's own, a late notebook scores zero:
#   c.LateSubmissionPlugin.penalty_method = "zero"
# ours, a fraction of the score per started hour late, with a cap (fractions of the score):
#   c.AssignLatePenalties.plugin_class = "autograder.deadlines.PerHourPenalty"
#   c.PerHourPenalty.fraction_per_hour = 0.1
#   c.PerHourPenalty.cap = 0.5
