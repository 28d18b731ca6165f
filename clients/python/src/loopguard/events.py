"""The events an orchestrator sends (the brief's input contract), and the envelope around them.

Plain dicts work everywhere the client takes an event; these dataclasses spell the fields out for
editors and type checkers. ``to_dict`` leaves out fields that are ``None``.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Union

__all__ = [
    "Failure",
    "ToolResult",
    "ToolCall",
    "Response",
    "Collaboration",
    "Transition",
    "Progress",
    "Outcome",
    "Event",
    "Envelope",
    "envelope_dict",
]


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@dataclass(frozen=True)
class Failure:
    """An error the agent hit; loopguard extracts its failure signature."""

    message: str
    error_type: Optional[str] = None
    location: Optional[str] = None
    stack_trace: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none(
            {
                "type": "failure",
                "message": self.message,
                "error_type": self.error_type,
                "location": self.location,
                "stack_trace": self.stack_trace,
            }
        )


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned: ``output`` is a string or any JSON."""

    output: Any = None
    is_error: Optional[bool] = None
    exit_code: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none(
            {"output": self.output, "is_error": self.is_error, "exit_code": self.exit_code}
        )


@dataclass(frozen=True)
class ToolCall:
    """A tool invocation (``args`` is any JSON), optionally with its result."""

    tool: str
    args: Any = None
    result: Optional[ToolResult] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none(
            {
                "type": "tool_call",
                "tool": self.tool,
                "args": self.args,
                "result": self.result.to_dict() if self.result is not None else None,
            }
        )


@dataclass(frozen=True)
class Response:
    """The text of one LLM turn, or with ``chunk=True`` a piece of one still streaming
    (checked for repetition inside the stream; send the whole turn when it ends)."""

    text: str
    chunk: bool = False

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"type": "response", "text": self.text}
        if self.chunk:
            d["chunk"] = True
        return d


@dataclass(frozen=True)
class Collaboration:
    """One agent (or a person) writing to another agent, or to a group.

    ``to_group``: ``to_agent`` is a group (a chat manager, a channel) whose every member sees the
    message, so another member's message answers it. loopguard also infers a group from who writes
    to whom (two agents or more write to it and it never writes itself).
    """

    from_agent: str
    to_agent: str
    request: str
    to_group: bool = False

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "type": "collaboration",
            "from_agent": self.from_agent,
            "to_agent": self.to_agent,
            "request": self.request,
        }
        if self.to_group:
            d["to_group"] = True
        return d


@dataclass(frozen=True)
class Transition:
    """A workflow state transition (``from_`` is sent as ``from``)."""

    from_: str
    to: str
    reason: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none(
            {"type": "transition", "from": self.from_, "to": self.to, "reason": self.reason}
        )


@dataclass(frozen=True)
class Progress:
    """Objective progress: improving tests or coverage is progress, not a loop."""

    tests_passed: Optional[int] = None
    tests_failed: Optional[int] = None
    coverage: Optional[float] = None
    files_created: Optional[int] = None
    dependencies_added: Optional[int] = None
    lines_changed: Optional[int] = None
    note: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none(
            {
                "type": "progress",
                "tests_passed": self.tests_passed,
                "tests_failed": self.tests_failed,
                "coverage": self.coverage,
                "files_created": self.files_created,
                "dependencies_added": self.dependencies_added,
                "lines_changed": self.lines_changed,
                "note": self.note,
            }
        )


@dataclass(frozen=True)
class Outcome:
    """How a task or attempt ended: ``success`` and ``human_intervention`` reset the counter."""

    result: str
    note: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none({"type": "outcome", "result": self.result, "note": self.note})


Event = Union[Failure, ToolCall, Response, Collaboration, Transition, Progress, Outcome]


def _ts(value: Union[str, _dt.datetime, None]) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError("ts: a datetime without a time zone is ambiguous; give it one (UTC)")
    return value.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _event_dict(event: Union[Event, Mapping[str, Any]]) -> Dict[str, Any]:
    if isinstance(event, Mapping):
        return dict(event)
    to_dict = getattr(event, "to_dict", None)
    if to_dict is None:
        raise TypeError(
            f"an event is a dict or a loopguard.events type, not {type(event).__name__}"
        )
    out: Dict[str, Any] = to_dict()
    return out


@dataclass(frozen=True)
class Envelope:
    """One event with its routing: the task (a subtask shares its root's loop counter), the agent,
    the workflow step, the task's goal and the event time (server time when absent)."""

    task_id: str
    event: Union[Event, Mapping[str, Any]]
    parent_task_id: Optional[str] = None
    agent_id: Optional[str] = None
    step: Optional[str] = None
    goal: Optional[str] = None
    ts: Union[str, _dt.datetime, None] = None

    def to_dict(self) -> Dict[str, Any]:
        return _drop_none(
            {
                "task_id": self.task_id,
                "parent_task_id": self.parent_task_id,
                "agent_id": self.agent_id,
                "step": self.step,
                "goal": self.goal,
                "ts": _ts(self.ts),
                "event": _event_dict(self.event),
            }
        )


def envelope_dict(
    event: Union[Envelope, Event, Mapping[str, Any]],
    *,
    task_id: Optional[str] = None,
    parent_task_id: Optional[str] = None,
    agent_id: Optional[str] = None,
    step: Optional[str] = None,
    goal: Optional[str] = None,
    ts: Union[str, _dt.datetime, None] = None,
) -> Dict[str, Any]:
    """The JSON envelope for a whole envelope, or for a bare event and the routing given here.

    A dict with an ``event`` key is taken as a whole envelope; the routing arguments then fill
    in only what it leaves out.
    """
    routing = {
        "task_id": task_id,
        "parent_task_id": parent_task_id,
        "agent_id": agent_id,
        "step": step,
        "goal": goal,
        "ts": _ts(ts),
    }
    if isinstance(event, Envelope):
        out = event.to_dict()
    elif isinstance(event, Mapping) and "event" in event:
        out = dict(event)
        out["event"] = _event_dict(out["event"])
        if isinstance(out.get("ts"), _dt.datetime):
            out["ts"] = _ts(out["ts"])
    else:
        out = {"event": _event_dict(event)}
    for key, value in routing.items():
        if value is not None and out.get(key) is None:
            out[key] = value
    if out.get("task_id") is None:
        raise ValueError("an event needs a task_id: pass task_id=... or send a whole envelope")
    return out
