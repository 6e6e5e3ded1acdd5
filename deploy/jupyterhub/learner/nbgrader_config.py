"""nbgrader for a learner's server on the course's hub (deploy/jupyterhub/jupyterhub_config.py sets the
environment): which course, and where its exchange is. The Assignments tab fetches into the learner's home and
submits into the exchange's inbound folder, which ``python -m autograder serve`` watches."""
import os

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "attention-from-scratch"  # as autograder/nbgrader_config.py says
c.Exchange.root = os.environ["NBGRADER_EXCHANGE"]
