"""A real ``loopguard serve`` for the tests: the binary cargo built from this repository, the real
model from ``models/``, a free port and a temporary data directory.

The binary is ``$LOOPGUARD_BIN``, else ``target/debug/loopguard`` (or ``release``) under
``$CARGO_TARGET_DIR`` or the repository. A missing binary or model fails the tests with the
command that builds it; nothing is skipped.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

import loopguard

REPO = Path(__file__).resolve().parents[3]
TOKEN = "test-token-5f2c"


def loopguard_binary() -> Path:
    env = os.environ.get("LOOPGUARD_BIN")
    if env:
        return Path(env)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    for profile in ("debug", "release"):
        candidate = target / profile / "loopguard"
        if candidate.exists():
            return candidate
    pytest.fail(
        f"no loopguard binary under {target}; build it with `cargo build` in {REPO} "
        "(or set LOOPGUARD_BIN)",
        pytrace=False,
    )


class Server:
    """One ``loopguard serve`` process; ``url`` is where it listens."""

    def __init__(self, data_dir: Path, args: List[str], token: Optional[str] = None) -> None:
        cmd = [
            str(loopguard_binary()),
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
        ]
        if token:
            cmd += ["--set", f'server.auth_token="{token}"']
        cmd += args
        self.token = token
        self.stderr: List[str] = []
        # The model path in the reference config is relative to the repository.
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "LOOPGUARD_LOG": "warn"},
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True).start()
        line = self.proc.stdout.readline().strip()
        prefix = "loopguard listening on "
        if not line.startswith(prefix):
            self.proc.wait(timeout=10)
            raise RuntimeError(
                f"loopguard serve did not start: {line!r}\n" + "".join(self.stderr[-20:])
            )
        self.url = line[len(prefix) :]

    def _drain(self, stream) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            self.stderr.append(line)

    def client(self, **kwargs) -> loopguard.Client:  # type: ignore[no-untyped-def]
        kwargs.setdefault("token", self.token)
        return loopguard.Client(self.url, **kwargs)

    def async_client(self, **kwargs) -> loopguard.AsyncClient:  # type: ignore[no-untyped-def]
        kwargs.setdefault("token", self.token)
        return loopguard.AsyncClient(self.url, **kwargs)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The main server: default configuration, with a bearer token."""
    s = Server(tmp_path_factory.mktemp("data"), [], token=TOKEN)
    try:
        with s.client() as c:
            c.wait_ready(timeout=120)
        yield s
    finally:
        s.stop()


@pytest.fixture()
def client(server: Server) -> Iterator[loopguard.Client]:
    with server.client() as c:
        yield c
