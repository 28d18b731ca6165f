"""The OpenAI Agents SDK traced by OpenInference into a real loopguard, end to end: the SDK's own
run loop, its tool really running commands, OpenInference's span processor and OpenTelemetry's
OTLP/HTTP exporter posting each span to /v1/traces as it ends."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, Set

import httpx
import pytest
from loopguard.testing import LocalServer
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from traced_agent import run_agent, traced_to
from wordcount_task import STUCK, make_workspace


def task_json(server: LocalServer, task_id: str) -> Dict[str, Any]:
    return httpx.get(f"{server.url}/v1/tasks/{task_id}").raise_for_status().json()


def task_ids(server: LocalServer) -> Set[str]:
    listed = httpx.get(f"{server.url}/v1/tasks", params={"limit": 500}).raise_for_status().json()
    return {t["task_id"] for t in listed["tasks"]}


@pytest.fixture(scope="module")
def traced(loopguard_server: LocalServer) -> Iterator[None]:
    """The instrumentation, once for the module (it instruments the SDK process-wide)."""
    provider = traced_to(f"{loopguard_server.url}/v1/traces")
    try:
        yield
    finally:
        OpenAIAgentsInstrumentor().uninstrument()
        provider.shutdown()


def test_a_stuck_agents_tool_calls_reach_loopguard_and_show_the_loop_in_its_session(
    traced: None, loopguard_server: LocalServer, tmp_path: Path
) -> None:
    session = f"wordcount-stuck-{uuid.uuid4().hex[:8]}"
    result, model = run_agent("stuck", make_workspace(tmp_path), session=session)
    assert model.turns == 7 and "could not make the test pass" in result.final_output
    with loopguard_server.client() as client:
        view = client.get_task(session)
    agents = {v["agent_id"] for v in task_json(loopguard_server, session)["last_verdicts"]}
    # Every model turn (its text) and every tool call, in order; the agent and the workflow
    # that ended well are no events.
    types = [v.event_type for v in view.last_verdicts]
    assert types == ["response", "tool_call"] * 6 + ["response"]
    calls = [v for v in view.last_verdicts if v.event_type == "tool_call"]
    assert [re.sub(r"^bash command: ", "", c.text) for c in calls[:2]] == [
        STUCK[0][1],
        STUCK[1][1].lower(),
    ]
    # The third wording of the failing test run is the loop: a warning, the pivot directive,
    # then the gate (the agent never hears of them: there is no answer path in a trace).
    acted = [(c.action, c.kind) for c in calls if c.loop]
    assert acted == [("warn", "same_error"), ("pivot", "same_error"), ("pause", "same_error")]
    assert calls.index(next(c for c in calls if c.loop)) == 2
    assert agents == {"wordcount-agent"}  # the resource's service.name
    assert (view.status, view.loop_count) == ("paused", 3)


def test_a_healthy_agent_is_left_alone_and_its_trace_is_its_task(
    traced: None, loopguard_server: LocalServer, tmp_path: Path
) -> None:
    workspace = make_workspace(tmp_path)
    before = task_ids(loopguard_server)
    result, model = run_agent("healthy", workspace)
    new = task_ids(loopguard_server) - before
    # No session: the run's trace id is its task.
    assert len(new) == 1 and re.fullmatch(r"[0-9a-f]{32}", next(iter(new))), new
    with loopguard_server.client() as client:
        view = client.get_task(new.pop())
    assert "test passes" in result.final_output and model.turns == 4
    assert "text.split()" in (workspace / "textstats.py").read_text()  # the fix really ran
    assert [v.event_type for v in view.last_verdicts] == ["response", "tool_call"] * 3 + [
        "response"
    ]
    assert not any(v.loop for v in view.last_verdicts)
    assert {v.action for v in view.last_verdicts} == {"continue"}
    assert (view.status, view.loop_count) == ("active", 0)
