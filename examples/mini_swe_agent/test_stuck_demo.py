"""mini-swe-agent, stuck on a failing test, end to end against a real loopguard: offline, with
the real model, real commands in a temporary workspace."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import loopguard
from loopguard.testing import LocalServer
from loopguard_agent import PREFIX
from stuck_demo import build_agent, transcript
from wordcount_task import DIRECTIVE, FIX, STUCK, SUBMIT, TASK, make_workspace


def test_the_loop_is_caught_and_the_pivot_directive_turns_the_agent_around(
    loopguard_server: LocalServer, tmp_path: Path
) -> None:
    task_id = f"wordcount-{uuid.uuid4().hex[:8]}"
    with loopguard_server.client() as guard:
        agent = build_agent(guard, make_workspace(tmp_path), task_id=task_id)
        result = agent.run(TASK)
        print(transcript(agent))

        actions = [v.action.type for v in agent.verdicts]
        # Run, run again with the cache cleared, and on the third wording loopguard sees the
        # same failing step: a warning, then on the fourth the strategy-pivot directive.
        assert [v.loop for v in agent.verdicts[:4]] == [False, False, True, True]
        assert actions[:4] == ["continue", "continue", "warn", "pivot"]
        assert agent.verdicts[2].kind in ("same_error", "semantic_repeat", "exact_repeat")
        pivot = agent.verdicts[3]
        assert pivot.action.message and DIRECTIVE in pivot.action.message

        # The directive reached the model: it is in the conversation right after the 4th command's
        # output, and in what the model was shown on its next turn.
        injected = [m for m in agent.messages if str(m.get("content", "")).startswith(PREFIX)]
        assert [m["content"] for m in injected] == [
            f"{PREFIX} {agent.verdicts[2].action.message}",
            f"{PREFIX} {pivot.action.message}",
        ]
        model = agent.model
        assert model.pivoted_at == 5
        assert any(m["content"] == injected[1]["content"] for m in model.inputs[4])

        # ...and changed what the agent did: it read the code, fixed it, and submitted.
        commands = [
            a["command"] for m in agent.messages for a in m.get("extra", {}).get("actions", [])
        ]
        assert commands[:4] == [c for _, c in STUCK[:4]]
        assert commands[4:] == ["cat textstats.py", FIX, SUBMIT]
        assert result["exit_status"] == "Submitted"
        assert all(not v.loop for v in agent.verdicts[4:])
        check = subprocess.run(
            [sys.executable, "test_textstats.py"], cwd=tmp_path, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr

        # loopguard's own record: the loop, the pivot, and the reset on success.
        history = [r.event for r in guard.history(task_id).records]
        assert history == ["loop_detected", "loop_detected", "pivot_issued", "loop_counter_reset"]
        view = guard.get_task(task_id)
        assert (view.status, view.loop_count) == ("active", 0)


def test_a_stubborn_agent_is_paused_for_a_human(
    loopguard_server: LocalServer, tmp_path: Path
) -> None:
    task_id = f"wordcount-stubborn-{uuid.uuid4().hex[:8]}"
    with loopguard_server.client() as guard:
        agent = build_agent(guard, make_workspace(tmp_path), task_id=task_id, stubborn=True)
        result = agent.run(TASK)
        print(transcript(agent))

        assert [v.action.type for v in agent.verdicts] == [
            "continue",
            "continue",
            "warn",
            "pivot",
            "pause",
        ]
        # The directive was shown and ignored; the gate stopped the run at the next repeat,
        # before the model was asked for a sixth command.
        assert any(DIRECTIVE in str(m.get("content", "")) for m in agent.model.inputs[4])
        assert result["exit_status"] == "LoopguardPause"
        assert agent.n_calls == 5
        exit_message = agent.messages[-1]
        assert exit_message["role"] == "exit"
        assert exit_message["content"] == agent.verdicts[-1].action.message
        assert exit_message["extra"]["loopguard"]["status"] == "paused"
        view = guard.get_task(task_id)
        assert (view.status, view.loop_count, view.pivot_count) == ("paused", 3, 1)
        assert "gate_triggered" in [r.event for r in guard.history(task_id).records]


def test_without_loopguard_the_same_agent_runs_until_its_step_limit(tmp_path: Path) -> None:
    # The counterfactual, and fail-open: loopguard unreachable, the agent goes on unguarded and
    # repeats its failing step until mini-swe-agent's own step limit stops it.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with loopguard.Client(f"http://127.0.0.1:{port}", retry=loopguard.NO_RETRY) as guard:
        agent = build_agent(guard, make_workspace(tmp_path), task_id="unguarded", step_limit=8)
        result = agent.run(TASK)
    assert result["exit_status"] == "LimitsExceeded"
    assert agent.verdicts == [] and len(agent.guard_errors) == 8
    assert all(e.code == "connect_error" for e in agent.guard_errors)
    assert agent.model.pivoted_at is None
