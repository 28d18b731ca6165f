"""When and how long to wait before trying a request again."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, FrozenSet, Optional

from .errors import LoopguardError, RequestTimeoutError, TransportError

__all__ = ["RetryPolicy", "RetryEvent", "NO_RETRY"]


@dataclass(frozen=True)
class RetryEvent:
    """Passed to ``on_retry`` before each wait: the attempt about to be made (2 = first retry),
    how long the client waits first, and the error that made it retry."""

    attempt: int
    delay: float
    error: LoopguardError
    method: str
    path: str


@dataclass(frozen=True)
class RetryPolicy:
    """Retries on 429 and 503, and on connections that never reached the server.

    The wait is the server's ``Retry-After`` when it sends one (at most ``max_retry_after``),
    else an exponential backoff from ``backoff`` doubling up to ``max_backoff``, with jitter so
    that clients refused together do not come back together.

    A request that may have been applied is never sent twice: a ``503 timeout`` (the server says
    it "may or may not have been applied") or a client-side timeout is retried only for reads
    (GET), never for ``evaluate``, ``reset`` or ``feedback``. ``429 overloaded``,
    ``503 model_unavailable`` and ``503 storage_error`` are answered before anything is applied,
    so they are retried for every request.
    """

    max_retries: int = 3
    backoff: float = 0.25
    max_backoff: float = 8.0
    max_retry_after: float = 30.0
    statuses: FrozenSet[int] = field(default_factory=lambda: frozenset({429, 503}))
    jitter: bool = True

    def should_retry(self, error: LoopguardError, *, idempotent: bool, attempt: int) -> bool:
        """Whether to try again after ``attempt`` tries (1 = the first) failed with ``error``."""
        if attempt > self.max_retries:
            return False
        if isinstance(error, RequestTimeoutError):
            return idempotent
        if isinstance(error, TransportError):
            # Refused or reset before an answer: a POST may still have arrived if the connection
            # broke after sending, so only connecting failures are safe for every request.
            return idempotent or error.code == "connect_error"
        if error.status not in self.statuses:
            return False
        if error.code == "timeout" and not idempotent:
            return False
        return True

    def delay(self, attempt: int, error: LoopguardError) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        if error.retry_after is not None:
            return min(error.retry_after, self.max_retry_after)
        base = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        if self.jitter:
            return float(random.uniform(base / 2, base))
        return float(base)


#: A policy that never retries.
NO_RETRY = RetryPolicy(max_retries=0)

OnRetry = Optional[Callable[[RetryEvent], None]]
