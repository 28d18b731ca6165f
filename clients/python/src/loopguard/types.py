"""What loopguard answers, as dataclasses (docs/SERVICE.md, docs/openapi.json).

Each type is read with ``from_dict``, which tolerates fields it does not know (a newer server)
and keeps the whole answer in ``raw``. ``kind``, ``action.type`` and ``status`` stay plain strings
at run time, so a code added to the service later does not break an older client; the ``Literal``
aliases below list the codes documented today for type checkers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional

from .errors import InvalidResponseError

__all__ = [
    "LoopKind",
    "ActionType",
    "TaskStatus",
    "EscalationTarget",
    "ResetReason",
    "FeedbackLabel",
    "Action",
    "Matched",
    "Signature",
    "JudgeReport",
    "Resolution",
    "SimilarLoop",
    "Verdict",
    "VerdictSummary",
    "WindowItem",
    "TaskView",
    "AuditRecord",
    "History",
    "FeedbackRecord",
    "Readiness",
    "STOPPING_ACTIONS",
]

LoopKind = Literal[
    "none",
    "exact_repeat",
    "semantic_repeat",
    "cycle",
    "same_error",
    "result_repeat",
    "similar_response",
    "content_loop",
    "collaboration_loop",
    "step_limit",
    "transition_cycle",
    "regression",
    "budget",
]
ActionType = Literal[
    "continue", "warn", "retry_with_hint", "pivot", "escalate", "pause", "terminate"
]
TaskStatus = Literal["active", "paused", "terminated"]
EscalationTarget = Literal["user", "planner", "leader"]
ResetReason = Literal["success", "human_intervention"]
FeedbackLabel = Literal["false_positive", "missed_loop"]

#: Actions after which the agent should not take another step on its own.
STOPPING_ACTIONS = frozenset({"escalate", "pause", "terminate"})


def _obj(d: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise InvalidResponseError(
            "invalid_response", f"expected a JSON object for {what}, got {type(d).__name__}", body=d
        )
    return d


def _req(d: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in d:
        raise InvalidResponseError(
            "invalid_response", f"{what} has no `{key}`", path=key, body=dict(d)
        )
    return d[key]


def _opt_float(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _opt_int(v: Any) -> Optional[int]:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _opt_str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


@dataclass(frozen=True)
class Action:
    """What the orchestrator should do next.

    ``message`` is the text to hand the agent or the human: a warning, a hint, or the pivot
    directive. ``target`` is set for ``escalate`` (``user``, ``planner`` or ``leader``).
    """

    type: str
    target: Optional[str] = None
    message: Optional[str] = None

    @property
    def stops_agent(self) -> bool:
        """``escalate``, ``pause`` and ``terminate``: hand over instead of taking another step."""
        return self.type in STOPPING_ACTIONS

    @classmethod
    def from_dict(cls, d: Any) -> "Action":
        d = _obj(d, "an action")
        return cls(
            type=str(_req(d, "type", "an action")),
            target=_opt_str(d.get("target")),
            message=_opt_str(d.get("message")),
        )


@dataclass(frozen=True)
class Matched:
    """The earlier event an event was matched with (its text as loopguard compared it)."""

    seq: int
    text: str
    similarity: Optional[float] = None

    @classmethod
    def from_dict(cls, d: Any) -> "Matched":
        d = _obj(d, "`matched`")
        return cls(
            seq=int(_req(d, "seq", "`matched`")),
            text=str(d.get("text", "")),
            similarity=_opt_float(d.get("similarity")),
        )


@dataclass(frozen=True)
class Signature:
    """The failure signature of the event: normalised text and its hash."""

    normalized: str
    hash: str
    error_type: Optional[str] = None
    location: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Any) -> "Signature":
        d = _obj(d, "`signature`")
        return cls(
            normalized=str(d.get("normalized", "")),
            hash=str(d.get("hash", "")),
            error_type=_opt_str(d.get("error_type")),
            location=_opt_str(d.get("location")),
        )


@dataclass(frozen=True)
class JudgeReport:
    """What the LLM judge said, when it was asked (docs/JUDGE.md)."""

    status: str
    fallback: bool
    verdict: Optional[str] = None
    confidence: Optional[float] = None
    reason: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Any) -> "JudgeReport":
        d = _obj(d, "`judge`")
        return cls(
            status=str(d.get("status", "")),
            fallback=bool(d.get("fallback", False)),
            verdict=_opt_str(d.get("verdict")),
            confidence=_opt_float(d.get("confidence")),
            reason=_opt_str(d.get("reason")),
        )


@dataclass(frozen=True)
class Resolution:
    """How a task's loop was resolved: ``success`` or ``human_intervention``, with a note."""

    result: str
    ts: int
    note: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Any) -> "Resolution":
        d = _obj(d, "a resolution")
        return cls(
            result=str(d.get("result", "")),
            ts=_opt_int(d.get("ts")) or 0,
            note=_opt_str(d.get("note")),
        )


@dataclass(frozen=True)
class SimilarLoop:
    """A loop seen before (in another task) close to a text, with how it was resolved."""

    task_id: str
    kind: str
    text: str
    similarity: float
    seen_at: str
    tool: Optional[str] = None
    resolution: Optional[Resolution] = None

    @classmethod
    def from_dict(cls, d: Any) -> "SimilarLoop":
        d = _obj(d, "a similar loop")
        res = d.get("resolution")
        return cls(
            task_id=str(_req(d, "task_id", "a similar loop")),
            kind=str(d.get("kind", "")),
            text=str(d.get("text", "")),
            similarity=_opt_float(d.get("similarity")) or 0.0,
            seen_at=str(d.get("seen_at", "")),
            tool=_opt_str(d.get("tool")),
            resolution=Resolution.from_dict(res) if isinstance(res, Mapping) else None,
        )


@dataclass(frozen=True)
class ArtifactChange:
    """An artifact a collaboration message carried (a program, a file, a document in a fenced
    block) and what the message did to it since its latest version: ``change`` is ``new``,
    ``unchanged``, ``earlier`` (back to an earlier version) or ``changed`` (``added`` and
    ``removed`` lines, ``parts`` where lines were added)."""

    hash: str
    lines: int
    change: str
    added: int = 0
    removed: int = 0
    name: Optional[str] = None
    named: bool = False
    parts: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Any) -> "ArtifactChange":
        d = _obj(d, "an artifact change")
        parts = d.get("parts")
        return cls(
            hash=str(_req(d, "hash", "an artifact change")),
            lines=int(d.get("lines", 0)),
            change=str(_req(d, "change", "an artifact change")),
            added=int(d.get("added", 0)),
            removed=int(d.get("removed", 0)),
            name=_opt_str(d.get("name")),
            named=bool(d.get("named", False)),
            parts=[str(p) for p in parts] if isinstance(parts, list) else [],
        )


@dataclass(frozen=True)
class Verdict:
    """One event's verdict: is it a loop, which kind, and what to do next (``action``).

    ``seq`` is the event's position in its root task, from 1; ``counted`` says whether it moved
    the loop counter (external failures never do); ``similarity`` and ``matched`` say what it was
    compared with; ``rule`` names the detection rule behind it (``loopguard rules`` lists them);
    ``similar_loops`` lists loops of other tasks like this one and how they ended;
    ``artifacts`` says, for a collaboration message, how each artifact it carried changed.
    """

    task_id: str
    seq: int
    loop: bool
    kind: str
    loop_count: int
    counted: bool
    action: Action
    reason: str
    pivot_count: int
    status: str
    similarity: Optional[float] = None
    matched: Optional[Matched] = None
    signature: Optional[Signature] = None
    judge: Optional[JudgeReport] = None
    rule: Optional[str] = None
    similar_loops: List[SimilarLoop] = field(default_factory=list)
    artifacts: List[ArtifactChange] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def stops_agent(self) -> bool:
        """The agent should stop and hand over (``escalate``, ``pause`` or ``terminate``)."""
        return self.action.stops_agent

    @classmethod
    def from_dict(cls, d: Any) -> "Verdict":
        d = _obj(d, "a verdict")
        what = "a verdict"
        matched = d.get("matched")
        signature = d.get("signature")
        judge = d.get("judge")
        similar = d.get("similar_loops")
        artifacts = d.get("artifacts")
        return cls(
            task_id=str(_req(d, "task_id", what)),
            seq=int(_req(d, "seq", what)),
            loop=bool(_req(d, "loop", what)),
            kind=str(_req(d, "kind", what)),
            loop_count=int(d.get("loop_count", 0)),
            counted=bool(d.get("counted", False)),
            action=Action.from_dict(_req(d, "action", what)),
            reason=str(d.get("reason", "")),
            pivot_count=int(d.get("pivot_count", 0)),
            status=str(d.get("status", "active")),
            similarity=_opt_float(d.get("similarity")),
            matched=Matched.from_dict(matched) if isinstance(matched, Mapping) else None,
            signature=Signature.from_dict(signature) if isinstance(signature, Mapping) else None,
            judge=JudgeReport.from_dict(judge) if isinstance(judge, Mapping) else None,
            rule=str(d["rule"]) if d.get("rule") is not None else None,
            similar_loops=[SimilarLoop.from_dict(s) for s in similar]
            if isinstance(similar, list)
            else [],
            artifacts=[ArtifactChange.from_dict(a) for a in artifacts]
            if isinstance(artifacts, list)
            else [],
            raw=dict(d),
        )


@dataclass(frozen=True)
class VerdictSummary:
    """One of a task's recent verdicts, as ``GET /v1/tasks/{id}`` lists them."""

    seq: int
    loop: bool
    kind: str
    action: str
    loop_count: int
    event_type: str
    text: str
    task_id: Optional[str] = None
    matched_seq: Optional[int] = None
    matched_text: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Any) -> "VerdictSummary":
        d = _obj(d, "a recent verdict")
        action = d.get("action")
        if isinstance(action, Mapping):
            action = action.get("type")
        return cls(
            seq=int(d.get("seq", 0)),
            loop=bool(d.get("loop", False)),
            kind=str(d.get("kind", "")),
            action=str(action or ""),
            loop_count=int(d.get("loop_count", 0)),
            event_type=str(d.get("event_type", "")),
            text=str(d.get("text", "")),
            task_id=_opt_str(d.get("task_id")),
            matched_seq=_opt_int(d.get("matched_seq")),
            matched_text=_opt_str(d.get("matched_text")),
        )


@dataclass(frozen=True)
class WindowItem:
    """One event of the task's comparison window (text normalised as loopguard compares it)."""

    seq: int
    type: str
    ts: str
    text: str
    new_work: bool
    agent_id: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Any) -> "WindowItem":
        d = _obj(d, "a window item")
        return cls(
            seq=int(d.get("seq", 0)),
            type=str(d.get("type", "")),
            ts=str(d.get("ts", "")),
            text=str(d.get("text", "")),
            new_work=bool(d.get("new_work", False)),
            agent_id=_opt_str(d.get("agent_id")),
        )


@dataclass(frozen=True)
class TaskView:
    """A task's state: status, loop counter, pivots, window and last verdicts."""

    task_id: str
    root_task_id: str
    status: str
    loop_count: int
    entropy_count: int
    pivot_count: int
    events_total: int
    kind_counts: Dict[str, int]
    step_entries: Dict[str, int]
    window: List[WindowItem]
    last_verdicts: List[VerdictSummary]
    created_at: str
    updated_at: str
    current_step: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Any) -> "TaskView":
        d = _obj(d, "a task")
        window = d.get("window")
        last = d.get("last_verdicts")
        kinds = d.get("kind_counts")
        steps = d.get("step_entries")
        return cls(
            task_id=str(_req(d, "task_id", "a task")),
            root_task_id=str(d.get("root_task_id", d["task_id"])),
            status=str(d.get("status", "")),
            loop_count=int(d.get("loop_count", 0)),
            entropy_count=int(d.get("entropy_count", 0)),
            pivot_count=int(d.get("pivot_count", 0)),
            events_total=int(d.get("events_total", 0)),
            kind_counts={str(k): int(v) for k, v in kinds.items()}
            if isinstance(kinds, Mapping)
            else {},
            step_entries={str(k): int(v) for k, v in steps.items()}
            if isinstance(steps, Mapping)
            else {},
            window=[WindowItem.from_dict(w) for w in window] if isinstance(window, list) else [],
            last_verdicts=[VerdictSummary.from_dict(v) for v in last]
            if isinstance(last, list)
            else [],
            created_at=str(d.get("created_at", "")),
            updated_at=str(d.get("updated_at", "")),
            current_step=_opt_str(d.get("current_step")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class AuditRecord:
    """One entry of a task's audit trail.

    ``event`` is ``loop_detected``, ``pivot_issued``, ``gate_triggered``, ``loop_counter_reset``,
    ``agent_changed`` or ``budget_exhausted``; ``fields`` holds that event's own fields
    (``kind``, ``loop_count``, ``by``, ``note``, ...).
    """

    event: str
    ts: str
    seq: Optional[int]
    task_id: Optional[str]
    agent_id: Optional[str]
    fields: Dict[str, Any]

    _COMMON = ("event", "ts", "seq", "task_id", "agent_id")

    @classmethod
    def from_dict(cls, d: Any) -> "AuditRecord":
        d = _obj(d, "an audit record")
        return cls(
            event=str(d.get("event", "")),
            ts=str(d.get("ts", "")),
            seq=_opt_int(d.get("seq")),
            task_id=_opt_str(d.get("task_id")),
            agent_id=_opt_str(d.get("agent_id")),
            fields={k: v for k, v in d.items() if k not in cls._COMMON},
        )


@dataclass(frozen=True)
class History:
    """A task's audit trail, oldest first."""

    task_id: str
    root_task_id: str
    records: List[AuditRecord]

    @classmethod
    def from_dict(cls, d: Any) -> "History":
        d = _obj(d, "a history")
        records = d.get("records")
        return cls(
            task_id=str(_req(d, "task_id", "a history")),
            root_task_id=str(d.get("root_task_id", d["task_id"])),
            records=[AuditRecord.from_dict(r) for r in records]
            if isinstance(records, list)
            else [],
        )


@dataclass(frozen=True)
class FeedbackRecord:
    """A piece of feedback as stored: the verdict it is about and the events up to it."""

    id: int
    ts: int
    task_id: str
    root_task_id: str
    seq: int
    label: str
    kind: str
    event_type: str
    text: str
    events: List[Dict[str, Any]]
    note: Optional[str] = None
    matched_seq: Optional[int] = None
    matched_text: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Any) -> "FeedbackRecord":
        d = _obj(d, "a feedback record")
        events = d.get("events")
        return cls(
            id=int(d.get("id", 0)),
            ts=int(d.get("ts", 0)),
            task_id=str(_req(d, "task_id", "a feedback record")),
            root_task_id=str(d.get("root_task_id", d["task_id"])),
            seq=int(d.get("seq", 0)),
            label=str(d.get("label", "")),
            kind=str(d.get("kind", "")),
            event_type=str(d.get("event_type", "")),
            text=str(d.get("text", "")),
            events=[e for e in events if isinstance(e, dict)] if isinstance(events, list) else [],
            note=_opt_str(d.get("note")),
            matched_seq=_opt_int(d.get("matched_seq")),
            matched_text=_opt_str(d.get("matched_text")),
        )


@dataclass(frozen=True)
class Readiness:
    """``GET /readyz``: ``ready``, ``loading`` or ``failed`` (with why)."""

    status: str
    model: str
    store: str
    error: Optional[str] = None

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @classmethod
    def from_dict(cls, d: Any) -> "Readiness":
        d = _obj(d, "a readiness answer")
        return cls(
            status=str(d.get("status", "")),
            model=str(d.get("model", "")),
            store=str(d.get("store", "")),
            error=_opt_str(d.get("error")),
        )
