"""JupyterHub for a class of this course: the configuration the course ships and tests/test_jupyterhub.py runs.

    sudo COURSE_ROOT=/srv/attention-course NBGRADER_EXCHANGE=/srv/nbgrader/exchange \\
        /srv/attention-course/.venv/bin/jupyterhub -f deploy/jupyterhub/jupyterhub_config.py

What each part is for (docs/instructors.md, "Running a class on JupyterHub", says more):

- **The hub** runs as root (LocalProcessSpawner starts each user's server as that user) and, like its proxy,
  listens on 127.0.0.1 unless ``HUB_IP`` says otherwise: put a TLS-terminating web server in front of it.
- **configurable-http-proxy** routes ``/user/<name>/`` to that user's server; the course vendors it with npm
  (package.json; the repository's ``node_modules/.bin``), and a proxy on PATH is used where that one is absent.
- **Login: PAMAuthenticator**, JupyterHub's default LocalAuthenticator: the hub's users are the machine's accounts
  and their own passwords, as on a university's shared server. Only two Unix groups may log in: the course's
  instructors (``COURSE_INSTRUCTORS_GROUP``) and its learners (``COURSE_LEARNERS_GROUP``).
- **LocalProcessSpawner** starts ``jupyterhub-singleuser`` from the course's environment, as the user, in their
  home (an instructor: in the course folder), with **JupyterLab** as the interface.
- **nbgrader** in every server: the course's configuration, by role. Learners get ``learner/`` (the course id and
  the exchange; the Assignments tab and Validate; formgrader, the course list and Create Assignment are off),
  instructors ``instructor/`` (the course's own ``autograder/nbgrader_config.py`` and the exchange; formgrader).
  Both start terminals as ``/bin/bash`` rather than a login shell: a login shell's /etc/profile resets PATH, and
  the terminal would no longer find the course's ``python`` (``python -m autograder export`` and the like).
- **The exchange** (``NBGRADER_EXCHANGE``) is nbgrader's: a folder every account may enter (mode 1777, the
  sticky bit keeps learners' entries apart); the course's folder in it belongs to the instructor who released.
- **Grading on submission**: ``python -m autograder serve`` as a hub-managed service, run as the course folder's
  owner (the instructor's account, so the gradebook, formgrader and the service agree on who owns what), from the
  course folder. ``AUTOGRADER_SERVE_ARGS`` adds its options (the feedback budget, the backend);
  ``AUTOGRADER_SERVE_COMMAND`` replaces the whole command line; ``AUTOGRADER_SERVE=off`` leaves it out.

Every setting below that a class varies is read from the environment (defaults in brackets):
``COURSE_ROOT`` [the repository holding this file], ``NBGRADER_EXCHANGE`` [/srv/nbgrader/exchange],
``COURSE_INSTRUCTORS_GROUP`` [attention-instructors], ``COURSE_LEARNERS_GROUP`` [attention-learners],
``HUB_IP`` [127.0.0.1], ``HUB_PORT`` [8000, the public port], ``HUB_INTERNAL_PORT`` [8081],
``HUB_PROXY_API_PORT`` [8001], ``HUB_STATE_DIR`` [/srv/jupyterhub: the hub's database, cookie secret, proxy pid],
``HUB_EXTRA_JUPYTER_CONFIG`` [none: one more Jupyter config folder for every user's server, searched first].
"""
import grp
import os
import pwd
import shlex
import shutil
import sys

c = get_config()  # noqa: F821 - provided by traitlets when JupyterHub loads this file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))  # the course repository this file ships in
COURSE_ROOT = os.path.abspath(os.environ.get("COURSE_ROOT", REPO))
EXCHANGE = os.path.abspath(os.environ.get("NBGRADER_EXCHANGE", "/srv/nbgrader/exchange"))
INSTRUCTORS = os.environ.get("COURSE_INSTRUCTORS_GROUP", "attention-instructors")
LEARNERS = os.environ.get("COURSE_LEARNERS_GROUP", "attention-learners")
IP = os.environ.get("HUB_IP", "127.0.0.1")
STATE = os.path.abspath(os.environ.get("HUB_STATE_DIR", "/srv/jupyterhub"))
# The course's environment: the interpreter running the hub (its bin folder holds jupyterhub-singleuser, jupyter,
# alembic for nbgrader's gradebook, and the python3 kernel's interpreter).
ENV_BIN = os.path.dirname(sys.executable)

# --- the hub and its proxy, on loopback by default ----------------------------------------------------------------
c.JupyterHub.bind_url = f"http://{IP}:{int(os.environ.get('HUB_PORT', '8000'))}/"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("HUB_INTERNAL_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{int(os.environ.get('HUB_PROXY_API_PORT', '8001'))}"
_vendored_proxy = os.path.join(REPO, "node_modules", ".bin", "configurable-http-proxy")
c.ConfigurableHTTPProxy.command = [_vendored_proxy if os.access(_vendored_proxy, os.X_OK)
                                   else shutil.which("configurable-http-proxy") or "configurable-http-proxy"]
c.ConfigurableHTTPProxy.pid_file = os.path.join(STATE, "jupyterhub-proxy.pid")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(STATE, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(STATE, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(STATE, "jupyterhub.pid")
# A restarted hub stops the servers it started (none keeps running unsupervised after the class's hub is gone).
c.JupyterHub.cleanup_servers = True

# --- who may log in: the machine's accounts in the course's two groups (PAM checks their own passwords) -----------
c.JupyterHub.authenticator_class = "jupyterhub.auth.PAMAuthenticator"
c.Authenticator.allowed_groups = {INSTRUCTORS, LEARNERS}
# The hub's own accounts are the machine's: it never creates one (create_system_users stays off).


def is_instructor(name: str) -> bool:
    """In the instructors' group, by membership or as the account's primary group."""
    try:
        group = grp.getgrnam(INSTRUCTORS)
        return name in group.gr_mem or pwd.getpwnam(name).pw_gid == group.gr_gid
    except KeyError:
        return False


# --- each user's server: jupyterhub-singleuser from the course's environment, JupyterLab, nbgrader by role --------
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
c.Spawner.cmd = [os.path.join(ENV_BIN, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.ip = "127.0.0.1"
# A first start imports JupyterLab, nbgrader and their extensions: slow on a busy machine, never an error.
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 300


def pre_spawn_hook(spawner):
    """The user's role decides their Jupyter configuration (nbgrader's) and where their server starts."""
    name = spawner.user.name
    role = "instructor" if is_instructor(name) else "learner"
    config_path = [os.path.join(HERE, role)]
    if os.environ.get("HUB_EXTRA_JUPYTER_CONFIG"):
        config_path.insert(0, os.environ["HUB_EXTRA_JUPYTER_CONFIG"])
    spawner.environment.update({
        "JUPYTER_CONFIG_PATH": os.pathsep.join(config_path),
        "NBGRADER_EXCHANGE": EXCHANGE,
        "COURSE_ROOT": COURSE_ROOT,
        # the course's environment first: `jupyter`, `python`, `nbgrader` and alembic in a terminal or a kernel
        "PATH": os.pathsep.join([ENV_BIN, "/usr/local/bin", "/usr/bin", "/bin"]),
    })
    # An instructor works in the course folder (formgrader serves only what is under the server's root); a learner
    # in their home, where the Assignments tab fetches into.
    spawner.notebook_dir = COURSE_ROOT if role == "instructor" else "~"


c.Spawner.pre_spawn_hook = pre_spawn_hook

# --- grading on submission: python -m autograder serve, managed by the hub ----------------------------------------
if os.environ.get("AUTOGRADER_SERVE", "on") != "off":
    if os.environ.get("AUTOGRADER_SERVE_COMMAND"):
        serve = shlex.split(os.environ["AUTOGRADER_SERVE_COMMAND"])
    else:
        serve = [sys.executable, "-m", "autograder", "serve", "--course", COURSE_ROOT, "--exchange", EXCHANGE,
                 *shlex.split(os.environ.get("AUTOGRADER_SERVE_ARGS", ""))]
    c.JupyterHub.services = [{
        "name": "autograder",
        "command": serve,
        "cwd": COURSE_ROOT,
        # the account that owns the course folder: the instructor's, whose formgrader reads the same gradebook
        "user": pwd.getpwuid(os.stat(COURSE_ROOT).st_uid).pw_name,
        "environment": {"PATH": os.pathsep.join([ENV_BIN, "/usr/local/bin", "/usr/bin", "/bin"]),
                        "PYTHONUNBUFFERED": "1"},
    }]
