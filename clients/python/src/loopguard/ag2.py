"""loopguard for AG2 (AutoGen) chats: every message of a two-agent chat or a group chat goes to
loopguard as it is sent, and the team acts on the verdicts.

>>> from loopguard import Client
>>> from loopguard.ag2 import watch
>>> guard = watch(Client(), coder, reviewer, lead, task_id="review-42")   # before the chat starts
>>> result = lead.initiate_chat(manager, message="Write slugify() and get it reviewed.")
>>> if guard.stopped:                                                    # paused for a human
...     print(guard.stopped.reason)

It works on AG2's ``autogen`` API (``ConversableAgent``, ``GroupChat``, ``GroupChatManager``), as
``ag2`` before 1.0 and AG2 Classic (``autogen`` on PyPI) ship it, through the agents' own extension
points; AG2 is imported only to recognise a group chat manager, so the client does not depend on
it.

- **What is sent.** A message to a ``GroupChatManager`` is a ``collaboration`` from the speaker to
  the manager with ``to_group: true``: the manager relays it to every member, so another member's
  message answers it. In a two-agent chat a message is a ``collaboration`` from its sender to its
  recipient. The manager's relays are not sent again. A code execution result (``exitcode: N
  (...)\\nCode output: ...``, what an agent with ``code_execution_config`` replies) is a
  ``tool_call`` of ``code_execution`` with the code it ran (the last code blocks sent in the chat)
  and its output and exit code; a tool's response (``tool_responses``) is a ``tool_call`` of the
  tool with the arguments the model asked for it with. The speaker is the event's ``agent_id``.
  (``process_message_before_send`` hook on each watched agent.)
- **A warning, a hint or the pivot directive** becomes a message the next speaker sees: it is added
  to what the next watched agent that has a model reads before it replies
  (``process_all_messages_before_reply`` hook), once; an agent without a model (one that only runs
  code) does not take it.
- **escalate, pause, terminate** stop the chat: the next watched agent asked to reply answers
  nothing (a reply function registered first, ``register_reply(position=0)``), which ends a group
  chat ("No reply generated") and a two-agent chat. ``guard.stopped`` is the verdict that stopped
  it, with its ``reason`` and ``action``.
- **When loopguard cannot answer** (down, overloaded, an error), the chat goes on unwatched for that
  message: the error is kept in ``guard.errors`` and logged, never raised into the chat (unless
  ``fail_open=False``).

The hooks are synchronous, like AG2's: in a chat run with ``a_initiate_chat`` each message waits
for loopguard's answer (a few milliseconds on a warm service) on the event loop.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .client import Client
from .errors import LoopguardError
from .events import Collaboration, ToolCall, ToolResult
from .types import Verdict

__all__ = ["ChatGuard", "Seen", "watch"]

log = logging.getLogger("loopguard.ag2")

#: The reply of an agent that executed code (AG2's ``generate_code_execution_reply``).
_CODE_RESULT = re.compile(r"\Aexitcode: (-?\d+) \([^)]*\)\nCode output: ?(.*)\Z", re.DOTALL)
#: Markdown code blocks, as AG2's code extractor finds them.
_CODE_BLOCK = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
#: What the speaker reads as the sender of a directive (OpenAI's ``name`` pattern).
NOTE_NAME = "loopguard"


@dataclass
class Seen:
    """One message of the chat and what loopguard said of it (``verdict`` is ``None`` when it
    could not answer, or for a message that was not evaluated)."""

    sender: str
    recipient: str
    event: Dict[str, Any]
    verdict: Optional[Verdict]


@dataclass
class ChatGuard:
    """The loopguard side of one chat (one loopguard task): register it on the agents with
    :meth:`watch` (or :func:`watch`) before the chat starts."""

    client: Client
    task_id: str = field(default_factory=lambda: f"ag2-{uuid.uuid4().hex[:12]}")
    fail_open: bool = True
    #: Every message evaluated, in order.
    seen: List[Seen] = field(default_factory=list)
    #: The verdict that stopped the chat (escalate, pause, terminate), if any.
    stopped: Optional[Verdict] = None
    #: The notes delivered: (the agent that read it, the text).
    delivered: List[Tuple[str, str]] = field(default_factory=list)
    #: What loopguard could not answer (the chat went on).
    errors: List[LoopguardError] = field(default_factory=list)
    _note: Optional[str] = None
    _code: Optional[Tuple[str, str]] = None
    _tool_calls: Dict[str, Tuple[str, Any]] = field(default_factory=dict)
    _watched: List[Any] = field(default_factory=list)

    def watch(self, *agents: Any) -> "ChatGuard":
        """Registers the hooks on each agent: every member of a group chat (the manager need not
        be watched: its relays are not evaluated), or both agents of a two-agent chat."""
        for agent in agents:
            if any(agent is a for a in self._watched):
                continue
            self._watched.append(agent)
            agent.register_hook("process_message_before_send", self._before_send)
            agent.register_hook("process_all_messages_before_reply", _Deliver(self, agent))
            agent.register_reply([_agent_class(), None], _StopReply(self), position=0)
        return self

    # -- the hooks ---------------------------------------------------------------------------

    def _before_send(self, sender: Any, message: Any, recipient: Any, silent: bool) -> Any:
        if self.stopped is not None or _is_manager(sender):
            return message
        for event in self._events(sender, message, recipient):
            verdict = self._evaluate(event, sender.name)
            self.seen.append(Seen(sender.name, recipient.name, event, verdict))
            if verdict is None:
                continue
            if verdict.stops_agent:
                self.stopped = verdict
                log.warning(
                    "loopguard stops the chat (task %s, %s): %s",
                    self.task_id,
                    verdict.action.type,
                    verdict.reason,
                )
                break
            if verdict.action.type in ("warn", "retry_with_hint", "pivot") and verdict.action.message:
                self._note = verdict.action.message
        return message

    def _deliver(self, agent: Any, messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        if self._note is None or _is_manager(agent) or not getattr(agent, "llm_config", None):
            return messages
        note, self._note = self._note, None
        self.delivered.append((agent.name, note))
        return [*messages, {"role": "user", "name": NOTE_NAME, "content": note}]

    # -- messages into events ----------------------------------------------------------------

    def _events(self, sender: Any, message: Any, recipient: Any) -> List[Dict[str, Any]]:
        msg: Dict[str, Any] = {"content": message} if isinstance(message, str) else dict(message)
        text = _text(msg.get("content"))
        events: List[Dict[str, Any]] = []
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            self._tool_calls[str(call.get("id"))] = (
                str(fn.get("name") or "tool"),
                _json_or_text(fn.get("arguments")),
            )
        responses = msg.get("tool_responses") or []
        for r in responses:
            name, args = self._tool_calls.pop(str(r.get("tool_call_id")), ("tool", None))
            events.append(ToolCall(name, args, ToolResult(_text(r.get("content")))).to_dict())
        if responses:
            return events
        result = _CODE_RESULT.match(text)
        if result:
            exit_code = int(result.group(1))
            language, code = self._code or ("", "")
            args: Dict[str, Any] = {"language": language, "code": code}
            output = ToolResult(result.group(2), is_error=exit_code != 0, exit_code=exit_code)
            return [ToolCall("code_execution", args, output).to_dict()]
        blocks = _CODE_BLOCK.findall(text)
        if blocks:
            self._code = (blocks[0][0], "\n".join(code.rstrip("\n") for _, code in blocks))
        if text.strip():
            events.append(
                Collaboration(
                    sender.name, recipient.name, text, to_group=_is_manager(recipient)
                ).to_dict()
            )
        return events

    def _evaluate(self, event: Dict[str, Any], agent: str) -> Optional[Verdict]:
        try:
            return self.client.evaluate(event, task_id=self.task_id, agent_id=agent)
        except LoopguardError as e:
            if not self.fail_open:
                raise
            self.errors.append(e)
            log.warning("loopguard did not answer; the chat goes on unwatched: %s", e)
            return None


class _Deliver:
    """The note waiting for the next speaker, added to what ``agent`` reads before it replies."""

    def __init__(self, guard: ChatGuard, agent: Any) -> None:
        self.guard, self.agent = guard, agent

    def __call__(self, messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return self.guard._deliver(self.agent, messages)


class _StopReply:
    """A reply function that answers nothing once the chat is stopped (AG2 then ends the chat)."""

    def __init__(self, guard: ChatGuard) -> None:
        self.guard = guard
        self.__name__ = "loopguard_stop"

    def __call__(
        self, recipient: Any, messages: Any = None, sender: Any = None, config: Any = None
    ) -> Tuple[bool, None]:
        return (self.guard.stopped is not None, None)


def watch(client: Client, *agents: Any, task_id: Optional[str] = None, **kwargs: Any) -> ChatGuard:
    """A :class:`ChatGuard` for one chat (task ``task_id``, a new one by default), watching
    ``agents``."""
    guard = ChatGuard(client, **({"task_id": task_id} if task_id else {}), **kwargs)
    return guard.watch(*agents)


def _agent_class() -> Any:
    from autogen import Agent  # AG2's, imported when an agent is watched

    return Agent


def _is_manager(agent: Any) -> bool:
    try:
        from autogen import GroupChatManager
    except ImportError:  # pragma: no cover - an agent was given, so AG2 is there
        return False
    return isinstance(agent, GroupChatManager)


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a multimodal list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") if isinstance(p, dict) else str(p) for p in content
        ).strip()
    return str(content)


def _json_or_text(s: Any) -> Any:
    if isinstance(s, str):
        try:
            return json.loads(s)
        except ValueError:
            return s
    return s
