"""Headless Chromium driven over the DevTools protocol, for tests that look at a web page.

Debian's `chromium` package (make system-deps) started with --remote-debugging-port; the
test talks to its page over a websocket (the `websockets` package, already a dependency of
hermes-agent). `Browser.start` raises BrowserUnavailable, with the reason, when the browser
is missing or does not come up, so a test can skip saying why.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path


class BrowserUnavailable(RuntimeError):
    pass


class Browser:
    def __init__(self, proc: subprocess.Popen, ws, profile: Path):
        self.proc, self.ws, self.profile = proc, ws, profile
        self._id = 0

    @classmethod
    def start(cls, profile: Path, timeout_s: float = 30.0) -> "Browser":
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            raise BrowserUnavailable("no chromium on PATH (Debian package `chromium`, installed by `make system-deps`)")
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                 "--disable-dev-shm-usage", "--window-size=1400,1000", "--remote-debugging-port=0",
                                 f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = profile / "DevToolsActivePort"
        deadline = time.time() + timeout_s
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                err = proc.stderr.read().decode(errors="replace")[-800:] if proc.stderr else ""
                raise BrowserUnavailable(f"chromium did not start (exit {proc.poll()}): {err}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        for _ in range(100):
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=5))
                page = next(t for t in targets if t.get("type") == "page")
                break
            except (OSError, StopIteration):
                time.sleep(0.1)
        else:
            proc.kill()
            raise BrowserUnavailable("chromium started but offered no page over the DevTools protocol")
        return cls(proc, connect(page["webSocketDebuggerUrl"], max_size=64 * 2**20), profile)

    def call(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        r = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''", returnByValue=True)
        return r.get("result", {}).get("value") or ""

    def evaluate(self, js: str):
        return self.call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True).get("result", {}).get("value")

    def wait_for_text(self, *needles: str, timeout_s: float = 60.0) -> str:
        """The page's visible text once every needle is in it; AssertionError with the text otherwise."""
        deadline = time.time() + timeout_s
        text = ""
        while time.time() < deadline:
            text = self.text()
            if all(n in text for n in needles):
                return text
            time.sleep(0.25)
        missing = [n for n in needles if n not in text]
        raise AssertionError(f"not on the page after {timeout_s:.0f} s: {missing}; the page shows:\n{text[:3000]}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
