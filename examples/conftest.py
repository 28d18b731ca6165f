"""The examples' tests run against a real ``loopguard serve``: the binary cargo built from this
repository and the real model from ``models/``, on a free port with a temporary data directory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest
from loopguard.testing import LocalServer

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
# Each example imports the shared task and its own modules by name.
sys.path[:0] = [
    str(HERE / d) for d in ("", "mini_swe_agent", "langgraph_agent", "ag2_groupchat", "openai_agents")
]


@pytest.fixture(scope="session")
def loopguard_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    try:
        server = LocalServer.from_checkout(REPO, tmp_path_factory.mktemp("loopguard-data"))
    except FileNotFoundError as e:
        pytest.fail(f"{e} (in {REPO})", pytrace=False)
    try:
        with server.client() as c:
            c.wait_ready(timeout=120)
        yield server
    finally:
        server.stop()
