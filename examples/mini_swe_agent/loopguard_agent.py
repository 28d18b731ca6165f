"""loopguard wired into mini-swe-agent's agent loop.

``LoopguardAgent`` is mini-swe-agent's ``DefaultAgent`` with one hook: after each step's commands
run, every command and its output go to loopguard as a ``tool_call`` event, and the verdict is fed
back into the agent:

- ``warn``, ``retry_with_hint``, ``pivot``: the verdict's message (for a pivot, the strategy-pivot
  directive) is added to the conversation as a user message, so the model reads it on its next turn;
- ``escalate``, ``pause``, ``terminate``: the run stops with exit status ``LoopguardEscalate``,
  ``LoopguardPause`` or ``LoopguardTerminate``, for a human (or a planner) to take over;
- a submitted task is reported as a ``success`` outcome, which resets the loop counter.

If loopguard cannot be reached the agent goes on unguarded (``fail_open=True``, logged) or stops
(``fail_open=False``).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import loopguard
from minisweagent.agents.default import DefaultAgent
from minisweagent.exceptions import InterruptAgentFlow

log = logging.getLogger("loopguard.mini_swe_agent")

#: Marks the messages loopguard adds to the conversation.
PREFIX = "[loopguard]"


class LoopguardStop(InterruptAgentFlow):
    """Ends the run: loopguard said escalate, pause or terminate."""


class LoopguardAgent(DefaultAgent):
    def __init__(
        self,
        model: Any,
        env: Any,
        *,
        guard: loopguard.Client,
        task_id: str,
        agent_id: str = "mini-swe-agent",
        fail_open: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, env, **kwargs)
        self.guard = guard
        self.task_id = task_id
        self.agent_id = agent_id
        self.fail_open = fail_open
        self.verdicts: List[loopguard.Verdict] = []
        self.guard_errors: List[loopguard.LoopguardError] = []

    def run(self, task: str = "", **kwargs: Any) -> Dict[str, Any]:
        result = super().run(task, **kwargs)
        if result.get("exit_status") == "Submitted":
            self._evaluate(loopguard.Outcome("success", note="submitted by the agent"))
        return result

    def execute_actions(self, message: Dict[str, Any]) -> List[Dict[str, Any]]:
        actions = message.get("extra", {}).get("actions", [])
        outputs = [self.env.execute(action) for action in actions]
        observations = self.add_messages(
            *self.model.format_observation_messages(message, outputs, self.get_template_vars())
        )
        for action, output in zip(actions, outputs):
            returncode = output.get("returncode")
            event = loopguard.ToolCall(
                "bash",
                {"command": action.get("command", "")},
                loopguard.ToolResult(
                    output.get("output", ""),
                    is_error=returncode != 0,
                    exit_code=returncode if isinstance(returncode, int) else None,
                ),
            )
            verdict = self._evaluate(event)
            if verdict is not None:
                self._act_on(verdict)
        return observations

    def _evaluate(self, event: Any) -> Optional[loopguard.Verdict]:
        try:
            verdict = self.guard.evaluate(
                event, task_id=self.task_id, agent_id=self.agent_id, step="worker"
            )
        except loopguard.LoopguardError as e:
            self.guard_errors.append(e)
            if not self.fail_open:
                raise LoopguardStop(_exit("LoopguardUnavailable", str(e), None)) from e
            log.warning("loopguard unavailable, the agent goes on unguarded: %s", e)
            return None
        self.verdicts.append(verdict)
        return verdict

    def _act_on(self, v: loopguard.Verdict) -> None:
        if v.stops_agent:
            status = "Loopguard" + v.action.type.capitalize()
            raise LoopguardStop(_exit(status, v.action.message or v.reason, v))
        if v.action.type in ("warn", "retry_with_hint", "pivot") and v.action.message:
            self.add_messages(
                self.model.format_message(
                    role="user",
                    content=f"{PREFIX} {v.action.message}",
                    extra={"loopguard": {"seq": v.seq, "kind": v.kind, "action": v.action.type}},
                )
            )


def _exit(status: str, content: str, v: Optional[loopguard.Verdict]) -> Dict[str, Any]:
    extra: Dict[str, Any] = {"exit_status": status, "submission": ""}
    if v is not None:
        extra["loopguard"] = v.raw
    return {"role": "exit", "content": content, "extra": extra}
