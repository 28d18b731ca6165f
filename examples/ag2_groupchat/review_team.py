"""An AG2 group chat watched by loopguard: a coder, a tester that runs the code and a reviewer,
round robin under a ``GroupChatManager``, asked by their lead to write ``slugify()``.

Two teams, both scripted (no network, no API key: a custom AG2 model client plays each agent's
LLM, a line of script per turn, and records what it read):

- ``converging``: the reviewer finds two problems in turn, the coder fixes each, the tester's run
  shows the change, the reviewer approves and the chat ends on its ``TERMINATE``.
- ``looping``: the coder answers each review by re-sending the same code ("updated as you
  asked"), the tester's run prints the same wrong slugs, and the reviewer repeats its comment in
  new words. loopguard warns, issues the pivot directive (the coder reads it, and ignores it), and
  pauses the task: the chat stops with the reason.

The tester really runs the code (AG2's ``LocalCommandLineCodeExecutor``, in a temporary
directory), and loopguard is wired with one line, ``loopguard.ag2.watch(client, *agents)``.

    python examples/ag2_groupchat/review_team.py [converging|looping]     # against $LOOPGUARD_URL
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Union

import loopguard
from autogen import ConversableAgent, GroupChat, GroupChatManager, UserProxyAgent
from autogen.coding import LocalCommandLineCodeExecutor
from loopguard.ag2 import ChatGuard, watch

TASK = (
    "Write slugify(title) in Python: lowercase, every run of characters that are not letters or "
    "digits becomes one dash, no dash at either end. Show it on two titles, then get it reviewed."
)


def code(body: str) -> str:
    """The coder's program: ``slugify`` and two titles it prints."""
    return (
        "```python\nimport re\n\n\ndef slugify(title):\n"
        f"{body}\n\n\n"
        'print(slugify("Hello, World!"))\nprint(slugify("  Loops  are   bad "))\n```'
    )


FIRST = code('    return title.lower().replace(" ", "-")')
COMMA = code('    return re.sub(r"[ ,]+", "-", title.lower())')
RUNS = code('    return re.sub(r"[^a-z0-9]+", "-", title.lower())')
RIGHT = code('    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")')

COMMENT = (
    "slugify() keeps punctuation and turns each space into its own dash: 'Hello, World!'"
    " gives 'hello,-world!'. Replace every run of non-alphanumeric characters with one dash."
)

SCRIPTS: Dict[str, Dict[str, List[str]]] = {
    # The same comment comes back once, after a real change that fixed only part of it: the
    # review going on, not a loop.
    "converging": {
        "coder": [
            f"Here is a first version.\n\n{FIRST}",
            f"Commas and runs of spaces are now one dash.\n\n{COMMA}",
            f"Every run of non-alphanumerics is one dash now.\n\n{RUNS}",
            f"Dashes at both ends are stripped now.\n\n{RIGHT}",
        ],
        "reviewer": [
            COMMENT,
            "slugify() still keeps punctuation: 'Hello, World!' gives 'hello-world!'. Replace"
            " every run of non-alphanumeric characters with one dash, not only commas and spaces.",
            "Better. Titles with spaces at the ends still give '-loops-are-bad-': strip the"
            " dashes at both ends.",
            "Both titles give the expected slugs now. LGTM. TERMINATE",
        ],
    },
    "looping": {
        "coder": [
            f"Here is a first version.\n\n{FIRST}",
            f"I have updated slugify() as you asked.\n\n{FIRST}",
            f"Updated again, please have another look.\n\n{FIRST}",
            f"Here is the revised version.\n\n{FIRST}",
            f"This version addresses your comment.\n\n{FIRST}",
            f"Here it is once more.\n\n{FIRST}",
        ],
        # One comment, reworded each time (cosines 0.77 to 0.99 between them).
        "reviewer": [
            COMMENT,
            "slugify() still keeps punctuation and makes each space its own dash: 'Hello, World!'"
            " gives 'hello,-world!'. Replace each run of non-alphanumeric characters with a single"
            " dash.",
            "Still the same: slugify() keeps the punctuation and each space becomes a dash, so"
            " 'Hello, World!' gives 'hello,-world!'. Every run of non-alphanumeric characters must"
            " become one dash.",
            "slugify() keeps punctuation and turns every space into a separate dash ('Hello,"
            " World!' gives 'hello,-world!'). Please replace each run of non-alphanumerics with"
            " one dash.",
            "As I said: punctuation is kept and each space turns into its own dash: 'Hello,"
            " World!' gives 'hello,-world!'. One dash per run of non-alphanumeric characters.",
            "slugify() keeps punctuation, and each space is its own dash: 'Hello, World!' gives"
            " 'hello,-world!'. Replace every run of non-alphanumeric characters with one dash.",
        ],
    },
}


#: A turn of a script: a message's text, or a whole assistant message (one that calls tools).
Line = Union[str, Dict[str, Any]]


class ScriptedModel:
    """An AG2 model client (``model_client_cls``) that plays one agent's lines in order (the last
    one again once they run out) and keeps every list of messages it was given: what the agent
    read before each turn."""

    def __init__(self, config: Dict[str, Any], lines: List[Line], read: List[List[Dict[str, Any]]]):
        self.model = config.get("model", "scripted")
        self.lines = list(lines)
        self.read = read

    def create(self, params: Dict[str, Any]) -> Any:
        self.read.append([dict(m) for m in params.get("messages", [])])
        turn = len(self.read) - 1
        line = self.lines[min(turn, len(self.lines) - 1)]
        message = {"role": "assistant", "content": line} if isinstance(line, str) else dict(line)
        return SimpleNamespace(
            # With an id, AG2 reads the response through `message_retrieval` below.
            id=f"{self.model}-{turn}-{id(self)}",
            choices=[SimpleNamespace(message=message, finish_reason="stop")],
            model=self.model,
            usage=SimpleNamespace(prompt_tokens=0, completion_tokens=0, total_tokens=0),
            cost=0.0,
        )

    def message_retrieval(self, response: Any) -> List[Any]:
        # A message with tool calls goes back whole; a text as text (what AG2 expects of both).
        return [
            c.message if c.message.get("tool_calls") else c.message["content"]
            for c in response.choices
        ]

    def cost(self, response: Any) -> float:
        return 0.0

    @staticmethod
    def get_usage(response: Any) -> Dict[str, Any]:
        return {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "cost": 0.0,
            "model": response.model,
        }


def scripted_agent(name: str, system_message: str, lines: List[Line]) -> ConversableAgent:
    agent = ConversableAgent(
        name,
        system_message=system_message,
        llm_config={
            "config_list": [{"model": f"scripted-{name}", "model_client_cls": "ScriptedModel"}],
            "cache_seed": None,
        },
        human_input_mode="NEVER",
    )
    read: List[List[Dict[str, Any]]] = []
    agent.register_model_client(ScriptedModel, lines=lines, read=read)
    agent.read = read  # type: ignore[attr-defined]
    return agent


@dataclass
class Run:
    guard: ChatGuard
    #: The group chat's messages, in order (``name``, ``content``).
    messages: List[Dict[str, Any]] = field(default_factory=list)
    #: What each scripted agent read before each of its turns.
    read: Dict[str, List[List[Dict[str, Any]]]] = field(default_factory=dict)
    summary: Optional[str] = None


def run_team(client: loopguard.Client, team: str, work_dir: Path, task_id: Optional[str] = None) -> Run:
    """Runs ``team``'s group chat to its end, watched by loopguard (task ``task_id``)."""
    script = SCRIPTS[team]
    coder = scripted_agent(
        "coder", "You write Python code in a markdown block.", script["coder"]
    )
    reviewer = scripted_agent(
        "reviewer",
        "You review the coder's code and the tester's run. Say TERMINATE when it is right.",
        script["reviewer"],
    )
    # The tester has no model: it runs the code blocks of the message before its turn.
    tester = UserProxyAgent(
        "tester",
        human_input_mode="NEVER",
        code_execution_config={"executor": LocalCommandLineCodeExecutor(timeout=30, work_dir=work_dir)},
        default_auto_reply="No code to run.",
    )
    lead = UserProxyAgent("lead", human_input_mode="NEVER", code_execution_config=False)
    chat = GroupChat(
        agents=[coder, tester, reviewer],
        messages=[],
        max_round=24,
        speaker_selection_method="round_robin",
    )
    manager = GroupChatManager(
        chat,
        llm_config=False,
        silent=True,
        is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or ""),
    )
    guard = watch(client, lead, coder, tester, reviewer, task_id=task_id)
    result = lead.initiate_chat(manager, message=TASK, silent=True)
    return Run(
        guard=guard,
        messages=list(chat.messages),
        read={"coder": coder.read, "reviewer": reviewer.read},  # type: ignore[attr-defined]
        summary=result.summary,
    )


def main(argv: List[str]) -> int:
    team = argv[1] if len(argv) > 1 else "looping"
    with loopguard.Client() as client, tempfile.TemporaryDirectory() as tmp:
        run = run_team(client, team, Path(tmp), f"ag2-{team}-{uuid.uuid4().hex[:8]}")
    for seen in run.guard.seen:
        v = seen.verdict
        what = seen.event.get("request") or seen.event.get("result", {}).get("output", "")
        print(f"{seen.sender:>9} → {seen.recipient:<12} {str(what)[:70]!r}")
        if v is not None and v.action.type != "continue":
            print(f"{'loopguard':>9}   {v.action.type}: {(v.action.message or v.reason)[:90]}")
    if run.guard.stopped is not None:
        print(f"stopped: {run.guard.stopped.action.type} — {run.guard.stopped.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
