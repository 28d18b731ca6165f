"""A real ``loopguard serve`` for the tests: the binary cargo built from this repository, the real
model from ``models/``, a free port and a temporary data directory.

The binary is ``$LOOPGUARD_BIN``, else ``target/debug/loopguard`` (or ``release``) under
``$CARGO_TARGET_DIR`` or the repository. A missing binary or model fails the tests with the
command that builds it; nothing is skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import pytest

import loopguard
from loopguard.testing import LocalServer

REPO = Path(__file__).resolve().parents[3]
TOKEN = "test-token-5f2c"


def _start(data_dir: Path, args: Sequence[str] = (), token: Optional[str] = None) -> LocalServer:
    try:
        return LocalServer.from_checkout(REPO, data_dir, args, token=token)
    except FileNotFoundError as e:
        pytest.fail(f"{e} (in {REPO})", pytrace=False)


@pytest.fixture(scope="session")
def start_server() -> Callable[..., LocalServer]:
    """Starts more servers, with other flags: ``start_server(data_dir, ["--set", "k=v"])``."""
    return _start


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """The main server: default configuration, with a bearer token."""
    s = _start(tmp_path_factory.mktemp("data"), token=TOKEN)
    try:
        with s.client() as c:
            c.wait_ready(timeout=120)
        yield s
    finally:
        s.stop()


@pytest.fixture()
def client(server: LocalServer) -> Iterator[loopguard.Client]:
    with server.client() as c:
        yield c
