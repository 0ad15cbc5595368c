"""A real Arize Phoenix server on 127.0.0.1 shows what agenteval exports: inputs, outputs,
span kinds, messages, tool calls, tokens, errors, sessions, and the scores as annotations;
and Phoenix's own span export imports back to the traces that were sent.

`nox -s interop` installs Phoenix in a virtualenv of its own and sets
``AGENTEVAL_PHOENIX_SERVER`` to its ``phoenix`` command; or point
``AGENTEVAL_TEST_PHOENIX_URL`` at a running server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from agenteval_otel import OTelExporter, OTelSink, import_otlp
from browser import CHROMIUM, chromium
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from agenteval_core import CaptureWriter, MetricResult, OnlineEvaluator, RunStatus, Trace, replay

SERVER = os.environ.get("AGENTEVAL_PHOENIX_SERVER")
RUNNING = os.environ.get("AGENTEVAL_TEST_PHOENIX_URL")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
PROJECT = "agenteval-interop"

pytestmark = pytest.mark.skipif(
    not (SERVER or RUNNING),
    reason="needs Arize Phoenix: run `nox -s interop` (it installs and starts one)",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if RUNNING:
        yield RUNNING.rstrip("/")
        return
    assert SERVER is not None
    port, work = free_port(), tmp_path_factory.mktemp("phoenix")
    environment = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
    }
    log = (work / "server.log").open("w")
    server = subprocess.Popen([SERVER, "serve"], env=environment, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).is_success:
                break
        except httpx.HTTPError:
            pass
        assert server.poll() is None, (work / "server.log").read_text()[-2000:]
        assert time.monotonic() < deadline, "Phoenix did not start within 180 s"
        time.sleep(0.5)  # polling a starting server: there is nothing to wait on instead
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    if city == "Atlantis":
        raise ValueError("no such city")
    return {"Paris": "sunny, 21°C"}.get(city, "unknown")


def reply(content: str, calls: list[dict[str, Any]]) -> AIMessage:
    usage = {"input_tokens": 40, "output_tokens": 9, "total_tokens": 49}
    return AIMessage(content=content, tool_calls=calls, usage_metadata=usage)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def exported(phoenix: str, tmp_path_factory: pytest.TempPathFactory) -> list[Trace]:
    """Two runs of one session, scored online and exported to Phoenix as they are scored:
    one answers, one fails in its tool."""
    model = ScriptedChatModel(
        replies=[
            reply("Let me check.", [tool_call("get_weather", "w1", city="Paris")]),
            reply("It is sunny and 21°C in Paris.", []),
            reply("", [tool_call("get_weather", "w2", city="Atlantis")]),
        ]
    )
    agent = create_agent(model, tools=[get_weather])
    sdk = os.environ.pop("OTEL_SDK_DISABLED", None)  # conftest turns the SDK off
    try:
        sink = OTelSink(phoenix=phoenix, project=PROJECT)
    finally:
        if sdk is not None:
            os.environ["OTEL_SDK_DISABLED"] = sdk
    capture = tmp_path_factory.mktemp("capture") / "capture.jsonl"
    with OnlineEvaluator(capture=capture, sinks=[sink], log=False) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator, session_id="user-42")
        agent.invoke({"messages": [("user", "Weather in Paris?")]}, config={"callbacks": [handler]})
        with pytest.raises(ValueError):
            agent.invoke(
                {"messages": [("user", "Weather in Atlantis?")]}, config={"callbacks": [handler]}
            )
        traces = evaluator.captured()
    # closing the evaluator closed the sink: every span and annotation was delivered
    assert sink.problem is None and sink.errors == 0
    return traces


def api(phoenix: str, path: str, **params: Any) -> Any:
    response = httpx.get(f"{phoenix}/v1/projects/{PROJECT}{path}", params=params, timeout=30)
    response.raise_for_status()
    return response.json()["data"]


def test_phoenix_shows_inputs_outputs_kinds_messages_tools_tokens_and_errors(
    phoenix: str, exported: list[Trace]
) -> None:
    answered, failed = exported
    spans = api(phoenix, "/spans", limit=1000)
    roots = {
        span["attributes"]["agenteval.trace.id"]: span
        for span in spans
        if span["parent_id"] is None
    }
    root = roots[answered.id]
    assert (root["span_kind"], root["name"]) == ("AGENT", "invoke_agent LangGraph")
    assert root["attributes"]["input.value"] == "Weather in Paris?"
    assert root["attributes"]["output.value"] == "It is sunny and 21°C in Paris."
    assert root["attributes"]["session.id"] == "user-42"
    in_trace = [s for s in spans if s["context"]["trace_id"] == root["context"]["trace_id"]]
    kinds = sorted(s["span_kind"] for s in in_trace)
    assert kinds == ["AGENT", "CHAIN", "CHAIN", "CHAIN", "LLM", "LLM", "TOOL"]
    first_call = next(
        s
        for s in in_trace
        if s["span_kind"] == "LLM" and s["attributes"]["output.value"] == "Let me check."
    )
    a = first_call["attributes"]
    assert first_call["name"] == "chat scripted-model"
    assert (a["llm.token_count.prompt"], a["llm.token_count.completion"]) == (40, 9)
    assert a["llm.input_messages.0.message.content"] == "Weather in Paris?"
    assert a["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == "get_weather"
    [weather] = [s for s in in_trace if s["span_kind"] == "TOOL"]
    assert weather["name"] == "execute_tool get_weather"
    assert weather["attributes"]["input.value"] == '{"city": "Paris"}'
    assert weather["attributes"]["output.value"] == "sunny, 21°C"

    broken = roots[failed.id]
    assert broken["status_code"] == "ERROR"
    assert broken["attributes"]["agenteval.trace.status"] == RunStatus.ERROR.value
    failed_tool = next(
        s
        for s in spans
        if s["context"]["trace_id"] == broken["context"]["trace_id"] and s["span_kind"] == "TOOL"
    )
    assert failed_tool["status_code"] == "ERROR"
    assert failed_tool["attributes"]["error.type"] == "ValueError"


def test_scores_are_phoenix_annotations_on_spans_and_sessions(
    phoenix: str, exported: list[Trace]
) -> None:
    answered, _ = exported
    roots = [s for s in api(phoenix, "/spans", limit=1000) if s["parent_id"] is None]
    root = next(s for s in roots if s["attributes"]["agenteval.trace.id"] == answered.id)
    annotations = api(phoenix, "/span_annotations", span_ids=root["context"]["span_id"])
    scores = {a["name"]: (a["result"]["label"], a["result"]["score"]) for a in annotations}
    assert scores["parameter_correctness"] == ("pass", 1.0)
    assert scores["tool_call_loops"] == ("pass", 1.0)
    assert scores["coherence"][0] in ("pass", "fail") and 0 < scores["coherence"][1] <= 1
    assert all(a["annotator_kind"] == "CODE" for a in annotations)
    assert "user-42" in [s["session_id"] for s in api(phoenix, "/sessions")]
    sessions = api(phoenix, "/session_annotations", session_ids="user-42")
    assert {a["name"] for a in sessions} >= {"agent_reliability"}


def test_phoenix_span_export_imports_back_to_the_traces_sent(
    phoenix: str, exported: list[Trace]
) -> None:
    spans = api(phoenix, "/spans/otlpv1", limit=1000)
    back = {trace.id: trace for trace in import_otlp({"data": spans})}
    for trace in exported:
        # Phoenix keeps span times to the microsecond: equal to that rounding
        returned = back[trace.id]
        for theirs, ours in zip(returned.spans, trace.spans, strict=True):
            assert abs((theirs.start_time or 0) - (ours.start_time or 0)) < 2e-6
            assert abs((theirs.end_time or 0) - (ours.end_time or 0)) < 2e-6
            theirs.start_time, theirs.end_time = ours.start_time, ours.end_time
        assert returned == trace


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (nox -s tests installs it)")
def test_a_scored_trace_in_phoenix_screenshot(
    phoenix: str, exported: list[Trace], tmp_path: Path
) -> None:
    """The answered run's page in Phoenix's UI, kept as test-artifacts/phoenix-scored-trace.png:
    the span tree, input, output and the scores as annotations."""
    projects = httpx.get(f"{phoenix}/v1/projects", timeout=30).json()["data"]
    project = next(p for p in projects if p["name"] == PROJECT)
    [root] = [
        s
        for s in api(phoenix, "/spans", limit=1000)
        if s["parent_id"] is None and s["attributes"]["agenteval.trace.id"] == exported[0].id
    ]
    page = f"{phoenix}/projects/{project['id']}/traces/{root['context']['trace_id']}"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "phoenix-scored-trace.png"
    shot.unlink(missing_ok=True)
    dom = chromium(tmp_path, "--virtual-time-budget=15000", "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for shown in ("invoke_agent LangGraph", "execute_tool get_weather", "Weather in Paris?"):
        assert shown in dom.stdout
    result = chromium(
        tmp_path,
        "--window-size=1600,1000",
        "--virtual-time-budget=15000",
        f"--screenshot={shot}",
        page,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


def test_exporting_again_updates_instead_of_duplicating(
    phoenix: str, exported: list[Trace], tmp_path: Path
) -> None:
    """The session was exported live; replaying its capture into Phoenix again (and once
    more with a changed score) leaves one trace per run, each span once, and the score
    as last sent."""

    def roots() -> list[dict[str, Any]]:
        return [s for s in api(phoenix, "/spans", limit=1000) if s["parent_id"] is None]

    before_roots, before_spans = len(roots()), len(api(phoenix, "/spans", limit=1000))
    capture = tmp_path / "again.jsonl"
    with CaptureWriter(capture) as writer:
        for trace in exported:
            writer.write(trace)
    sdk = os.environ.pop("OTEL_SDK_DISABLED", None)
    try:
        sink = OTelSink(phoenix=phoenix, project=PROJECT)
        exporter = OTelExporter(phoenix=phoenix, project=PROJECT)
    finally:
        if sdk is not None:
            os.environ["OTEL_SDK_DISABLED"] = sdk
    replay(capture, sinks=[sink])
    assert sink.problem is None
    changed = MetricResult(name="coherence", version="1", score=0.123, threshold=0.5, success=False)
    where = exporter.export(exported[0], [changed])
    exporter.shutdown()
    spans = api(phoenix, "/spans", limit=1000)
    assert (len(roots()), len(spans)) == (before_roots, before_spans)
    runs = [r for r in roots() if r["attributes"].get("session.id") == "user-42"]
    assert sorted(r["attributes"]["agenteval.trace.id"] for r in runs) == sorted(
        t.id for t in exported
    )
    assert where.span_ids[exported[0].spans[0].id] in {r["context"]["span_id"] for r in runs}
    annotations = api(
        phoenix, "/span_annotations", span_ids=where.span_ids[exported[0].spans[0].id]
    )
    coherence = [a for a in annotations if a["name"] == "coherence"]
    assert [(a["result"]["label"], a["result"]["score"]) for a in coherence] == [("fail", 0.123)]
