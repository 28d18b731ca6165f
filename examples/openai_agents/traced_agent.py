"""An OpenAI Agents SDK agent traced by OpenInference into loopguard: no loopguard code in the
agent, only the OTLP exporter's URL.

The agent fixes ``word_count`` (``examples/wordcount_task.py``) with one tool, ``bash``, that
really runs its command in a temporary workspace (a failing command is a failed tool call). Its
model is scripted (no network, no API key): a custom ``Model`` behind a ``ModelProvider``, which
records its turns in a generation span as the SDK's own Chat Completions model does. Two scripts:

- ``stuck``: re-runs the failing test in ever new wordings (clear ``__pycache__``, delete
  ``*.pyc``, ``python3 -B``, ...) and gives up;
- ``healthy``: runs the test, reads the code, fixes it, sees the test pass.

OpenInference's instrumentation of the SDK (``OpenAIAgentsInstrumentor``) turns the SDK's trace
into OpenTelemetry spans (``openinference.span.kind`` TOOL, LLM, AGENT) and OpenTelemetry's
OTLP/HTTP exporter posts them to loopguard's ``/v1/traces``. The run's trace is the loopguard
task, or its OpenInference session (``using_session``) when it has one; the loop shows in
``GET /v1/tasks/{task}``, on the dashboard and in ``/metrics`` (there is no answer path into the
agent).

    python examples/openai_agents/traced_agent.py [stuck|healthy]     # against $LOOPGUARD_URL
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from agents import (
    Agent,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    Usage,
    function_tool,
)
from agents.tracing import generation_span
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage
from openai.types.responses import ResponseOutputText
from openinference.instrumentation import using_session
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wordcount_task import FIX, STUCK, TASK, make_workspace  # noqa: E402

#: What each script does: (the model's text, the command it runs), and its last words.
SCRIPTS: Dict[str, Tuple[List[Tuple[str, str]], str]] = {
    "stuck": (STUCK[:6], "I could not make the test pass: the bytecode cache keeps the old code."),
    "healthy": (
        [
            ("Let me run the test to see how it fails.", "python3 test_textstats.py"),
            ("The count is off by one with two spaces: read the implementation.", "cat textstats.py"),
            ('split(" ") yields empty strings between two spaces; split() does not.', FIX),
        ],
        "Fixed: word_count splits on runs of whitespace, and the test passes.",
    ),
}


def tool_error(context: Any, error: Exception) -> str:
    """What the model reads of a failed command: its exit code and output (the SDK's default is
    a fixed sentence). The SDK marks the tool's span failed either way."""
    return str(error)


def bash_tool(workspace: Path) -> Any:
    @function_tool(failure_error_function=tool_error)
    def bash(command: str) -> str:
        """Run a shell command in the repository and return what it printed."""
        run = subprocess.run(
            ["bash", "-c", command], cwd=workspace, capture_output=True, text=True, timeout=30
        )
        output = run.stdout + run.stderr
        if run.returncode != 0:
            raise RuntimeError(f"exit code {run.returncode}\n{output}")
        return output

    return bash


class ScriptedModel(Model):
    """Plays a script: each turn one ``bash`` call with a thought, then a final answer. Like the
    SDK's own models it records each turn in a generation span (its input and output messages)."""

    def __init__(self, script: List[Tuple[str, str]], final: str) -> None:
        self.script, self.final = script, final
        self.turns = 0

    async def get_response(
        self,
        system_instructions: Optional[str],
        input: Any,
        model_settings: ModelSettings,
        tools: List[Any],
        output_schema: Any,
        handoffs: List[Any],
        tracing: Any,
        *,
        previous_response_id: Optional[str] = None,
        conversation_id: Optional[str] = None,
        prompt: Any = None,
    ) -> ModelResponse:
        self.turns += 1
        with generation_span(model="scripted", input=_messages(input)) as span:
            output: List[Any]
            if self.turns <= len(self.script):
                thought, command = self.script[self.turns - 1]
                call_id = f"call_{self.turns}"
                arguments = json.dumps({"command": command})
                output = [
                    _text(thought, self.turns),
                    ResponseFunctionToolCall(
                        type="function_call", call_id=call_id, name="bash", arguments=arguments
                    ),
                ]
                span.span_data.output = [
                    {
                        "role": "assistant",
                        "content": thought,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": "bash", "arguments": arguments},
                            }
                        ],
                    }
                ]
            else:
                output = [_text(self.final, self.turns)]
                span.span_data.output = [{"role": "assistant", "content": self.final}]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


class ScriptedProvider(ModelProvider):
    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    def get_model(self, model_name: Optional[str]) -> Model:
        return self.model


def _text(text: str, turn: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{turn}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _messages(input: Any) -> List[Dict[str, Any]]:
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    return [dict(i) if isinstance(i, dict) else i.model_dump() for i in input]


def traced_to(endpoint: str, service: str = "wordcount-agent", batch: bool = False) -> TracerProvider:
    """What wires the agent to loopguard: OpenInference's instrumentation of the SDK, exporting
    over OTLP/HTTP to ``endpoint`` (``.../v1/traces``). Nothing else in the agent knows of it.
    Each span is posted as it ends, or with ``batch`` all at once when the provider is flushed."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=endpoint)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=4096, max_export_batch_size=4096, schedule_delay_millis=3_600_000)
        if batch
        else SimpleSpanProcessor(exporter)
    )
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    return provider


def run_agent(
    script: str, workspace: Path, session: Optional[str] = None, max_turns: int = 20
) -> Tuple[Any, ScriptedModel]:
    """Runs the agent on ``script`` to its end (within a session when given); past
    ``max_turns`` the SDK raises ``MaxTurnsExceeded``."""
    steps, final = SCRIPTS[script]
    model = ScriptedModel(steps, final)
    agent = Agent(
        name="wordcount-fixer",
        instructions="Fix the bug the user describes. Run commands with the bash tool.",
        tools=[bash_tool(workspace)],
    )
    config = RunConfig(model_provider=ScriptedProvider(model), workflow_name=f"wordcount-{script}")

    async def go() -> Any:
        return await Runner.run(agent, TASK, run_config=config, max_turns=max_turns)

    if session is None:
        return asyncio.run(go()), model
    with using_session(session):
        return asyncio.run(go()), model


def main(argv: List[str]) -> int:
    script = argv[1] if len(argv) > 1 else "stuck"
    url = os.environ.get("LOOPGUARD_URL", "http://127.0.0.1:8080").rstrip("/")
    provider = traced_to(f"{url}/v1/traces")
    session = f"wordcount-{script}-{os.getpid()}"
    result, _ = run_agent(script, make_workspace(), session)
    provider.shutdown()
    print(result.final_output)
    print(f"loopguard: {url}/v1/tasks/{session}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
