"""mini-swe-agent stuck on a failing test, caught by loopguard: offline, no API key.

mini-swe-agent's own agent loop (``DefaultAgent``, through ``LoopguardAgent``), its
``LocalEnvironment`` running real commands in a temporary workspace, and a scripted model in place
of the LLM (``wordcount_task.ScriptedPolicy``: stuck re-running the failing test in new words until
a strategy-pivot directive reaches it). Every command and its real output go to loopguard.

    python examples/mini_swe_agent/stuck_demo.py              # against $LOOPGUARD_URL
    python examples/mini_swe_agent/stuck_demo.py --stubborn   # ignores the directive: paused
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # mini-swe-agent prints a banner otherwise

import loopguard  # noqa: E402
import yaml  # noqa: E402  (a dependency of mini-swe-agent)
from minisweagent import package_dir  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.test_models import DeterministicModel  # noqa: E402
from minisweagent.models.utils.actions_text import parse_regex_actions  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from loopguard_agent import PREFIX, LoopguardAgent  # noqa: E402
from wordcount_task import TASK, ScriptedPolicy, make_workspace  # noqa: E402

# mini-swe-agent's text-based action format (its LitellmTextbasedModel parses the same).
ACTION_REGEX = r"```mswea_bash_command\s*\n(.*?)\n```"


class ScriptedModel(DeterministicModel):
    """The scripted policy as a mini-swe-agent model. It answers in mini-swe-agent's text format,
    parsed by mini-swe-agent's own action parser, from the messages since its previous answer;
    ``inputs`` keeps, per call, the messages it was shown."""

    def __init__(self, *, stubborn: bool = False, **kwargs: Any) -> None:
        super().__init__(outputs=[], **kwargs)
        self.policy = ScriptedPolicy(stubborn)
        self.inputs: List[List[Dict[str, Any]]] = []

    @property
    def pivoted_at(self) -> Optional[int]:
        return self.policy.pivoted_at

    def query(self, messages: List[Dict[str, Any]], **kwargs: Any) -> Dict[str, Any]:
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        new = messages[last + 1 :]
        self.inputs.append(new)
        thought, command = self.policy.next(new)
        content = f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```"
        actions = parse_regex_actions(
            content, action_regex=ACTION_REGEX, format_error_template="{{error}}"
        )
        return {"role": "assistant", "content": content, "extra": {"actions": actions, "cost": 0.0}}


def build_agent(
    guard: loopguard.Client,
    workspace: Path,
    *,
    task_id: str,
    stubborn: bool = False,
    step_limit: int = 15,
) -> LoopguardAgent:
    """mini-swe-agent's text-based configuration, the scripted model, real commands in
    ``workspace``, and loopguard on every step."""
    config = yaml.safe_load((Path(package_dir) / "config" / "mini_textbased.yaml").read_text())
    agent_config = {**config["agent"], "step_limit": step_limit, "cost_limit": 0}
    model = ScriptedModel(
        stubborn=stubborn, observation_template=config["model"]["observation_template"]
    )
    env = LocalEnvironment(cwd=str(workspace), env=config.get("environment", {}).get("env", {}))
    return LoopguardAgent(model, env, guard=guard, task_id=task_id, **agent_config)


def transcript(agent: LoopguardAgent) -> str:
    """One line per command, output, loopguard message and exit."""
    lines = []
    for m in agent.messages[2:]:
        content = str(m.get("content", ""))
        if m.get("role") == "assistant":
            command = re.search(ACTION_REGEX, content, re.DOTALL)
            lines.append(f"agent     $ {command.group(1) if command else content}")
        elif content.startswith(PREFIX):
            text = content[len(PREFIX) :].strip().replace("\n", "\n          ")
            lines.append(f"loopguard {text}")
        elif m.get("role") == "exit":
            lines.append(f"exit      {m.get('extra', {}).get('exit_status')}: {content.strip()}")
        else:
            out = re.search(r"<output>\n?(.*?)</output>", content, re.DOTALL)
            text = (out.group(1) if out else content).strip().splitlines()
            lines.append(f"output    {text[-1] if text else ''}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--url", default=None, help="loopguard's URL (default: $LOOPGUARD_URL)")
    p.add_argument("--token", default=None, help="bearer token (default: $LOOPGUARD_TOKEN)")
    p.add_argument("--stubborn", action="store_true", help="the model ignores the pivot too")
    args = p.parse_args()
    with loopguard.Client(args.url, token=args.token) as guard:
        guard.wait_ready(timeout=30)
        agent = build_agent(
            guard, make_workspace(), task_id=f"demo-{uuid.uuid4().hex[:8]}", stubborn=args.stubborn
        )
        result = agent.run(TASK)
    print(transcript(agent))
    print(f"\nexit status: {result.get('exit_status')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
