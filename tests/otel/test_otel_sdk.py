"""The real OpenTelemetry Python SDK (pinned in tests/otel/requirements.txt) exports the GenAI
spans of a looping agent to a real ``loopguard serve`` over OTLP/HTTP (protobuf, as the SDK's
exporter sends it, plain and gzipped), and the loop shows up in ``/v1/tasks/{id}``.

The agent is the stuck one of examples/wordcount_task.py: it re-runs a failing test in ever new
wordings. Its commands really run, in a temporary workspace; each model turn is a ``chat`` span
and each command an ``execute_tool`` span, as the GenAI semantic conventions describe them.

Run from the repository root after ``cargo build`` (``.ci/integrations.sh`` does it)::

    python -m pytest tests/otel
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, List, Sequence

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind, Status, StatusCode

from loopguard.testing import LocalServer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
from wordcount_task import STUCK, make_workspace  # noqa: E402

TOKEN = "otel-test-token"


class Recording(SpanExporter):
    """The SDK's OTLP/HTTP exporter, with each export's result kept."""

    def __init__(self, inner: OTLPSpanExporter) -> None:
        self.inner = inner
        self.results: List[SpanExportResult] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    s = LocalServer.from_checkout(
        REPO,
        tmp_path_factory.mktemp("data"),
        ["--set", 'otlp.task_attribute="gen_ai.conversation.id"'],
        token=TOKEN,
    )
    try:
        with s.client() as c:
            c.wait_ready(timeout=120)
        yield s
    finally:
        s.stop()


def run_stuck_agent(
    server: LocalServer, compression: Compression, conversation: str | None = None, turns: int = 5
) -> tuple[str, List[SpanExportResult]]:
    """The stuck agent, traced by the SDK into loopguard; its trace id and the export results."""
    exporter = Recording(
        OTLPSpanExporter(
            endpoint=f"{server.url}/v1/traces",
            headers={"Authorization": f"Bearer {TOKEN}"},
            compression=compression,
        )
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "wordcount-agent"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=4))
    tracer = provider.get_tracer("wordcount-agent", "1.0")
    ws = make_workspace(Path(tempfile.mkdtemp(prefix="wordcount-")))
    common = {"gen_ai.conversation.id": conversation} if conversation else {}
    with tracer.start_as_current_span(
        "invoke_agent wordcount",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "wordcount", **common},
    ) as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        for i, (thought, command) in enumerate(STUCK[:turns]):
            call_id = f"call_{i}"
            with tracer.start_as_current_span(
                "chat gpt-4o",
                kind=SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.agent.name": "wordcount",
                    "gen_ai.output.messages": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [
                                    {"type": "text", "content": thought or "Running it again."},
                                    {
                                        "type": "tool_call",
                                        "id": call_id,
                                        "name": "bash",
                                        "arguments": {"command": command},
                                    },
                                ],
                                "finish_reason": "tool_call",
                            }
                        ]
                    ),
                    **common,
                },
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool bash",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "bash",
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.call.arguments": json.dumps({"command": command}),
                    "gen_ai.agent.name": "wordcount",
                    **common,
                },
            ) as span:
                done = subprocess.run(
                    command, shell=True, cwd=ws, capture_output=True, text=True, check=False
                )
                span.set_attribute("gen_ai.tool.call.result", done.stdout + done.stderr)
                if done.returncode != 0:
                    span.set_attribute("error.type", "exit_status")
                    span.set_status(Status(StatusCode.ERROR, f"exit status {done.returncode}"))
    provider.shutdown()  # flushes every span to loopguard
    return trace_id, exporter.results


def served(metrics: str, line_start: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(line_start)
    )


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_sdk_exports_a_looping_agent_and_the_loop_shows_in_its_task(
    server: LocalServer, compression: Compression
) -> None:
    trace_id, results = run_stuck_agent(server, compression)
    assert results and all(r == SpanExportResult.SUCCESS for r in results), results
    with server.client() as lg:
        task = lg.get_task(trace_id)
        assert task.loop_count >= 2, task.raw
        verdicts = task.last_verdicts
        tools = [v for v in verdicts if v.event_type == "tool_call"]
        assert len(tools) == 5, [(v.event_type, v.text) for v in verdicts]
        # The chat spans' text parts are the agent's responses; the tool-call parts are not.
        assert [v.event_type for v in verdicts].count("response") == 5
        assert "rm -rf __pycache__" in tools[1].text
        actions = [v.action for v in tools]
        assert "pivot" in actions, actions
        assert tools[0].action == "continue" and not tools[0].loop
        loop = next(v for v in tools if v.loop)
        assert loop.kind in ("semantic_repeat", "same_error", "exact_repeat", "result_repeat"), loop
        assert all(v.task_id == trace_id for v in verdicts)
        history = [r.event for r in lg.history(trace_id).records]
        assert "loop_detected" in history and "pivot_issued" in history
        metrics = lg.metrics()
        # Every export was OTLP/HTTP protobuf: the SDK's exporter sends nothing else.
        assert served(metrics, 'loopguard_http_requests_total{route="/v1/traces",status="200"}') >= 1
        assert served(metrics, 'loopguard_otlp_spans_total{outcome="ignored"}') >= 1, "the invoke_agent span"


def test_a_configured_attribute_joins_two_traces_into_one_task(server: LocalServer) -> None:
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    first, _ = run_stuck_agent(server, Compression.Deflate, conversation, turns=2)
    second, _ = run_stuck_agent(server, Compression.NoCompression, conversation, turns=2)
    assert first != second
    with server.client() as lg:
        task = lg.get_task(conversation)
        tools = [v for v in task.last_verdicts if v.event_type == "tool_call"]
        assert len(tools) == 4
        # The second run repeats the first one's commands: loops across the two traces.
        assert any(v.loop for v in tools[2:]), [(v.loop, v.kind) for v in tools]


def test_a_malformed_payload_is_a_clear_400_and_changes_nothing(server: LocalServer) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with server.client() as lg:
        before = httpx.get(f"{server.url}/v1/tasks", headers=headers).json()["total"]
        r = httpx.post(
            f"{server.url}/v1/traces",
            content=b"\x0a\xff\xff\xff\x0fnot protobuf",
            headers={**headers, "content-type": "application/x-protobuf"},
        )
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["code"] == "invalid_otlp" and "protobuf" in body["message"], body
        doc = {
            "resourceSpans": [
                {
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": uuid.uuid4().hex,
                                    "name": "execute_tool bash",
                                    "attributes": [
                                        {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                                        {"key": "gen_ai.tool.name", "value": {"stringValue": "bash"}},
                                    ],
                                },
                                {"traceId": "abc", "name": "execute_tool bash"},
                            ]
                        }
                    ]
                }
            ]
        }
        r = httpx.post(f"{server.url}/v1/traces", json=doc, headers=headers)
        assert r.status_code == 400, r.text
        assert r.json()["path"] == "resourceSpans[0].scopeSpans[0].spans[1].traceId"
        after = httpx.get(f"{server.url}/v1/tasks", headers=headers).json()["total"]
        assert after == before, "the valid span next to the bad one was not applied"
        assert lg.readyz().ready
