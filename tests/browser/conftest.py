"""Fixtures for the browser tests: the `loopguard` binary of this repository, a `loopguard serve`
on a free port with a temporary data directory (the real model), and Debian's Chromium driven
headless by Playwright.

Run from the repository root after `cargo build` (`.ci/run` does it):

    python -m pytest tests/browser

`LOOPGUARD_BIN` names the binary (default: $CARGO_TARGET_DIR or target, then debug/loopguard),
`CHROMIUM` the browser (default /usr/bin/chromium), `LOOPGUARD_SCREENSHOTS` where screenshots go
(default target/screenshots). Nothing here skips: a missing binary, model or browser fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

ROOT = Path(__file__).resolve().parents[2]


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


def loopguard_bin() -> Path:
    path = Path(os.environ.get("LOOPGUARD_BIN", _target_dir() / "debug" / "loopguard"))
    if not path.is_file():
        raise RuntimeError(f"{path} does not exist: run `cargo build` first (or set LOOPGUARD_BIN)")
    return path


class Server:
    """A `loopguard serve` process on 127.0.0.1, port 0, stopped at the end of the test."""

    def __init__(self, data_dir: Path, token: str | None = None, extra: list[str] | None = None):
        env = dict(os.environ)
        env["LOOPGUARD_LOG"] = "warn"
        env.pop("LOOPGUARD_SERVER__AUTH_TOKEN", None)
        if token:
            env["LOOPGUARD_SERVER__AUTH_TOKEN"] = token
        self.token = token
        self.proc = subprocess.Popen(
            [str(loopguard_bin()), "serve", "--addr", "127.0.0.1:0", "--data-dir", str(data_dir)]
            + (extra or []),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline().strip()
        prefix = "loopguard listening on "
        if not line.startswith(prefix):
            self.stop()
            raise RuntimeError(f"loopguard serve did not start: {line!r}")
        self.base = line[len(prefix):]
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError("loopguard serve did not become ready (is the model fetched? python3 models/fetch.py)")

    def request(self, method: str, path: str, body=None, token: str | None = "default"):
        token = self.token if token == "default" else token
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("content-type", "application/json")
        if token:
            req.add_header("authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def evaluate(self, envelope: dict) -> dict:
        status, verdict = self.request("POST", "/v1/evaluate", envelope)
        assert status == 200, verdict
        return verdict

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start_server():
    servers: list[Server] = []
    dirs: list[tempfile.TemporaryDirectory] = []

    def start(token: str | None = None, extra: list[str] | None = None) -> Server:
        d = tempfile.TemporaryDirectory(prefix="loopguard-browser-")
        dirs.append(d)
        s = Server(Path(d.name) / "data", token=token, extra=extra)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
    for d in dirs:
        d.cleanup()


@pytest.fixture(scope="session")
def browser() -> Browser:
    executable = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not Path(executable).is_file():
        raise RuntimeError(f"{executable} not found: apt-get install chromium (or set CHROMIUM)")
    with sync_playwright() as p:
        # As root in a container Chromium needs --no-sandbox; the rest keeps it from calling
        # home on a machine without network.
        b = p.chromium.launch(
            executable_path=executable,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


class PageWithLog:
    """A page that records console errors and uncaught exceptions (a CSP violation is one)."""

    def __init__(self, page: Page):
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def assert_no_errors(self, allow: tuple[str, ...] = ()) -> None:
        left = [e for e in self.errors if not any(a in e for a in allow)]
        assert not left, f"errors in the page: {left}"


@pytest.fixture
def new_page(browser: Browser):
    contexts = []

    def make(width: int = 1440, height: int = 900) -> PageWithLog:
        ctx = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
        contexts.append(ctx)
        return PageWithLog(ctx.new_page())

    yield make
    for c in contexts:
        c.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    d = Path(os.environ.get("LOOPGUARD_SCREENSHOTS", _target_dir() / "screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d
