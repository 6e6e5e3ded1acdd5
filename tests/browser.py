"""A headless Chromium driven over the DevTools protocol, for the book tests (loopback only)."""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

# Two drawn frames, or an error after 5 s (a hidden tab draws none: Page.settle brings its page to the front first).
SETTLED = """new Promise((done, fail) => {
    requestAnimationFrame(() => requestAnimationFrame(() => done(true)));
    setTimeout(() => fail(new Error('the page drew no frame in 5 s')), 5000);
})"""
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                  "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"]


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("Chromium is not installed: run `bash scripts/install_test_deps.sh` "
                       "(Debian package `chromium`) before the book tests")


class Browser:
    def __init__(self):
        self._profile = tempfile.mkdtemp(prefix="chromium-profile-")
        self._proc = subprocess.Popen([find_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={self._profile}",
                                       "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.time() + 30
        while not port_file.is_file() or not port_file.read_text().strip():
            if time.time() > deadline or self._proc.poll() is not None:
                self.close()
                raise RuntimeError("Chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])

    def open(self, url: str, settle_js: str, timeout: float = 30.0) -> "Page":
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        target = json.loads(urllib.request.urlopen(req, timeout=10).read())
        page = Page(target["webSocketDebuggerUrl"], target["id"], f"http://127.0.0.1:{self.port}/json/close/{target['id']}")
        page.load(url, settle_js, timeout)
        return page

    def new_context(self) -> str:
        """A browser context of its own (cookies and storage apart, as in a separate private window): one per user
        who logs in to the same site, so that each keeps their own session. Its id goes to ``open(context=...)``."""
        return self._browser_call("Target.createBrowserContext")["browserContextId"]

    def open_in(self, context: str, url: str, settle_js: str, timeout: float = 30.0) -> "Page":
        """``open``, in the browser context ``context`` (from ``new_context``)."""
        target = self._browser_call("Target.createTarget", url="about:blank", browserContextId=context)["targetId"]
        page = Page(f"ws://127.0.0.1:{self.port}/devtools/page/{target}", target,
                    f"http://127.0.0.1:{self.port}/json/close/{target}")
        page.load(url, settle_js, timeout)
        return page

    def _browser_call(self, method: str, **params):
        """A command to the browser itself (not to a page), over its own DevTools connection, opened once and kept:
        a browser context lives as long as the connection that made it."""
        if getattr(self, "_browser_ws", None) is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/version", timeout=10) as r:
                self._browser_ws = websocket.create_connection(json.loads(r.read())["webSocketDebuggerUrl"],
                                                               timeout=30)
            self._browser_id = 0
        self._browser_id += 1
        self._browser_ws.send(json.dumps({"id": self._browser_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._browser_ws.recv())
            if msg.get("id") == self._browser_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def tabs(self) -> set[str]:
        """The ids of the open tabs."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as r:
            return {t["id"] for t in json.loads(r.read()) if t.get("type") == "page"}

    def close(self):
        if getattr(self, "_browser_ws", None) is not None:
            self._browser_ws.close()
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        shutil.rmtree(self._profile, ignore_errors=True)


class Page:
    def __init__(self, ws_url: str, target_id: str, close_url: str):
        self.id = target_id  # the tab's, as Browser.tabs lists it
        self._close_url = close_url  # the DevTools endpoint that closes this tab
        self._ws = websocket.create_connection(ws_url, timeout=30)
        self._id = 0
        self.errors: list[str] = []

    def _send(self, method: str, **params):
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._note(msg)

    def _note(self, msg: dict):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + params["exceptionDetails"].get("text", "") + " " +
                               str(params["exceptionDetails"].get("exception", {}).get("description", "")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                           for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append("log: " + params["entry"].get("text", "") + " " + params["entry"].get("url", ""))
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self.errors.append("network: " + params.get("errorText", "") + " " + params.get("requestId", ""))

    def evaluate(self, expression: str):
        result = self._send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def load(self, url: str, settle_js: str, timeout: float):
        for domain in ("Runtime", "Log", "Network", "Page"):
            self._send(f"{domain}.enable")
        self._send("Page.navigate", url=url)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.evaluate(f"document.readyState === 'complete' && Boolean({settle_js})"):
                return
            time.sleep(0.25)
        raise TimeoutError(f"{url} did not settle within {timeout} s")

    def wait_for(self, expression: str, timeout: float, what: str):
        """Poll ``expression`` (a promise is awaited) until it is truthy, and return its value; fail naming ``what``
        at the deadline. An evaluation that fails because the page is navigating away counts as not yet."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
                if value:
                    return value
            except RuntimeError as e:  # e.g. "Execution context was destroyed" while the next page loads
                last = e
            time.sleep(0.5)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last error: {last})" if last
                                                                                   else ""))

    def navigate(self, url: str):
        """Go to ``url`` without waiting for anything (``wait_for`` what the next page should show)."""
        self._send("Page.navigate", url=url)

    def set_window(self, width: int, height: int):
        """Lay the page out as in a desktop window of ``width`` x ``height`` CSS pixels (device scale 1)."""
        self._send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                   mobile=False)
        self.settle()

    def settle(self):
        """Wait until the page has drawn two frames: the resize and scroll steps and their handlers run before a
        frame's animation callbacks, so the layout read next is the one on screen (a fixed 200-300 ms wait did the
        same, 16 s of each suite run spent asleep in the book walk). A tab that is not in front draws no frames,
        so the page is brought to the front first (opening a page puts the earlier ones behind it)."""
        self._send("Page.bringToFront")
        self.evaluate(SETTLED)

    def screenshot(self, path, clip: dict | None = None):
        """Save a PNG of the page: the region ``clip`` ({x, y, width, height} in page coordinates, inside the
        window: scroll it into view first) or else the window. (Capturing beyond the window makes Chromium lay
        the page out again at the page's full height, and the region then no longer holds what was measured.)"""
        import base64

        params = {"format": "png", "captureBeyondViewport": False}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        data = self._send("Page.captureScreenshot", **params)["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        """Close the tab, not only the connection to it (an open tab keeps its page's scripts running)."""
        self._ws.close()
        urllib.request.urlopen(self._close_url, timeout=10).read()
