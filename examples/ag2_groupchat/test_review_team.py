"""AG2 chats watched by loopguard, end to end: real AG2 group and two-agent chats (scripted models,
code really run) against a real loopguard with the real model."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Dict, List

from autogen import ConversableAgent, UserProxyAgent, register_function
from loopguard.ag2 import NOTE_NAME, watch
from loopguard.testing import LocalServer
from review_team import COMMENT, ScriptedModel, run_team, scripted_agent


def notes(read: List[List[Dict[str, Any]]]) -> List[List[str]]:
    """The loopguard notes in what an agent read, turn by turn."""
    return [[m["content"] for m in turn if m.get("name") == NOTE_NAME] for turn in read]


def test_a_reviewer_repeating_one_comment_on_unchanged_code_is_stopped(
    loopguard_server: LocalServer, tmp_path: Path
) -> None:
    task_id = f"ag2-looping-{uuid.uuid4().hex[:8]}"
    with loopguard_server.client() as client:
        run = run_team(client, "looping", tmp_path, task_id)
        view = client.get_task(task_id)
    seen = run.guard.seen
    # Every message of the chat, as the group saw it: the lead's task, then coder, tester,
    # reviewer in turn; messages to the manager are to the group, the tester's runs tool calls.
    assert [s.sender for s in seen] == ["lead"] + ["coder", "tester", "reviewer"] * 5
    for s in seen:
        if s.sender == "tester":
            assert s.event["type"] == "tool_call" and s.event["tool"] == "code_execution"
            assert "def slugify(title):" in s.event["args"]["code"]
            # The code really ran: its own output, the slugs it got wrong.
            assert s.event["result"] == {
                "output": "hello,-world!\n--loops--are---bad-\n",
                "is_error": False,
                "exit_code": 0,
            }
        else:
            assert s.event == {
                "type": "collaboration",
                "from_agent": s.sender,
                "to_agent": "chat_manager",
                "request": s.event["request"],
                "to_group": True,
            }
    # The third time the comment came back with the code unchanged is a loop: a warning, then
    # the pivot directive, then the gate.
    acted = [(i, s.verdict.action.type) for i, s in enumerate(seen) if s.verdict.loop]
    assert acted == [(9, "warn"), (12, "pivot"), (15, "pause")], [
        (s.sender, s.verdict.reason) for s in seen
    ]
    assert {seen[i].verdict.rule for i, _ in acted} == {"collaboration.unchanged_artifact"}
    # The warning and the directive are messages the next speaker, the coder, read before its
    # next turn (and ignored: it is stubborn).
    warning, directive = seen[9].verdict.action.message, seen[12].verdict.action.message
    assert "STRATEGY PIVOT" in directive
    assert notes(run.read["coder"]) == [[], [], [], [warning], [directive]]
    assert run.guard.delivered == [("coder", warning), ("coder", directive)]
    # The gate stopped the chat: the coder was asked for a sixth turn and answered nothing.
    assert run.guard.stopped is seen[15].verdict
    assert "asked chat_manager the same thing" in run.guard.stopped.reason
    assert len(run.read["coder"]) == 5 and run.messages[-1]["name"] == "reviewer"
    assert (view.status, view.loop_count) == ("paused", 3)


def test_a_team_that_converges_is_never_interrupted(
    loopguard_server: LocalServer, tmp_path: Path
) -> None:
    task_id = f"ag2-converging-{uuid.uuid4().hex[:8]}"
    with loopguard_server.client() as client:
        run = run_team(client, "converging", tmp_path, task_id)
        view = client.get_task(task_id)
    seen = run.guard.seen
    assert [s.sender for s in seen] == ["lead"] + ["coder", "tester", "reviewer"] * 4
    # Each run printed new slugs; the first comment came back once, after a change that fixed
    # part of it, and read as itself (cosine > 0.9): the review going on.
    outputs = [s.event["result"]["output"] for s in seen if s.sender == "tester"]
    assert len(set(outputs)) == 4 and outputs[-1] == "hello-world\nloops-are-bad\n"
    assert seen[3].event["request"] == COMMENT and seen[6].verdict.similarity > 0.9
    assert [s.verdict.action.type for s in seen] == ["continue"] * len(seen)
    assert not any(s.verdict.loop for s in seen)
    assert run.guard.delivered == [] and run.guard.stopped is None
    assert notes(run.read["coder"]) == [[]] * 4
    # The chat ended on the reviewer's own TERMINATE.
    assert "TERMINATE" in run.messages[-1]["content"]
    assert (view.status, view.loop_count) == ("active", 0)


def test_a_two_agent_chat_is_addressed_from_sender_to_recipient_and_stops_at_the_gate(
    loopguard_server: LocalServer,
) -> None:
    """Two agents, no manager: a searcher guessing the same missing path through a tool, the
    tool run by the other agent (AG2's function calling)."""
    task_id = f"ag2-pair-{uuid.uuid4().hex[:8]}"
    guess = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": "src/config.yaml"})},
            }
        ],
    }
    searcher = scripted_agent("searcher", "Find the configuration file and read it.", [guess])
    runner = UserProxyAgent("runner", human_input_mode="NEVER", code_execution_config=False)

    def read_file(path: str) -> str:
        return f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'"

    register_function(read_file, caller=searcher, executor=runner, description="Read a file")
    # Declaring a tool rebuilds the caller's model clients: the scripted one is registered again.
    searcher.register_model_client(ScriptedModel, lines=[guess], read=searcher.read)
    with loopguard_server.client() as client:
        guard = watch(client, searcher, runner, task_id=task_id)
        runner.initiate_chat(searcher, message="Read the service's configuration.", max_turns=10, silent=True)
        view = client.get_task(task_id)
    seen = guard.seen
    # The task is a message from one agent to the other (no group); each tool response is a
    # tool call with the arguments the model gave it, and its output.
    assert seen[0].event == {
        "type": "collaboration",
        "from_agent": "runner",
        "to_agent": "searcher",
        "request": "Read the service's configuration.",
    }
    calls = seen[1:]
    assert {(s.sender, s.recipient) for s in calls} == {("runner", "searcher")}
    assert calls[0].event == {
        "type": "tool_call",
        "tool": "read_file",
        "args": {"path": "src/config.yaml"},
        "result": {"output": read_file("src/config.yaml")},
    }
    actions = [s.verdict.action.type for s in calls]
    assert actions == ["continue", "continue", "warn", "pivot", "pause"], actions
    # The warning and the directive reached the searcher before its next turn; the pause ended
    # the chat: the searcher was asked for a sixth turn and answered nothing.
    warning, directive = (calls[i].verdict.action.message for i in (2, 3))
    assert notes(searcher.read) == [[], [], [], [warning], [directive]]
    assert guard.stopped is calls[4].verdict
    assert view.status == "paused"
