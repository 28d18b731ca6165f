"""loopguard as a LangGraph node: agent → tool → loopguard → (agent | END).

The ``loopguard`` node sends each tool call and its result to loopguard and routes on the verdict:
a warning or the pivot directive goes into the messages the agent reads next; ``escalate``,
``pause`` and ``terminate`` end the graph with the verdict in the state. The agent node is the
scripted policy of ``wordcount_task`` (offline, no API key); with a real model it would be your
LLM node, unchanged.

    python examples/langgraph_agent/loopguard_graph.py        # against $LOOPGUARD_URL
"""

from __future__ import annotations

import operator
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, Dict, List, Optional, TypedDict

import loopguard
from langgraph.graph import END, START, StateGraph

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wordcount_task import SUBMIT, TASK, ScriptedPolicy, make_workspace  # noqa: E402


class State(TypedDict, total=False):
    messages: Annotated[List[Dict[str, Any]], operator.add]
    verdicts: Annotated[List[Dict[str, Any]], operator.add]
    #: Why the graph ended: "submitted", or "loopguard_<action>".
    done: Optional[str]


def build_graph(guard: loopguard.Client, workspace: Path, task_id: str, stubborn: bool = False):  # type: ignore[no-untyped-def]
    policy = ScriptedPolicy(stubborn)

    def agent(state: State) -> State:
        messages = state["messages"]
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
        thought, command = policy.next(messages[last + 1 :])
        return {"messages": [{"role": "assistant", "content": thought, "command": command}]}

    def tool(state: State) -> State:
        command = state["messages"][-1]["command"]
        run = subprocess.run(
            ["bash", "-c", command], cwd=workspace, capture_output=True, text=True, timeout=30
        )
        output = run.stdout + run.stderr
        return {
            "messages": [
                {"role": "tool", "command": command, "content": output, "exit_code": run.returncode}
            ]
        }

    def guard_node(state: State) -> State:
        call = state["messages"][-1]
        if call["command"] == SUBMIT and call["exit_code"] == 0:
            guard.evaluate(loopguard.Outcome("success"), task_id=task_id)
            return {"done": "submitted"}
        v = guard.evaluate(
            loopguard.ToolCall(
                "bash",
                {"command": call["command"]},
                loopguard.ToolResult(
                    call["content"], is_error=call["exit_code"] != 0, exit_code=call["exit_code"]
                ),
            ),
            task_id=task_id,
            agent_id="langgraph-agent",
        )
        update: State = {"verdicts": [v.raw]}
        if v.stops_agent:
            update["done"] = f"loopguard_{v.action.type}"
        elif v.action.message:
            update["messages"] = [{"role": "user", "content": f"[loopguard] {v.action.message}"}]
        return update

    def route(state: State) -> str:
        return END if state.get("done") else "agent"

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tool", tool)
    graph.add_node("loopguard", guard_node)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tool")
    graph.add_edge("tool", "loopguard")
    graph.add_conditional_edges("loopguard", route, ["agent", END])
    return graph.compile(), policy


def main() -> int:
    with loopguard.Client() as guard:
        guard.wait_ready(timeout=30)
        app, _ = build_graph(guard, make_workspace(), f"langgraph-{uuid.uuid4().hex[:8]}")
        final = app.invoke(
            {"messages": [{"role": "user", "content": TASK}]}, {"recursion_limit": 60}
        )
    for m in final["messages"]:
        lines = m["content"].strip().splitlines() or [""]
        text = (
            f"$ {m['command']}" if m["role"] == "assistant" else lines[m["role"] == "tool" and -1]
        )
        print(f"{m['role']:>9}  {text}")
    print(f"\ndone: {final.get('done')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
