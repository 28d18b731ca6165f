"""Errors as loopguard reports them: a stable ``code``, a ``message``, the JSON ``path`` at fault.

Every 4xx/5xx body of the service is ``{"code", "message", "path"}``, but a proxy in between, an
older server or a crash can answer with anything (HTML, plain text, an empty body, another JSON
shape). :func:`error_from_response` never fails on such a body: it keeps what it can read and fills
the rest from the HTTP status.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
from typing import Any, Dict, Optional, Type

__all__ = [
    "LoopguardError",
    "BadRequestError",
    "AuthenticationError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "OverloadedError",
    "ServiceUnavailableError",
    "ServerError",
    "TransportError",
    "RequestTimeoutError",
    "InvalidResponseError",
    "error_for",
    "error_from_response",
    "parse_retry_after",
]


class LoopguardError(Exception):
    """An error answered by loopguard (or met on the way to it).

    ``status`` is the HTTP status (``None`` when no answer came back, or for an error inside a batch
    answer, where it is inferred from ``code``); ``code`` is loopguard's stable code
    (``invalid_event``, ``overloaded``, ...); ``path`` names the field at fault (``event.message``,
    ``[3].task_id``) when there is one; ``retry_after`` is the server's ``Retry-After`` in seconds.
    ``body`` is the body as received (parsed JSON, text, or ``None``).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: Optional[int] = None,
        path: Optional[str] = None,
        retry_after: Optional[float] = None,
        body: Any = None,
    ) -> None:
        self.code = code
        self.message = message
        self.status = status
        self.path = path
        self.retry_after = retry_after
        self.body = body
        super().__init__(str(self))

    def __str__(self) -> str:
        status = f" ({self.status})" if self.status is not None else ""
        where = f" at {self.path}" if self.path else ""
        return f"{self.code}{status}: {self.message}{where}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"status={self.status!r}, path={self.path!r})"
        )


class BadRequestError(LoopguardError):
    """400: not JSON, not UTF-8, an invalid event, too deep (``path`` names the field)."""


class AuthenticationError(LoopguardError):
    """401: missing or wrong bearer token."""


class NotFoundError(LoopguardError):
    """404: no such task, route or recent verdict, or the loop memory is disabled."""


class ConflictError(LoopguardError):
    """409: feedback that contradicts the verdict."""


class PayloadTooLargeError(LoopguardError):
    """413: the body, a batch or one text field is over the server's limit."""


class UnsupportedMediaTypeError(LoopguardError):
    """415: the body was not sent as JSON."""


class OverloadedError(LoopguardError):
    """429: the embedding queue is full; the event was not applied. Retried by default."""


class ServiceUnavailableError(LoopguardError):
    """503: the model is unavailable, the store failed, or the request timed out on the server."""


class ServerError(LoopguardError):
    """Any other 5xx (500 ``internal`` is a bug in loopguard)."""


class TransportError(LoopguardError):
    """No answer: the connection failed or broke (``status`` is ``None``)."""


class RequestTimeoutError(TransportError):
    """No answer within the client's timeout. A POST may or may not have been applied."""


class InvalidResponseError(LoopguardError):
    """A 2xx answer whose body is not what the API documents."""


_BY_STATUS: Dict[int, Type[LoopguardError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    429: OverloadedError,
    503: ServiceUnavailableError,
}

# The status each documented code is answered with, for errors that arrive without one (the items
# of a batch answer).
_STATUS_OF_CODE: Dict[str, int] = {
    "invalid_json": 400,
    "invalid_utf8": 400,
    "invalid_event": 400,
    "too_deep": 400,
    "unauthorized": 401,
    "not_found": 404,
    "conflict": 409,
    "body_too_large": 413,
    "too_many_events": 413,
    "field_too_large": 413,
    "unsupported_media_type": 415,
    "overloaded": 429,
    "model_unavailable": 503,
    "storage_error": 503,
    "timeout": 503,
    "internal": 500,
}


def _class_for(status: Optional[int]) -> Type[LoopguardError]:
    if status is None:
        return LoopguardError
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return LoopguardError


def error_for(
    code: str,
    message: str,
    *,
    status: Optional[int] = None,
    path: Optional[str] = None,
    retry_after: Optional[float] = None,
    body: Any = None,
) -> LoopguardError:
    """The error of the right class for a status, or for a code when the status is unknown."""
    cls = _class_for(status if status is not None else _STATUS_OF_CODE.get(code))
    return cls(code, message, status=status, path=path, retry_after=retry_after, body=body)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date; ``None`` when unreadable."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def error_from_body(
    status: Optional[int],
    body: Any,
    *,
    reason: str = "",
    retry_after: Optional[float] = None,
) -> LoopguardError:
    """Read ``{code, message, path}`` (or ``{"error": {...}}``, or anything) into an error."""
    fields: Dict[str, Any] = {}
    if isinstance(body, dict):
        inner = body.get("error")
        fields = inner if isinstance(inner, dict) else body
    code = fields.get("code")
    message = fields.get("message")
    if not isinstance(code, str) or not code:
        code = f"http_{status}" if status is not None else "unknown"
    if message is None and isinstance(fields.get("error"), str):
        message = fields["error"]
    if message is None:
        if isinstance(body, str) and body.strip():
            message = body.strip()[:500]
        elif body not in (None, "", {}):
            message = _text(body)[:500]  # type: ignore[index]
        else:
            message = reason or "no message in the answer"
    path = fields.get("path")
    return error_for(
        code,
        message if isinstance(message, str) else _text(message) or "",
        status=status,
        path=path if isinstance(path, str) else _text(path),
        retry_after=retry_after,
        body=body,
    )


def error_from_response(response: Any) -> LoopguardError:
    """The error for an ``httpx.Response`` with a 4xx/5xx status, whatever its body."""
    raw = response.content
    body: Any
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        body = text
    return error_from_body(
        response.status_code,
        body,
        reason=getattr(response, "reason_phrase", "") or "",
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )
