"""The LangGraph example end to end against a real loopguard: offline, real commands."""

from __future__ import annotations

import uuid
from pathlib import Path

from loopguard.testing import LocalServer
from loopguard_graph import build_graph
from wordcount_task import DIRECTIVE, FIX, SUBMIT, TASK, make_workspace


def run(server: LocalServer, workspace: Path, stubborn: bool):  # type: ignore[no-untyped-def]
    task_id = f"langgraph-{uuid.uuid4().hex[:8]}"
    with server.client() as guard:
        app, policy = build_graph(guard, make_workspace(workspace), task_id, stubborn=stubborn)
        final = app.invoke(
            {"messages": [{"role": "user", "content": TASK}]}, {"recursion_limit": 60}
        )
        return final, policy, guard.get_task(task_id)


def test_the_loopguard_node_feeds_the_pivot_back_and_the_agent_recovers(
    loopguard_server: LocalServer, tmp_path: Path
) -> None:
    final, policy, view = run(loopguard_server, tmp_path, stubborn=False)
    actions = [v["action"]["type"] for v in final["verdicts"]]
    assert actions[:4] == ["continue", "continue", "warn", "pivot"]
    directive = final["verdicts"][3]["action"]["message"]
    assert DIRECTIVE in directive
    # The directive is a message in the graph's state, read by the agent node on its next turn.
    assert {"role": "user", "content": f"[loopguard] {directive}"} in final["messages"]
    assert policy.pivoted_at == 5
    commands = [m["command"] for m in final["messages"] if m["role"] == "assistant"]
    assert commands[4:] == ["cat textstats.py", FIX, SUBMIT]
    assert final["done"] == "submitted"
    assert (view.status, view.loop_count) == ("active", 0)


def test_a_pause_ends_the_graph(loopguard_server: LocalServer, tmp_path: Path) -> None:
    final, policy, view = run(loopguard_server, tmp_path, stubborn=True)
    assert [v["action"]["type"] for v in final["verdicts"]] == [
        "continue",
        "continue",
        "warn",
        "pivot",
        "pause",
    ]
    assert final["done"] == "loopguard_pause"
    assert policy.turns == 5 and policy.pivoted_at is None
    assert (view.status, view.loop_count) == ("paused", 3)
