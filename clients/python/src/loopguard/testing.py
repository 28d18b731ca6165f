"""A local ``loopguard serve`` process on a free port, for tests of your orchestrator.

>>> with LocalServer.from_checkout("/path/to/loopguard", data_dir=tmp) as server:
...     with server.client() as lg:
...         lg.evaluate(...)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import IO, Any, List, Optional, Sequence, Union

from .client import AsyncClient, Client

__all__ = ["LocalServer", "find_binary"]

PathLike = Union[str, "os.PathLike[str]"]


def find_binary(checkout: Optional[PathLike] = None) -> Path:
    """The ``loopguard`` binary: ``$LOOPGUARD_BIN``; else cargo's build in ``checkout``
    (``$CARGO_TARGET_DIR`` or ``target/``, debug then release); else ``loopguard`` on ``PATH``."""
    env = os.environ.get("LOOPGUARD_BIN")
    if env:
        return Path(env)
    if checkout is not None:
        target = Path(os.environ.get("CARGO_TARGET_DIR") or Path(checkout) / "target")
        for profile in ("debug", "release"):
            candidate = target / profile / "loopguard"
            if candidate.exists():
                return candidate
    found = shutil.which("loopguard")
    if found:
        return Path(found)
    where = f" under {checkout}/target" if checkout is not None else ""
    raise FileNotFoundError(
        f"no loopguard binary{where}: build it with `cargo build`, or set LOOPGUARD_BIN"
    )


class LocalServer:
    """``loopguard serve --addr 127.0.0.1:0`` with its own data directory; ``url`` is where it
    listens once the constructor returns. ``args`` are more flags (``["--set", "k=v"]``);
    ``cwd`` is where relative paths of the configuration (``models/``) are resolved."""

    def __init__(
        self,
        binary: PathLike,
        data_dir: PathLike,
        args: Sequence[str] = (),
        *,
        token: Optional[str] = None,
        cwd: Optional[PathLike] = None,
        log: str = "warn",
    ) -> None:
        cmd = [str(binary), "serve", "--addr", "127.0.0.1:0", "--data-dir", str(data_dir)]
        if token:
            cmd += ["--set", f'server.auth_token="{token}"']
        cmd += list(args)
        self.token = token
        self.stderr: List[str] = []
        self.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "LOOPGUARD_LOG": log},
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        # Drained so a chatty server never blocks on a full pipe; kept for error messages.
        threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True).start()
        line = self.proc.stdout.readline().strip()
        prefix = "loopguard listening on "
        if not line.startswith(prefix):
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            raise RuntimeError(
                f"loopguard serve did not start (first line {line!r}):\n"
                + "".join(self.stderr[-20:])
            )
        self.url = line[len(prefix) :]
        self._wait_open()

    def _wait_open(self, timeout: float = 300.0) -> None:
        """Wait until the store is open: the server listens at once and answers 503
        ``starting`` while it replays its task log (``/readyz`` says so)."""
        import json
        import time
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    "loopguard serve exited while opening its store:\n" + "".join(self.stderr[-20:])
                )
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=5) as r:
                    body = r.read()
            except urllib.error.HTTPError as e:
                body = e.read()
            except OSError:
                body = b""
            try:
                if body and json.loads(body).get("status") != "starting":
                    return
            except ValueError:
                pass
            time.sleep(0.02)
        raise RuntimeError("loopguard serve did not open its store in time")

    @classmethod
    def from_checkout(
        cls, checkout: PathLike, data_dir: PathLike, args: Sequence[str] = (), **kwargs: Any
    ) -> "LocalServer":
        """The binary cargo built in a loopguard checkout, run from there (its ``models/``)."""
        kwargs.setdefault("cwd", checkout)
        return cls(find_binary(checkout), data_dir, args, **kwargs)

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self.stderr.append(line)

    def client(self, **kwargs: Any) -> Client:
        kwargs.setdefault("token", self.token)
        return Client(self.url, **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncClient:
        kwargs.setdefault("token", self.token)
        return AsyncClient(self.url, **kwargs)

    def stop(self) -> None:
        """SIGTERM (the server drains and flushes), then SIGKILL after 20 s."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
