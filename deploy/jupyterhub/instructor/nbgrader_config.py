"""nbgrader for an instructor's server on the course's hub (deploy/jupyterhub/jupyterhub_config.py sets the
environment): the course's own configuration (its folders, gradebook and hidden-test markers), and the hub's
exchange, into which formgrader's Release button and ``nbgrader release_assignment`` publish."""
import os

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

load_subconfig(os.path.join(os.environ["COURSE_ROOT"], "autograder", "nbgrader_config.py"))  # noqa: F821
c.Exchange.root = os.environ["NBGRADER_EXCHANGE"]
