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
# mistakes.toml (the mistake catalogue) stays with the source and never reaches learners.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*", "mistakes.toml"]

# Hidden tests are delimited explicitly; solution regions use nbgrader's defaults.
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Generous limits for stock autograde; our isolated grader sets its own.
c.ExecutePreprocessor.timeout = 300

# Defence in depth behind autograder/safe_output.py (which already strips every active output from the
# autograded notebooks): nbconvert's HTML exporter, as formgrader and generate_feedback use it, runs cell
# outputs through its HTML sanitiser. Formgrader's own pages need inline scripts, so no script-blocking
# Content-Security-Policy can be served for them; the sanitised notebook is what keeps them inert.
c.HTMLExporter.sanitize_html = True
