"""Python client for loopguard: tells an agent orchestrator, event by event, whether its LLM agent
is stuck in a loop (also when it rewords what it repeats) and what to do next.

>>> from loopguard import Client
>>> lg = Client("http://127.0.0.1:8080")
>>> v = lg.evaluate({"type": "failure", "message": "TypeError: x is undefined"}, task_id="t-42")
>>> v.loop, v.kind, v.action.type
(False, 'none', 'continue')
"""

__version__ = "0.1.0"

from .client import DEFAULT_URL, AsyncClient, Client
from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InvalidResponseError,
    LoopguardError,
    NotFoundError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServerError,
    ServiceUnavailableError,
    TransportError,
    UnsupportedMediaTypeError,
)
from .events import (
    Collaboration,
    Envelope,
    Failure,
    Outcome,
    Progress,
    Response,
    ToolCall,
    ToolResult,
    Transition,
)
from .retry import NO_RETRY, RetryEvent, RetryPolicy
from .types import (
    Action,
    AuditRecord,
    FeedbackRecord,
    History,
    JudgeReport,
    Matched,
    Readiness,
    Resolution,
    Signature,
    ArtifactChange,
    SimilarLoop,
    TaskView,
    Verdict,
    VerdictSummary,
    WindowItem,
)

__all__ = [
    "__version__",
    "DEFAULT_URL",
    "Client",
    "AsyncClient",
    "RetryPolicy",
    "RetryEvent",
    "NO_RETRY",
    "Envelope",
    "Failure",
    "ToolCall",
    "ToolResult",
    "Response",
    "Collaboration",
    "Transition",
    "Progress",
    "Outcome",
    "Verdict",
    "Action",
    "Matched",
    "Signature",
    "JudgeReport",
    "ArtifactChange",
    "SimilarLoop",
    "Resolution",
    "TaskView",
    "WindowItem",
    "VerdictSummary",
    "History",
    "AuditRecord",
    "FeedbackRecord",
    "Readiness",
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
]
