"""A small headless-Chromium driver over the DevTools protocol (CDP), standard library only.

Chromium is started with ``--remote-debugging-pipe``: it reads CDP commands from file
descriptor 3 and writes replies and events to descriptor 4, each message one JSON object ended
by a NUL byte. No websocket client, no npm package: the only requirement is a ``chromium``
binary (Debian: ``apt-get install -y chromium``).

>>> with Browser() as b:                                   # doctest: +SKIP
...     page = b.new_page()
...     page.goto("file:///tmp/report.html")
...     page.evaluate("document.title")
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

#: Chromium flags for a quiet, hermetic headless run: no network side-traffic, no first-run UI,
#: software WebGL (Plotly's parcoords and 3-D scatter need WebGL; SwiftShader provides it without
#: a GPU). [R Chromium command-line switches, peter.sh/experiments/chromium-command-line-switches]
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--no-default-browser-check", "--disable-extensions", "--disable-default-apps",
    "--mute-audio", "--hide-scrollbars", "--disable-dev-shm-usage",
)

#: Executable names tried in order when ``CHROMIUM`` is not set.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """Path of a Chromium binary (``$CHROMIUM`` first), or None."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if shutil.which(env) or Path(env).exists() else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(RuntimeError):
    """Chromium answered a command with an error, died, or did not answer in time."""


class Browser:
    """One headless Chromium process with a fresh profile, driven over the CDP pipe."""

    def __init__(self, executable: str | None = None, width: int = 1400, height: int = 1000,
                 timeout_s: float = 30.0):
        self.executable = executable or find_chromium()
        if not self.executable:
            raise CDPError("no chromium binary found (install Debian's `chromium`)")
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self._next_id = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._replies: dict[int, dict] = {}
        self._events: deque[dict] = deque()
        self._buf = b""
        self._proc: subprocess.Popen | None = None
        self._profile: str | None = None

    # ------------------------------------------------------------------ process
    def __enter__(self) -> "Browser":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self._profile = tempfile.mkdtemp(prefix="dse-chromium-")
        # our ends: we write to w_cmd, read from r_evt; chromium gets r_cmd as fd 3, w_evt as 4.
        r_cmd, w_cmd = os.pipe()
        r_evt, w_evt = os.pipe()

        def child_fds():  # runs in the child before exec: put the pipe ends on fds 3 and 4
            a, b = os.dup(r_cmd), os.dup(w_evt)   # first move off 3/4 in case they are taken
            os.dup2(a, 3)                           # dup2 makes 3 and 4 inheritable
            os.dup2(b, 4)

        args = [self.executable, *CHROMIUM_FLAGS, "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}",
                f"--window-size={self.width},{self.height}", "about:blank"]
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, preexec_fn=child_fds,
                                      close_fds=False)
        os.close(r_cmd)
        os.close(w_evt)
        self._w = os.fdopen(w_cmd, "wb", buffering=0)
        self._r = os.fdopen(r_evt, "rb", buffering=0)
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                self.send("Browser.close", timeout_s=5)
            except CDPError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for f in (getattr(self, "_w", None), getattr(self, "_r", None)):
            try:
                f and f.close()
            except OSError:
                pass
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
        self._proc = None

    def _read_loop(self) -> None:
        while True:
            try:
                chunk = self._r.read(1 << 16)
            except (OSError, ValueError):
                chunk = b""
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            self._buf += chunk
            *messages, self._buf = self._buf.split(b"\0")
            with self._cond:
                for raw in messages:
                    if not raw:
                        continue
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self._events.append(msg)
                self._cond.notify_all()

    # ------------------------------------------------------------------ protocol
    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float | None = None) -> dict:
        """Send one command and wait for its reply's ``result``."""
        with self._lock:
            self._next_id += 1
            mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            self._w.write(json.dumps(msg).encode() + b"\0")
        except (BrokenPipeError, OSError) as exc:
            raise CDPError(f"chromium is gone ({exc})") from None
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CDPError(f"{method}: no reply within {timeout_s or self.timeout_s} s")
                if self._proc is None or self._proc.poll() is not None:
                    raise CDPError(f"{method}: chromium exited")
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def drain_events(self) -> list[dict]:
        with self._lock:
            out = list(self._events)
            self._events.clear()
        return out

    def new_page(self) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session, target)


class Page:
    """One tab: navigation, script evaluation, console / exception / network capture,
    screenshots."""

    def __init__(self, browser: Browser, session: str, target: str = ""):
        self.b, self.session, self.target = browser, session, target
        self.console: list[dict] = []      # {"level", "text"}
        self.exceptions: list[str] = []
        self.requests: list[str] = []      # every URL the page asked for
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": browser.width, "height": browser.height, "deviceScaleFactor": 1,
                   "mobile": False})

    def send(self, method: str, params: dict | None = None, timeout_s: float | None = None) -> dict:
        return self.b.send(method, params, session=self.session, timeout_s=timeout_s)

    def _collect(self) -> None:
        for ev in self.b.drain_events():
            if ev.get("sessionId") != self.session:
                continue
            method, p = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                self.console.append({"level": p.get("type"), "text": text})
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                self.exceptions.append(d.get("exception", {}).get("description") or d.get("text", ""))
            elif method == "Log.entryAdded":
                e = p.get("entry", {})
                self.console.append({"level": e.get("level"), "text": e.get("text", "")})
            elif method == "Network.requestWillBeSent":
                self.requests.append(p.get("request", {}).get("url", ""))

    def close(self) -> None:
        """Close the tab."""
        if self.target:
            self.b.send("Target.closeTarget", {"targetId": self.target})

    def add_init_script(self, source: str) -> None:
        """Run ``source`` in every new document before its own scripts."""
        self.send("Page.addScriptToEvaluateOnNewDocument", {"source": source})

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'")

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": await_promise})
        self._collect()
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CDPError("evaluate: " + (d.get("exception", {}).get("description") or d.get("text", "")))
        return r.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 20.0, poll_s: float = 0.02) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"timed out after {timeout_s} s waiting for {expression}")
            time.sleep(poll_s)

    def mouse_move(self, x: float, y: float) -> None:
        """Move the mouse to viewport point (x, y), CSS pixels."""
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    def click(self, x: float, y: float) -> None:
        """Left click at viewport point (x, y), CSS pixels."""
        self.mouse_move(x, y)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1})

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions seen so far."""
        self._collect()
        return ([f"console.{c['level']}: {c['text']}" for c in self.console
                 if c["level"] in ("error", "assert")] + [f"exception: {e}" for e in self.exceptions])

    def screenshot(self, path: str | Path, full_page: bool = True, selector: str | None = None) -> Path:
        """PNG of the whole page, the viewport (``full_page=False``) or one element."""
        params: dict[str, Any] = {"format": "png"}
        if selector:
            box = element_clip(self, selector)
            if not box:
                raise CDPError(f"screenshot: no element matches {selector}")
            params["clip"] = {**box, "scale": 1}
            params["captureBeyondViewport"] = True
        elif full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                              "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", params, timeout_s=60)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


def element_clip(page: Page, selector: str) -> dict | None:
    """The page-coordinate box of the first element matching ``selector`` (for screenshots)."""
    box = page.evaluate(
        "(() => { const e = document.querySelector(%s); if (!e) return null;"
        " const r = e.getBoundingClientRect();"
        " return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()"
        % json.dumps(selector))
    return box


def process_tree_cpu(root_pid: int) -> dict[int, float]:
    """CPU time (user + system, s) used so far by ``root_pid`` and each of its descendants
    (Linux ``/proc``), by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()  # after "pid (comm) "
        ppid, utime, stime = int(fields[1]), int(fields[11]), int(fields[12])
        stats[int(entry)] = (ppid, (utime + stime) / tick)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root_pid]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid][1]
        todo.extend(children.get(pid, []))
    return out


def cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the processes of ``after`` used since ``before`` (new processes count from
    zero; processes that ended in between are not counted)."""
    return sum(max(0.0, c - before.get(pid, 0.0)) for pid, c in after.items())
