"""What tests/test_jupyterhub.py runs a class with: throwaway accounts and groups, the course's JupyterHub
(deploy/jupyterhub/jupyterhub_config.py) on 127.0.0.1, and a git repository served on 127.0.0.1 for nbgitpuller.

Everything here is started by the test and stopped by it, on failure too: accounts (``useradd -m``, a random
password each, checked by PAM through the hub's login form) are removed with their homes and processes, the hub
is stopped (it stops the servers, the proxy and the grading service it started) and whatever an account still runs
after that is killed by process id.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUB_CONFIG = REPO / "deploy" / "jupyterhub" / "jupyterhub_config.py"


def run(cmd: list[str], **kw) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, f"{cmd[:6]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


class Accounts:
    """Two throwaway Unix groups (the course's instructors and learners) and accounts in them, each with a random
    password; ``remove`` deletes them with their homes, after killing whatever they still run."""

    def __init__(self):
        tag = secrets.token_hex(3)
        self.instructors_group, self.learners_group = f"aghi{tag}", f"aghl{tag}"
        self.passwords: dict[str, str] = {}
        self.groups: list[str] = []

    def add_groups(self):
        for group in (self.instructors_group, self.learners_group):
            run(["groupadd", group])
            self.groups.append(group)

    def add(self, role: str) -> str:
        group = self.instructors_group if role == "instructor" else self.learners_group
        name = f"{group[:4]}{len(self.passwords)}{secrets.token_hex(2)}"
        self.passwords[name] = secrets.token_urlsafe(12)  # before useradd: remove() then covers a half-made one
        run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/sh", "-G", group, name])  # private homes
        run(["chpasswd"], input=f"{name}:{self.passwords[name]}\n")
        return name

    def uid(self, name: str) -> int:
        return int(run(["id", "-u", name]))

    def remove(self):
        uids = set()
        for name in self.passwords:
            try:
                uids.add(self.uid(name))
            except AssertionError:
                pass
        kill_processes_of(uids)
        for name in self.passwords:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)
        for group in self.groups:
            subprocess.run(["groupdel", group], capture_output=True)


def kill_processes_of(uids: set[int]):
    """SIGKILL every process owned by one of ``uids``, by process id (the accounts are the test's own)."""
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid in uids:
                os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick). The hub's three ports must be named in its configuration
    before it starts; a port taken in between makes the hub fail to start with a clear error, never a wrong pass."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def blocking_folders(*paths: str) -> set[tuple[str, str]]:
    """(a folder other accounts cannot enter on the way to a path, its child on that way), for each path."""
    found = set()
    for path in paths:
        parts = Path(path).resolve().parts
        for i in range(2, len(parts)):
            folder = os.path.join(*parts[:i])
            if not os.stat(folder).st_mode & 0o001:
                found.add((folder, os.path.join(folder, parts[i])))
                break
    return found


def with_reachable_python(argv: list[str], hold: Path) -> list[str]:
    """``argv`` run so that the accounts' processes can run the course's Python. A deployment installs the
    environment where every account may enter (e.g. /srv/attention-course/.venv); where it sits under a folder they
    cannot (here ``/root/.pyenv``), the hub runs in a private mount namespace in which that folder is a tmpfs
    holding only the way to the Python installation (tests/test_unprivileged.py does the same): the host is not
    changed, and every process the hub starts inherits the view."""
    hide = blocking_folders(os.path.realpath(sys.base_prefix), sys.prefix, str(REPO))
    if not hide:
        return argv
    lines = ["set -e"]
    for k, (folder, child) in enumerate(sorted(hide)):
        lines += [f"mkdir -p {hold}/{k}", f"mount --bind {shlex.quote(child)} {hold}/{k}",
                  f"mount -t tmpfs -o mode=0711 tmpfs {shlex.quote(folder)}",
                  f"mkdir -p {shlex.quote(child)}", f"mount --move {hold}/{k} {shlex.quote(child)}"]
    lines.append("exec " + shlex.join(argv))
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines)]


class Hub:
    """The course's JupyterHub, started from its shipped configuration, with ``env`` (the configuration's
    settings: course root, exchange, groups, ports, state folder)."""

    def __init__(self, state: Path, env: dict[str, str]):
        self.state = state
        self.port = int(env["HUB_PORT"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state / "jupyterhub.log"
        self._log_file = open(self.log, "w")
        self.proc = subprocess.Popen(
            with_reachable_python([sys.executable, "-m", "jupyterhub", "-f", str(HUB_CONFIG)], state / "hold"),
            env={**os.environ, **env}, cwd=state, stdout=self._log_file, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            self.wait_for(lambda: self.api("") is not None, 240, "the hub's API")
        except BaseException:
            self.stop()
            raise

    def wait_for(self, check, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the hub exited {self.proc.returncode}:\n{self.tail()}"
            got = check()
            if got:
                return got
            time.sleep(0.1)  # the checks are an API call or a file read: a short poll costs little, a long one waits
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.tail()}")

    def api(self, path: str):
        """GET the hub's REST API through the proxy (None while nothing answers)."""
        try:
            with urllib.request.urlopen(f"{self.url}/hub/api/{path}", timeout=10) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
            return None

    def tail(self, n: int = 6000) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")[-n:]

    def stop(self):
        """SIGTERM: the hub stops the users' servers, the grading service and the proxy it started."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        pid_file = self.state / "jupyterhub-proxy.pid"  # a proxy left behind by a hub that could not stop it
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        self._log_file.close()


class GitServer:
    """A folder of bare git repositories served over HTTP on 127.0.0.1 by ``git http-backend`` (git's "smart"
    protocol, as a git host speaks it: nbgitpuller's shallow clone needs it; the static "dumb" protocol refuses
    ``--depth``)."""

    def __init__(self, root: Path):
        handler = functools.partial(_GitHandler, root=root)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


class _GitHandler(http.server.BaseHTTPRequestHandler):
    """One request, answered by ``git http-backend`` as a CGI program."""

    def __init__(self, *args, root: Path, **kw):
        self.root = root
        super().__init__(*args, **kw)

    def do_GET(self):
        self._backend()

    def do_POST(self):
        self._backend()

    def _backend(self):
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(self.root),
               "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command, "PATH_INFO": path,
               "QUERY_STRING": query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(length), "REMOTE_ADDR": "127.0.0.1",
               "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
               "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=120)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        headers = [line.split(":", 1) for line in head.decode("latin-1").splitlines() if ":" in line]
        status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
        self.send_response(status)
        for key, value in headers:
            if key.lower() != "status":
                self.send_header(key, value.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def bare_repository(work: Path, dest: Path) -> Path:
    """``work`` (a folder of files) committed on branch main and cloned bare into ``dest``."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "Course", "GIT_AUTHOR_EMAIL": "course@127.0.0.1",
           "GIT_COMMITTER_NAME": "Course", "GIT_COMMITTER_EMAIL": "course@127.0.0.1"}
    run(["git", "init", "-q", "-b", "main", str(work)], env=env)
    run(["git", "-C", str(work), "add", "-A"], env=env)
    run(["git", "-C", str(work), "commit", "-q", "-m", "the learner kit"], env=env)
    run(["git", "clone", "-q", "--bare", str(work), str(dest)], env=env)
    return dest
