"""Retries, timeouts and odd error bodies.

A real 429 (a one-slot embedding queue under concurrent load) and a real 503 (a server whose model
is missing) come from ``loopguard serve`` itself. What the real server cannot be made to answer on
demand — an HTTP-date ``Retry-After``, a 503 ``timeout``, a hung answer, a proxy's HTML page — comes
from a tiny stub server in this file.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
import time
import uuid
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import loopguard
from loopguard import (
    NO_RETRY,
    InvalidResponseError,
    OverloadedError,
    RequestTimeoutError,
    RetryEvent,
    RetryPolicy,
    ServerError,
    ServiceUnavailableError,
    TransportError,
)
from loopguard.testing import LocalServer

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()


def words(rng: random.Random) -> str:
    # Distinct words, not numbers: loopguard normalises numbers away, and equal texts would hit
    # the embedding cache instead of queueing for the model.
    return " ".join(rng.choice(WORDS) for _ in range(60))


def served_statuses(metrics: str, status: int) -> int:
    """Requests to /v1/evaluate the server answered with ``status``, from its own metrics."""
    total = 0
    for line in metrics.splitlines():
        if line.startswith("loopguard_http_requests_total{") and f'status="{status}"' in line:
            if "evaluate" in line:
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


# --- a real 429 ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_slot_server(
    tmp_path_factory: pytest.TempPathFactory, start_server: Any
) -> Iterator[LocalServer]:
    s = start_server(
        tmp_path_factory.mktemp("one-slot"),
        ["--set", "model.queue_capacity=1", "--set", "model.max_batch=1"],
    )
    try:
        with s.client() as c:
            c.wait_ready(timeout=120)
        yield s
    finally:
        s.stop()


def _flood(server: LocalServer, retry: RetryPolicy, on_retry: Any, n: int = 16) -> List[Any]:
    """n tasks at once, each with a second response that needs the model."""
    rng = random.Random(7)
    run = uuid.uuid4().hex[:8]
    firsts = [words(rng) for _ in range(n)]
    seconds = [words(rng) for _ in range(n)]

    async def main() -> List[Any]:
        async with server.async_client(retry=retry, on_retry=on_retry, timeout=60) as lg:
            await asyncio.gather(
                *(
                    lg.evaluate({"type": "response", "text": firsts[i]}, task_id=f"{run}-{i}")
                    for i in range(n)
                )
            )
            return await asyncio.gather(
                *(
                    lg.evaluate({"type": "response", "text": seconds[i]}, task_id=f"{run}-{i}")
                    for i in range(n)
                ),
                return_exceptions=True,
            )

    return asyncio.run(main())


def test_a_real_429_is_raised_without_retries_and_absorbed_with_them(
    one_slot_server: LocalServer,
) -> None:
    results = _flood(one_slot_server, NO_RETRY, None)
    refused = [r for r in results if isinstance(r, OverloadedError)]
    assert refused, "a one-slot queue under 16 concurrent requests refuses some"
    assert all(isinstance(r, (loopguard.Verdict, OverloadedError)) for r in results), results
    e = refused[0]
    assert (e.status, e.code, e.retry_after) == (429, "overloaded", 1.0)
    assert "queue" in e.message

    retries: List[RetryEvent] = []
    results = _flood(one_slot_server, RetryPolicy(max_retries=20), retries.append)
    assert all(isinstance(r, loopguard.Verdict) for r in results), results
    assert retries, "the flood was refused again, and retried"
    # The wait is the server's Retry-After: 1, not the client's own backoff.
    assert {r.delay for r in retries} == {1.0}
    assert {r.error.code for r in retries} == {"overloaded"}
    assert all(r.method == "POST" and r.path == "/v1/evaluate" for r in retries)
    with one_slot_server.client() as c:
        assert served_statuses(c.metrics(), 429) >= len(refused) + len(retries)


# --- a real 503 ---------------------------------------------------------------------------


def test_a_real_503_is_retried_then_raised_with_its_code(
    tmp_path_factory: pytest.TempPathFactory, start_server: Any
) -> None:
    s = start_server(
        tmp_path_factory.mktemp("no-model"),
        ["--set", 'model.dir="/nonexistent/all-MiniLM-L6-v2"'],
    )
    try:
        retries: List[RetryEvent] = []
        policy = RetryPolicy(max_retries=2, max_retry_after=0.05)
        with s.client(retry=policy, on_retry=retries.append) as c:
            with pytest.raises(ServiceUnavailableError) as e:
                c.wait_ready(timeout=30)
            assert e.value.code == "model_unavailable"
            ready = c.readyz()
            assert ready.status == "failed" and ready.error

            # The first event of a task needs no model; the second, different one does.
            c.evaluate({"type": "response", "text": "I will read the config"}, task_id="t")
            with pytest.raises(ServiceUnavailableError) as e:
                c.evaluate({"type": "response", "text": "Let me look at the logs"}, task_id="t")
            assert (e.value.status, e.value.code) == (503, "model_unavailable")
            assert e.value.retry_after == 5.0, "the server's Retry-After is kept on the error"
            # Two retries, each waiting the server's Retry-After capped by max_retry_after.
            assert [(r.attempt, r.delay) for r in retries] == [(2, 0.05), (3, 0.05)]
            assert served_statuses(c.metrics(), 503) == 3
            # Nothing was applied: the task still holds only its first event.
            assert c.get_task("t").events_total == 1
    finally:
        s.stop()


# --- a stub server for what the real one cannot be made to answer ---------------------------

Reply = Tuple[int, Dict[str, str], bytes, float]  # status, headers, body, seconds to wait first


class Stub:
    """Answers each request with the next scripted reply (the last one repeats)."""

    def __init__(self, replies: List[Reply]) -> None:
        self.replies = replies
        self.requests: List[Tuple[str, str, Dict[str, str], bytes]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                stub.requests.append((self.command, self.path, dict(self.headers), body))
                i = min(len(stub.requests), len(stub.replies)) - 1
                status, headers, payload, wait = stub.replies[i]
                if wait:
                    time.sleep(wait)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def jbody(value: Any) -> bytes:
    return json.dumps(value).encode()


VERDICT = {
    "task_id": "t",
    "seq": 1,
    "loop": False,
    "kind": "none",
    "loop_count": 0,
    "counted": False,
    "action": {"type": "continue"},
    "reason": "new work",
    "pivot_count": 0,
    "status": "active",
    "a_field_from_a_newer_server": [1, 2],
}
JSON = {"content-type": "application/json"}


@pytest.fixture()
def stub() -> Iterator[Any]:
    made: List[Stub] = []

    def make(*replies: Reply) -> Stub:
        s = Stub(list(replies))
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_retry_after_as_an_http_date_is_honoured(stub: Any) -> None:
    when = formatdate(time.time() + 3, usegmt=True)
    s = stub(
        (
            503,
            {"retry-after": when, **JSON},
            jbody({"code": "storage_error", "message": "disk"}),
            0,
        ),
        (200, JSON, jbody(VERDICT), 0),
    )
    retries: List[RetryEvent] = []
    with loopguard.Client(s.url, on_retry=retries.append) as c:
        v = c.evaluate({"type": "progress"}, task_id="t")
    assert v.kind == "none" and v.raw["a_field_from_a_newer_server"] == [1, 2]
    assert len(retries) == 1 and 0.0 < retries[0].delay <= 3.0
    assert retries[0].error.code == "storage_error"
    assert len(s.requests) == 2


def test_without_retry_after_the_backoff_doubles_up_to_its_cap(stub: Any) -> None:
    s = stub((429, {}, b"", 0))
    retries: List[RetryEvent] = []
    policy = RetryPolicy(max_retries=4, backoff=0.01, max_backoff=0.03, jitter=False)
    with loopguard.Client(s.url, retry=policy, on_retry=retries.append) as c:
        with pytest.raises(OverloadedError) as e:
            c.get_task("t")
    assert [r.delay for r in retries] == [0.01, 0.02, 0.03, 0.03]
    assert len(s.requests) == 5
    # An empty body still makes a readable error.
    assert (e.value.status, e.value.code, e.value.retry_after) == (429, "http_429", None)


def test_a_503_timeout_is_not_resent_for_writes_but_is_for_reads(stub: Any) -> None:
    body = jbody({"code": "timeout", "message": "it may or may not have been applied"})
    s = stub((503, JSON, body, 0))
    policy = RetryPolicy(max_retries=2, backoff=0.001, jitter=False)
    with loopguard.Client(s.url, retry=policy) as c:
        with pytest.raises(ServiceUnavailableError) as e:
            c.evaluate({"type": "progress"}, task_id="t")
        assert e.value.code == "timeout"
        assert len(s.requests) == 1, "an evaluate that may have been applied is never resent"
        with pytest.raises(ServiceUnavailableError):
            c.get_task("t")
        assert len(s.requests) == 1 + 3


def test_a_client_timeout_raises_and_is_not_resent_for_writes(stub: Any) -> None:
    s = stub((200, JSON, jbody(VERDICT), 2.0))
    with loopguard.Client(s.url, timeout=0.2, retry=RetryPolicy(backoff=0.001)) as c:
        with pytest.raises(RequestTimeoutError) as e:
            c.evaluate({"type": "progress"}, task_id="t")
    assert e.value.code == "client_timeout" and e.value.status is None
    assert len(s.requests) == 1


def test_a_refused_connection_is_retried_then_raised() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    retries: List[RetryEvent] = []
    policy = RetryPolicy(max_retries=2, backoff=0.001)
    with loopguard.Client(f"http://127.0.0.1:{port}", retry=policy, on_retry=retries.append) as c:
        with pytest.raises(TransportError) as e:
            c.evaluate({"type": "progress"}, task_id="t")
    assert e.value.code == "connect_error"
    assert len(retries) == 2


@pytest.mark.parametrize(
    "status, headers, body, cls, code, message, path",
    [
        # A proxy's HTML page.
        (
            502,
            {"content-type": "text/html"},
            b"<html><body>Bad Gateway</body></html>",
            ServerError,
            "http_502",
            "<html><body>Bad Gateway</body></html>",
            None,
        ),
        # An empty 500.
        (500, {}, b"", ServerError, "http_500", "Internal Server Error", None),
        # Errors wrapped the way batch items are.
        (
            400,
            JSON,
            jbody({"error": {"code": "invalid_event", "message": "bad", "path": "[2].task_id"}}),
            loopguard.BadRequestError,
            "invalid_event",
            "bad",
            "[2].task_id",
        ),
        # A JSON array, and a message that is not a string.
        (
            413,
            JSON,
            jbody(["too", "big"]),
            loopguard.PayloadTooLargeError,
            "http_413",
            '["too", "big"]',
            None,
        ),
        (
            401,
            JSON,
            jbody({"code": "unauthorized", "message": {"why": "no token"}}),
            loopguard.AuthenticationError,
            "unauthorized",
            '{"why": "no token"}',
            None,
        ),
        # The shape of the hardening branch's 415 for a body that is not JSON.
        (
            415,
            JSON,
            jbody({"code": "unsupported_media_type", "message": "send JSON", "path": None}),
            loopguard.UnsupportedMediaTypeError,
            "unsupported_media_type",
            "send JSON",
            None,
        ),
        # Not UTF-8 at all.
        (404, {}, b"\xff\xfe not found", loopguard.NotFoundError, "http_404", None, None),
    ],
)
def test_any_error_body_becomes_a_readable_error(  # type: ignore[no-untyped-def]
    stub, status, headers, body, cls, code, message, path
) -> None:
    s = stub((status, headers, body, 0))
    with loopguard.Client(s.url, retry=NO_RETRY) as c:
        with pytest.raises(cls) as e:
            c.get_task("t")
    assert (e.value.status, e.value.code, e.value.path) == (status, code, path)
    if message is not None:
        assert e.value.message == message
    assert str(e.value)  # prints without failing


def test_a_2xx_that_is_not_the_documented_shape_is_an_invalid_response(stub: Any) -> None:
    s = stub((200, {"content-type": "text/plain"}, b"hello", 0), (200, JSON, jbody({"seq": 1}), 0))
    with loopguard.Client(s.url) as c:
        with pytest.raises(InvalidResponseError, match="not JSON"):
            c.evaluate({"type": "progress"}, task_id="t")
        with pytest.raises(InvalidResponseError) as e:
            c.evaluate({"type": "progress"}, task_id="t")
    assert e.value.path == "task_id"


def test_requests_carry_the_token_json_and_encoded_task_ids(stub: Any) -> None:
    s = stub((200, JSON, jbody(VERDICT), 0))
    with loopguard.Client(s.url, token="s3cret") as c:
        c.evaluate({"type": "response", "text": "naïve café"}, task_id="t")
    method, path, headers, body = s.requests[0]
    headers = {k.lower(): v for k, v in headers.items()}
    assert (method, path) == ("POST", "/v1/evaluate")
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["content-type"] == "application/json"
    assert re.match(r"loopguard-python/\d", headers["user-agent"])
    assert json.loads(body) == {"task_id": "t", "event": {"type": "response", "text": "naïve café"}}

    s2 = stub((204, {}, b"", 0))
    with loopguard.Client(s2.url) as c:
        c.delete_task("epic-9/sub 2")
    assert s2.requests[0][:2] == ("DELETE", "/v1/tasks/epic-9%2Fsub%202")
    assert "authorization" not in {k.lower() for k in s2.requests[0][2]}


def test_the_async_client_retries_the_same_way(stub: Any) -> None:
    s = stub(
        (429, {"retry-after": "0", **JSON}, jbody({"code": "overloaded", "message": "full"}), 0),
        (200, JSON, jbody(VERDICT), 0),
    )
    retries: List[RetryEvent] = []

    async def main() -> Optional[loopguard.Verdict]:
        async with loopguard.AsyncClient(s.url, on_retry=retries.append) as lg:
            return await lg.evaluate({"type": "progress"}, task_id="t")

    assert asyncio.run(main()) is not None
    assert [(r.attempt, r.delay, r.error.code) for r in retries] == [(2, 0.0, "overloaded")]
