"""Sync and async clients for the loopguard service.

Both share the request builders and answer parsers below; only sending and waiting differ.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import os
import time
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    TypeVar,
    Union,
)
from urllib.parse import quote

import httpx

from . import __version__
from .errors import (
    InvalidResponseError,
    LoopguardError,
    RequestTimeoutError,
    ServiceUnavailableError,
    TransportError,
    error_from_body,
    error_from_response,
)
from .events import Envelope, Event, envelope_dict
from .retry import OnRetry, RetryEvent, RetryPolicy
from .types import FeedbackRecord, History, Readiness, SimilarLoop, TaskView, Verdict

__all__ = ["Client", "AsyncClient", "DEFAULT_URL"]

#: Where ``loopguard serve`` listens by default; ``LOOPGUARD_URL`` overrides it.
DEFAULT_URL = "http://127.0.0.1:8080"

T = TypeVar("T")
EventLike = Union[Envelope, Event, Mapping[str, Any]]
BatchResult = List[Union[Verdict, LoopguardError]]
Timeout = Union[float, httpx.Timeout, None]


@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Optional[Dict[str, Any]] = None
    body: Any = None
    # Safe to send twice: reads. Writes are retried only when the server said it applied nothing.
    idempotent: bool = False
    # Statuses whose body is an answer, not an error (`/readyz` answers 503 while loading).
    answer_statuses: Tuple[int, ...] = ()


def _json(resp: httpx.Response) -> Any:
    try:
        return json.loads(resp.content.decode("utf-8"))
    except ValueError as e:
        raise InvalidResponseError(
            "invalid_response",
            f"{resp.request.method} {resp.request.url.path} answered {resp.status_code} "
            f"with a body that is not JSON: {resp.text[:200]!r}",
            status=resp.status_code,
            body=resp.text,
        ) from e


def _parse_batch(resp: httpx.Response) -> BatchResult:
    items = _json(resp)
    if not isinstance(items, list):
        raise InvalidResponseError(
            "invalid_response",
            "a batch is answered with an array",
            status=resp.status_code,
            body=items,
        )
    out: BatchResult = []
    for item in items:
        if isinstance(item, Mapping) and "error" in item and "seq" not in item:
            out.append(error_from_body(None, item))
        else:
            out.append(Verdict.from_dict(item))
    return out


def _parse_readiness(resp: httpx.Response) -> Readiness:
    try:
        body = json.loads(resp.content.decode("utf-8"))
    except ValueError:
        body = None
    if not isinstance(body, Mapping) or "status" not in body:
        if resp.status_code >= 400:
            raise error_from_response(resp)
        raise InvalidResponseError(
            "invalid_response", "/readyz answered without a status", body=body
        )
    return Readiness.from_dict(body)


def _parse_ndjson(resp: httpx.Response) -> List[Dict[str, Any]]:
    out = []
    for n, line in enumerate(resp.text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:
            raise InvalidResponseError(
                "invalid_response", f"line {n} of the export is not JSON: {e}", body=resp.text
            ) from e
    return out


def _task_path(task_id: str, suffix: str = "") -> str:
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("task_id must be a non-empty string")
    # Subtask ids often hold slashes (`epic-9/sub-2`): they are one path segment.
    return f"/v1/tasks/{quote(task_id, safe='')}{suffix}"


def _transport_error(e: httpx.HTTPError, method: str, path: str) -> TransportError:
    if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)):
        err: TransportError = TransportError(
            "connect_error", f"could not connect for {method} {path}: {e}"
        )
    elif isinstance(e, httpx.TimeoutException):
        err = RequestTimeoutError(
            "client_timeout", f"no answer to {method} {path} within the client's timeout: {e!r}"
        )
    else:
        err = TransportError("connection_error", f"{method} {path} failed: {e!r}")
    err.__cause__ = e
    return err


class _Base:
    """Configuration and request builders shared by :class:`Client` and :class:`AsyncClient`."""

    def __init__(
        self,
        base_url: Optional[str],
        token: Optional[str],
        timeout: Timeout,
        retry: Optional[RetryPolicy],
        on_retry: OnRetry,
        headers: Optional[Mapping[str, str]],
    ) -> None:
        self.base_url = (base_url or os.environ.get("LOOPGUARD_URL") or DEFAULT_URL).rstrip("/")
        token = token if token is not None else os.environ.get("LOOPGUARD_TOKEN")
        self.retry = retry if retry is not None else RetryPolicy()
        self.on_retry = on_retry
        self.timeout = timeout
        self._headers: Dict[str, str] = {
            "user-agent": f"loopguard-python/{__version__}",
            "accept": "application/json",
        }
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        if headers:
            self._headers.update(headers)

    # --- request builders -------------------------------------------------------------------

    @staticmethod
    def _evaluate(event: EventLike, routing: Dict[str, Any]) -> _Call[Verdict]:
        body = envelope_dict(event, **routing)
        return _Call("POST", "/v1/evaluate", lambda r: Verdict.from_dict(_json(r)), body=body)

    @staticmethod
    def _evaluate_batch(events: Iterable[EventLike], routing: Dict[str, Any]) -> _Call[BatchResult]:
        body = [envelope_dict(e, **routing) for e in events]
        return _Call("POST", "/v1/evaluate", _parse_batch, body=body)

    @staticmethod
    def _get_task(task_id: str) -> _Call[TaskView]:
        return _Call(
            "GET", _task_path(task_id), lambda r: TaskView.from_dict(_json(r)), idempotent=True
        )

    @staticmethod
    def _history(task_id: str, limit: Optional[int]) -> _Call[History]:
        params = {"limit": limit} if limit is not None else None
        return _Call(
            "GET",
            _task_path(task_id, "/history"),
            lambda r: History.from_dict(_json(r)),
            params=params,
            idempotent=True,
        )

    @staticmethod
    def _reset(
        task_id: str, reason: str, by: Optional[str], note: Optional[str]
    ) -> _Call[TaskView]:
        body = {
            k: v for k, v in {"reason": reason, "by": by, "note": note}.items() if v is not None
        }
        return _Call(
            "POST", _task_path(task_id, "/reset"), lambda r: TaskView.from_dict(_json(r)), body=body
        )

    @staticmethod
    def _delete_task(task_id: str) -> _Call[None]:
        # Deleting twice ends in the same state (the second answers 404), so it may be retried.
        return _Call("DELETE", _task_path(task_id), lambda r: None, idempotent=True)

    @staticmethod
    def _similar_loops(
        text: str, k: Optional[int], min_similarity: Optional[float]
    ) -> _Call[List[SimilarLoop]]:
        params: Dict[str, Any] = {"text": text}
        if k is not None:
            params["k"] = k
        if min_similarity is not None:
            params["min_similarity"] = min_similarity

        def parse(r: httpx.Response) -> List[SimilarLoop]:
            body = _json(r)
            loops = body.get("loops") if isinstance(body, Mapping) else None
            if not isinstance(loops, list):
                raise InvalidResponseError("invalid_response", "expected {loops: [...]}", body=body)
            return [SimilarLoop.from_dict(x) for x in loops]

        return _Call("GET", "/v1/loops/similar", parse, params=params, idempotent=True)

    @staticmethod
    def _feedback(
        task_id: str, seq: int, label: str, note: Optional[str], matched_seq: Optional[int]
    ) -> _Call[FeedbackRecord]:
        body: Dict[str, Any] = {"task_id": task_id, "seq": seq, "label": label}
        if note is not None:
            body["note"] = note
        if matched_seq is not None:
            body["matched_seq"] = matched_seq
        return _Call(
            "POST", "/v1/feedback", lambda r: FeedbackRecord.from_dict(_json(r)), body=body
        )

    @staticmethod
    def _export_feedback(format: str) -> _Call[List[Dict[str, Any]]]:
        return _Call(
            "GET", "/v1/feedback/export", _parse_ndjson, params={"format": format}, idempotent=True
        )

    @staticmethod
    def _livez() -> _Call[bool]:
        return _Call("GET", "/livez", lambda r: r.status_code == 200, idempotent=True)

    @staticmethod
    def _readyz() -> _Call[Readiness]:
        # No retries: a 503 here is the answer ("loading" or "failed"), not a refusal.
        return _Call("GET", "/readyz", _parse_readiness, idempotent=True, answer_statuses=(503,))

    @staticmethod
    def _metrics() -> _Call[str]:
        return _Call("GET", "/metrics", lambda r: r.text, idempotent=True)

    @staticmethod
    def _openapi() -> _Call[Dict[str, Any]]:
        return _Call("GET", "/openapi.json", _json, idempotent=True)

    # --- shared sending logic ---------------------------------------------------------------

    def _request_kwargs(self, call: _Call[Any]) -> Dict[str, Any]:
        kwargs: Dict[str, Any] = {"params": call.params}
        if call.body is not None:
            # allow_nan=False: NaN is not JSON, and the server would answer invalid_json.
            kwargs["content"] = json.dumps(call.body, ensure_ascii=False, allow_nan=False).encode()
            kwargs["headers"] = {"content-type": "application/json"}
        return kwargs

    def _outcome(self, call: _Call[T], resp: httpx.Response) -> Tuple[bool, Any]:
        """(True, parsed answer) or (False, the error it carries)."""
        if resp.status_code < 400 or resp.status_code in call.answer_statuses:
            return True, call.parse(resp)
        return False, error_from_response(resp)

    def _next_wait(self, call: _Call[Any], err: LoopguardError, attempt: int) -> Optional[float]:
        """Seconds to wait before trying again, or None to give up with ``err``."""
        if not self.retry.should_retry(err, idempotent=call.idempotent, attempt=attempt):
            return None
        delay = self.retry.delay(attempt, err)
        if self.on_retry is not None:
            self.on_retry(RetryEvent(attempt + 1, delay, err, call.method, call.path))
        return delay

    @staticmethod
    def _not_ready(
        last: Optional[Readiness], last_error: Optional[LoopguardError], timeout: float
    ) -> LoopguardError:
        if last is not None and last.status == "failed":
            return ServiceUnavailableError(
                "model_unavailable", f"loopguard failed to start: {last.error}", status=503
            )
        why = f"last status {last.status!r}" if last else f"last error: {last_error}"
        return LoopguardError("not_ready", f"loopguard was not ready within {timeout} s ({why})")


class Client(_Base):
    """A blocking client.

    >>> with Client("http://127.0.0.1:8080") as lg:
    ...     v = lg.evaluate(Failure("TypeError: x is undefined"), task_id="t-1")
    ...     if v.action.type == "pivot":
    ...         agent.tell(v.action.message)

    ``base_url`` defaults to ``$LOOPGUARD_URL``, then ``http://127.0.0.1:8080``; ``token`` to
    ``$LOOPGUARD_TOKEN`` (sent as ``Authorization: Bearer``). ``timeout`` is per request, in
    seconds or as an ``httpx.Timeout``. ``retry`` says when to retry (:class:`RetryPolicy`,
    :data:`NO_RETRY`); ``on_retry`` is called before each wait (for logs or metrics).
    ``http_client`` lets you bring your own ``httpx.Client`` (proxies, TLS, transports); it is
    then yours to close.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        timeout: Timeout = 10.0,
        retry: Optional[RetryPolicy] = None,
        on_retry: OnRetry = None,
        headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        super().__init__(base_url, token, timeout, retry, on_retry, headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _send(self, call: _Call[T]) -> T:
        url = self.base_url + call.path
        attempt = 1
        while True:
            try:
                resp = self._http.request(
                    call.method,
                    url,
                    timeout=self.timeout,
                    **_merge_headers(self._request_kwargs(call), self._headers),
                )
            except httpx.HTTPError as e:
                err: LoopguardError = _transport_error(e, call.method, call.path)
            else:
                ok, value = self._outcome(call, resp)
                if ok:
                    return value  # type: ignore[no-any-return]
                err = value
            delay = self._next_wait(call, err, attempt)
            if delay is None:
                raise err
            time.sleep(delay)
            attempt += 1

    # --- the API ----------------------------------------------------------------------------

    def evaluate(
        self,
        event: EventLike,
        *,
        task_id: Optional[str] = None,
        parent_task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        step: Optional[str] = None,
        goal: Optional[str] = None,
        ts: Union[str, _dt.datetime, None] = None,
    ) -> Verdict:
        """One event → its verdict. ``event`` is a whole envelope (an :class:`Envelope`, or a dict
        with ``task_id`` and ``event``), or a bare event with ``task_id=`` given here."""
        routing = dict(
            task_id=task_id,
            parent_task_id=parent_task_id,
            agent_id=agent_id,
            step=step,
            goal=goal,
            ts=ts,
        )
        return self._send(self._evaluate(event, routing))

    def evaluate_batch(
        self,
        events: Iterable[EventLike],
        *,
        task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
    ) -> BatchResult:
        """Many events in one request → one item per event, in order: a :class:`Verdict`, or the
        :class:`LoopguardError` for that event (its ``path`` starts with ``[i]``). Events of one
        task are applied in order. Items refused with ``overloaded`` are not retried here: a
        later event of the same task may already have been applied."""
        return self._send(self._evaluate_batch(events, dict(task_id=task_id, agent_id=agent_id)))

    def get_task(self, task_id: str) -> TaskView:
        """A task's status, loop counter, pivots, window and last verdicts (a subtask shows its
        root's)."""
        return self._send(self._get_task(task_id))

    def history(self, task_id: str, *, limit: Optional[int] = None) -> History:
        """The audit trail, oldest first: the newest ``limit`` records (server default 100)."""
        return self._send(self._history(task_id, limit))

    def reset(
        self,
        task_id: str,
        reason: str = "human_intervention",
        *,
        by: Optional[str] = None,
        note: Optional[str] = None,
    ) -> TaskView:
        """Reset the loop counter (``success`` or ``human_intervention``); ``note`` says how the
        loop was resolved and is offered to other tasks that hit a similar loop."""
        return self._send(self._reset(task_id, reason, by, note))

    def delete_task(self, task_id: str) -> None:
        """Forget a task (its root) and its loops in the loop memory."""
        self._send(self._delete_task(task_id))

    def similar_loops(
        self, text: str, *, k: Optional[int] = None, min_similarity: Optional[float] = None
    ) -> List[SimilarLoop]:
        """The closest loops seen in any task, with how they were resolved."""
        return self._send(self._similar_loops(text, k, min_similarity))

    def feedback(
        self,
        task_id: str,
        seq: int,
        label: str,
        *,
        note: Optional[str] = None,
        matched_seq: Optional[int] = None,
    ) -> FeedbackRecord:
        """Mark one of the task's recent verdicts ``false_positive`` or ``missed_loop``."""
        return self._send(self._feedback(task_id, seq, label, note, matched_seq))

    def export_feedback(self, format: str = "pairs") -> List[Dict[str, Any]]:
        """All feedback as labelled ``pairs`` or ``runs``, for ``loopguard calibrate``."""
        return self._send(self._export_feedback(format))

    def livez(self) -> bool:
        return self._send(self._livez())

    def readyz(self) -> Readiness:
        return self._send(self._readyz())

    def wait_ready(self, timeout: float = 60.0, interval: float = 0.2) -> Readiness:
        """Wait until the model is warm and the store open; raise if it failed or took too long."""
        deadline = time.monotonic() + timeout
        last: Optional[Readiness] = None
        last_error: Optional[LoopguardError] = None
        while True:
            try:
                last = self.readyz()
                if last.ready:
                    return last
                if last.status == "failed":
                    break
            except TransportError as e:
                last_error = e
            if time.monotonic() >= deadline:
                break
            time.sleep(interval)
        raise self._not_ready(last, last_error, timeout)

    def metrics(self) -> str:
        """Prometheus text."""
        return self._send(self._metrics())

    def openapi(self) -> Dict[str, Any]:
        return self._send(self._openapi())


class AsyncClient(_Base):
    """The asyncio client: the same methods as :class:`Client`, awaited.

    >>> async with AsyncClient() as lg:
    ...     verdicts = await asyncio.gather(*(lg.evaluate(e) for e in envelopes))
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        timeout: Timeout = 10.0,
        retry: Optional[RetryPolicy] = None,
        on_retry: OnRetry = None,
        headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        super().__init__(base_url, token, timeout, retry, on_retry, headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _send(self, call: _Call[T]) -> T:
        url = self.base_url + call.path
        attempt = 1
        while True:
            try:
                resp = await self._http.request(
                    call.method,
                    url,
                    timeout=self.timeout,
                    **_merge_headers(self._request_kwargs(call), self._headers),
                )
            except httpx.HTTPError as e:
                err: LoopguardError = _transport_error(e, call.method, call.path)
            else:
                ok, value = self._outcome(call, resp)
                if ok:
                    return value  # type: ignore[no-any-return]
                err = value
            delay = self._next_wait(call, err, attempt)
            if delay is None:
                raise err
            await asyncio.sleep(delay)
            attempt += 1

    async def evaluate(
        self,
        event: EventLike,
        *,
        task_id: Optional[str] = None,
        parent_task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        step: Optional[str] = None,
        goal: Optional[str] = None,
        ts: Union[str, _dt.datetime, None] = None,
    ) -> Verdict:
        """See :meth:`Client.evaluate`."""
        routing = dict(
            task_id=task_id,
            parent_task_id=parent_task_id,
            agent_id=agent_id,
            step=step,
            goal=goal,
            ts=ts,
        )
        return await self._send(self._evaluate(event, routing))

    async def evaluate_batch(
        self,
        events: Iterable[EventLike],
        *,
        task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
    ) -> BatchResult:
        """See :meth:`Client.evaluate_batch`."""
        return await self._send(
            self._evaluate_batch(events, dict(task_id=task_id, agent_id=agent_id))
        )

    async def get_task(self, task_id: str) -> TaskView:
        return await self._send(self._get_task(task_id))

    async def history(self, task_id: str, *, limit: Optional[int] = None) -> History:
        return await self._send(self._history(task_id, limit))

    async def reset(
        self,
        task_id: str,
        reason: str = "human_intervention",
        *,
        by: Optional[str] = None,
        note: Optional[str] = None,
    ) -> TaskView:
        return await self._send(self._reset(task_id, reason, by, note))

    async def delete_task(self, task_id: str) -> None:
        await self._send(self._delete_task(task_id))

    async def similar_loops(
        self, text: str, *, k: Optional[int] = None, min_similarity: Optional[float] = None
    ) -> List[SimilarLoop]:
        return await self._send(self._similar_loops(text, k, min_similarity))

    async def feedback(
        self,
        task_id: str,
        seq: int,
        label: str,
        *,
        note: Optional[str] = None,
        matched_seq: Optional[int] = None,
    ) -> FeedbackRecord:
        return await self._send(self._feedback(task_id, seq, label, note, matched_seq))

    async def export_feedback(self, format: str = "pairs") -> List[Dict[str, Any]]:
        return await self._send(self._export_feedback(format))

    async def livez(self) -> bool:
        return await self._send(self._livez())

    async def readyz(self) -> Readiness:
        return await self._send(self._readyz())

    async def wait_ready(self, timeout: float = 60.0, interval: float = 0.2) -> Readiness:
        """See :meth:`Client.wait_ready`."""
        deadline = time.monotonic() + timeout
        last: Optional[Readiness] = None
        last_error: Optional[LoopguardError] = None
        while True:
            try:
                last = await self.readyz()
                if last.ready:
                    return last
                if last.status == "failed":
                    break
            except TransportError as e:
                last_error = e
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(interval)
        raise self._not_ready(last, last_error, timeout)

    async def metrics(self) -> str:
        return await self._send(self._metrics())

    async def openapi(self) -> Dict[str, Any]:
        return await self._send(self._openapi())


def _merge_headers(kwargs: Dict[str, Any], base: Mapping[str, str]) -> Dict[str, Any]:
    headers = dict(base)
    headers.update(kwargs.pop("headers", {}) or {})
    kwargs["headers"] = headers
    return kwargs
