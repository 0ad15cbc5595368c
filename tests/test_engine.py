"""The one scoring engine, reached four ways: online, replay, EvalSuite and assert_eval."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from judge_server import JudgeServer, Reply

from agenteval_core import (
    CallbackSink,
    CaptureWriter,
    Engine,
    ErrorKind,
    EvalCase,
    EvalSuite,
    HTTPEmbedder,
    Metric,
    MetricKind,
    MetricResult,
    MetricSummary,
    OnlineEvaluator,
    ResultSummary,
    RunStatus,
    Score,
    Sink,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
    TraceResults,
    create_metric,
    replay,
    resolve_metrics,
)
from agenteval_core.engine import _engine as engine_module
from agenteval_core.judges import OpenAIJudge
from agenteval_core.pytest_plugin import assert_eval

METRICS = [
    "parameter_correctness",
    "coherence",
    "loop_detection",
    "confidence",
    "task_completion",
]


def judge(server: JudgeServer, **options: Any) -> OpenAIJudge:
    return OpenAIJudge(
        "judge-model", base_url=server.base_url, cache=None, backoff_base=0.01, **options
    )


def answer_every_stage(request: dict[str, Any]) -> Reply:
    """One reply that answers every stage of confidence and task_completion."""
    fields = {"task": "find A-1", "outcome": "looked it up", "score": 0.8, "verdict": 0.8}
    return Reply(json.dumps({**fields, "reason": "looks right"}))


def sample_trace() -> Trace:
    call = ToolCall(id="c1", name="lookup_order", arguments={"order_id": "A-1"}, result="shipped")
    return Trace(
        id="trace-1",
        input="Where is order A-1?",
        output="Order A-1 has shipped.",
        tools=[ToolSpec(name="lookup_order", parameters={"type": "object"})],
        spans=[
            Span(kind=SpanKind.AGENT, name="agent", start_time=1.0, end_time=4.0),
            Span(
                kind=SpanKind.TOOL,
                name="lookup_order",
                start_time=2.0,
                end_time=3.0,
                tool_call=call,
                input=call.arguments,
                output="shipped",
            ),
        ],
    )


def comparable(results: Sequence[MetricResult]) -> list[dict[str, Any]]:
    """Everything a result says, but how long it took and which entry asked."""
    return [r.model_dump(exclude={"latency_ms", "case_id"}) for r in results]


def test_the_same_trace_gets_the_same_results_through_every_entry(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    judge_server.responder = answer_every_stage
    trace = sample_trace()

    online: list[TraceResults] = []
    with OnlineEvaluator(
        capture=tmp_path / "online.jsonl",
        metrics=METRICS,
        session_metrics=[],
        judge=judge(judge_server),
        on_result=lambda _, outcome: online.append(outcome),
        log=False,
    ) as evaluator:
        evaluator.submit(trace)
        assert evaluator.flush(20)

    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        writer.write(trace)
    replayed: list[list[MetricResult]] = []
    replay(
        capture,
        METRICS,
        judge=judge(judge_server),
        on_trace=lambda _, results: replayed.append(results),
    )

    suite = EvalSuite("entries", judge=judge(judge_server)).add_cases(EvalCase.from_trace(trace))
    report = suite.add_evaluators(*METRICS).run(progress=False)

    asserted = assert_eval(trace, METRICS, judge=judge(judge_server))

    expected = comparable(asserted)
    assert [r["name"] for r in expected] == METRICS
    assert [(r["error"], r["skipped"]) for r in expected] == [(None, False)] * len(METRICS)
    judged = {r["name"]: r["score"] for r in expected if r["judge_model"] == "judge-model"}
    assert judged == {"confidence": 0.8, "task_completion": 0.8}
    assert comparable(online[0].results) == expected
    assert comparable(replayed[0]) == expected
    assert comparable(report.cases[0].runs[0].results) == expected


def test_a_judge_reaches_only_the_metrics_that_take_one(judge_server: JudgeServer) -> None:
    j = judge(judge_server)
    trace_metrics, _ = resolve_metrics(["coherence", "confidence", "agent_reliability"], judge=j)
    coherence, confidence = trace_metrics
    assert not hasattr(coherence, "judge") and confidence.judge is j  # type: ignore[attr-defined]
    judge_server.responder = answer_every_stage
    [coherent, confident] = assert_eval(sample_trace(), ["coherence", "confidence"], judge=j)
    assert coherent.error is None and confident.score == 0.8
    # EvalSuite has a judge too: a judge metric added by name is scored, not skipped
    report = (
        EvalSuite("judged", judge=j)
        .add_cases(EvalCase.from_trace(sample_trace()))
        .add_evaluators("confidence")
        .run(progress=False)
    )
    [result] = report.cases[0].runs[0].results
    assert (result.score, result.skipped, result.judge_model) == (0.8, False, "judge-model")


def test_an_http_embedder_works_online_and_in_replay(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    embedder = HTTPEmbedder("embed-model", base_url=judge_server.base_url, api_key="k")
    trace = sample_trace()
    online: list[TraceResults] = []
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        metrics=["coherence"],
        session_metrics=[],
        embedder=embedder,
        on_result=lambda _, outcome: online.append(outcome),
        log=False,
    ) as evaluator:
        evaluator.submit(trace)
        assert evaluator.flush(20)
    report = replay(tmp_path / "c.jsonl", ["coherence"], embedder=embedder)
    [live] = online[0].results
    replayed = report.summary.metrics["coherence"]
    # the server's vectors: (length, count of "a", 1) for each text
    question, answer = "Where is order A-1?", "Order A-1 has shipped."
    a = [len(question), question.count("a"), 1.0]
    b = [len(answer), answer.count("a"), 1.0]
    cosine = sum(x * y for x, y in zip(a, b, strict=True)) / (
        sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5
    )
    assert live.error is None and live.score == pytest.approx(cosine, abs=1e-5)
    assert live.metadata["embedder"] == "http:embed-model"
    assert replayed.errors == 0 and replayed.mean == pytest.approx(cosine, abs=1e-5)
    assert judge_server.embedding_requests  # the vectors came over HTTP


@pytest.mark.parametrize("sessions", [1, 12])
def test_replay_keeps_the_judges_concurrency_in_flight(
    tmp_path: Path, judge_server: JudgeServer, sessions: int
) -> None:
    # one long conversation keeps the judge as busy as many short ones
    judge_server.latency = 0.05
    judge_server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    capture = tmp_path / "c.jsonl"
    with CaptureWriter(capture) as writer:
        for index in range(48):
            writer.write(
                Trace(input=f"q{index}", output=f"a{index}", session_id=f"s{index % sessions}")
            )
    j = judge(judge_server, max_concurrency=6, requests_per_period=1000)
    report = replay(capture, ["confidence", "agent_reliability"], judge=j)
    assert report.summary.metrics["confidence"].scored == 48
    assert report.session_summary.metrics["agent_reliability"].scored == sessions
    assert judge_server.peak_in_flight == 6  # the judge's bound, reached and never passed


class Ordered(Metric):
    """Records the order traces finish in; with ``backwards`` set, each turn of a session
    waits for the next turn to finish (so the last finishes first, whatever the machine's
    load). It reads history, and its score is a session signal (coherence) that fails on
    turn 2."""

    name = "coherence"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    uses_history: ClassVar[bool] = True
    blocking = False
    seen: ClassVar[list[str]] = []
    in_flight: ClassVar[dict[str, int]] = {}
    peak: ClassVar[dict[str, int]] = {}
    backwards: ClassVar[bool] = False
    finished: ClassVar[dict[str, asyncio.Event]] = {}

    async def acompute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        assert case.trace is not None and case.trace.session_id is not None
        session, turn = case.trace.session_id, int(case.trace.id.split("-")[1])
        self.in_flight[session] = self.in_flight.get(session, 0) + 1
        self.peak[session] = max(self.peak.get(session, 0), self.in_flight[session])
        await asyncio.sleep(0)  # the other turns start meanwhile, when slots allow
        if self.backwards and turn < 5:
            # bounded: scoring that kept a session's turns apart would fail here, not hang
            next_turn = self.finished.setdefault(f"{session}-{turn + 1}", asyncio.Event())
            await asyncio.wait_for(next_turn.wait(), timeout=10)
        self.in_flight[session] -= 1
        self.seen.append(case.trace.id)
        self.finished.setdefault(case.trace.id, asyncio.Event()).set()
        return Score(0.0 if turn == 2 else 1.0, metadata={"history": [t.id for t in history]})


def ordered_traces() -> list[Trace]:
    return [
        Trace(
            id=f"{session}-{index}",
            input="q",
            output=f"a{index}",
            session_id=session,
            status=RunStatus.ERROR if (session, index) == ("y", 3) else RunStatus.OK,
        )
        for index in range(6)
        for session in ("x", "y")
    ]


def scored_with(concurrency: int) -> list[dict[str, Any]]:
    Ordered.seen.clear()
    Ordered.peak.clear()
    Ordered.finished.clear()
    Ordered.backwards = concurrency >= 6  # else turn 0 would wait on a turn with no slot
    engine = Engine([Ordered(), "agent_reliability"], concurrency=concurrency, history_window=6)
    outcomes = [o.model_dump() for o in engine.score_sync(ordered_traces())]
    for outcome in outcomes:  # timings are the only thing allowed to differ
        for result in outcome["results"] + outcome["session_results"]:
            result.pop("latency_ms", None)
    return outcomes


class Keep(Sink):
    """Keeps each trace's results; reads the running session results, or only their scores."""

    def __init__(self, *, snapshots: bool) -> None:
        self.wants_session_snapshots = snapshots
        self.wants_session_scores = not snapshots
        self.kept: list[TraceResults] = []

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        self.kept.append(results)


def test_a_sink_that_reads_only_session_scores_gets_the_snapshots_scores() -> None:
    traces = ordered_traces()
    whole, scores = Keep(snapshots=True), Keep(snapshots=False)
    Ordered.backwards = False
    for sink in (whole, scores):
        engine = Engine([Ordered(), "agent_reliability", "agent_consistency"], sinks=[sink])
        engine.score_sync(traces)
    # each session's running reliability: turn 2's coherence 0.0 takes it to 0 for good;
    # consistency has no confidence signal (no judge): no score after any trace
    reliability = [0.0 if int(t.id[-1]) >= 2 else 1.0 for t in traces]
    assert [r.session_scores for r in whole.kept] == [
        {"agent_reliability": value, "agent_consistency": None} for value in reliability
    ]
    assert [r.session_scores for r in scores.kept] == [r.session_scores for r in whole.kept]
    assert all(r.session_results for r in whole.kept)
    assert not any(r.session_results for r in scores.kept)  # not built: no sink reads them


def test_a_sessions_traces_are_measured_together_and_folded_in_order() -> None:
    one_at_a_time = scored_with(concurrency=1)
    assert Ordered.peak == {"x": 1, "y": 1}
    together = scored_with(concurrency=12)
    # a long conversation no longer waits trace by trace: all six turns were in flight, and
    # the later turns finished first
    assert Ordered.peak == {"x": 6, "y": 6}
    own = [trace_id for trace_id in Ordered.seen if trace_id.startswith("x")]
    assert own == [f"x-{index}" for index in reversed(range(6))]
    # yet the results are the sequential ones: input order, the history each trace was read
    # with, and the session metric's snapshot after each trace, folded in input order
    assert together == one_at_a_time
    assert [o["trace_id"] for o in together] == [t.id for t in ordered_traces()]
    assert [o["results"][0]["metadata"]["history"] for o in together[1::2]] == [
        [f"y-{earlier}" for earlier in range(index)] for index in range(6)
    ]
    # y's snapshots, one per turn, folded in input order: turn 2's signal (coherence 0.0)
    # and turn 3's failed run each carry risk 1, which the max-composed tail risk takes
    snapshots = [o["session_results"][0] for o in together[1::2]]
    assert [(r["score"], r["reason"], r["metadata"].get("flagged_traces")) for r in snapshots] == [
        (1.0, "tail risk 0.0000 over 1 traces; 0 flagged", []),
        (1.0, "tail risk 0.0000 over 2 traces; 0 flagged", []),
        (0.0, "tail risk 1.0000 over 3 traces; 1 flagged", ["y-2"]),
        (0.0, "tail risk 1.0000 over 4 traces; 2 flagged", ["y-2", "y-3"]),
        (0.0, "tail risk 1.0000 over 5 traces; 2 flagged", ["y-2", "y-3"]),
        (0.0, "tail risk 1.0000 over 6 traces; 2 flagged", ["y-2", "y-3"]),
    ]


class Peek(Metric):
    """Keeps the earlier traces each trace was scored with."""

    name = "peek"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    uses_history: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[Trace]] = {}

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        assert case.trace is not None
        self.seen[case.trace.id] = list(history)
        return Score(1.0)


class PeekAtOutputs(Peek):
    name = "peek_at_outputs"
    history_fields: ClassVar[frozenset[str] | None] = frozenset({"output"})


def three_full_traces() -> list[Trace]:
    return [
        Trace(
            id=f"t{i}",
            session_id="s",
            input=f"question {i}",
            output=f"answer {i}",
            status=RunStatus.OK,
            spans=[Span(id=f"t{i}-tool", kind=SpanKind.TOOL, name="lookup", output=i)],
            metadata={"turn": i},
        )
        for i in range(3)
    ]


def test_history_keeps_only_the_fields_its_readers_name() -> None:
    traces = three_full_traces()
    peek = PeekAtOutputs()
    Engine([peek]).score_sync(traces)
    # the third trace saw the first two as their id, session and output, the rest defaults
    assert [t.model_dump() for t in peek.seen["t2"]] == [
        Trace(id=t.id, session_id="s", output=t.output).model_dump() for t in traces[:2]
    ]
    assert Engine(["loop_detection"]).history_fields == frozenset({"input", "output"})


def test_history_keeps_whole_traces_when_a_reader_names_no_fields() -> None:
    traces = three_full_traces()
    slim, whole = PeekAtOutputs(), Peek()
    engine = Engine([slim, whole])
    assert engine.history_fields is None
    engine.score_sync(traces)
    for peek in (slim, whole):  # one history for every metric: the whole traces
        assert [t.model_dump() for t in peek.seen["t2"]] == [t.model_dump() for t in traces[:2]]


@pytest.mark.parametrize(
    ("arguments", "environment", "peak"),
    [
        (["--judge-concurrency", "5", "--judge-rps", "1000"], {}, 5),
        ([], {"AGENTEVAL_JUDGE_CONCURRENCY": "3", "AGENTEVAL_JUDGE_RPS": "1000"}, 3),
    ],
    ids=["options", "environment"],
)
def test_judge_concurrency_from_the_command_line(
    tmp_path: Path,
    judge_server: JudgeServer,
    arguments: list[str],
    environment: dict[str, str],
    peak: int,
) -> None:
    from click.testing import CliRunner

    from agenteval_core.cli import cli

    judge_server.latency = 0.05
    judge_server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    capture = tmp_path / "c.jsonl"
    with CaptureWriter(capture) as writer:
        for index in range(24):
            writer.write(Trace(input=f"q{index}", output=f"a{index}"))
    result = CliRunner().invoke(
        cli,
        [
            "replay",
            str(capture),
            "--metrics",
            "confidence",
            "--judge-model",
            "judge-model",
            "--judge-base-url",
            judge_server.base_url,
            "--no-cache",
            "-q",
            *arguments,
        ],
        env=environment,
    )
    assert result.exit_code == 0, result.output
    assert len(judge_server.requests) == 24 and judge_server.peak_in_flight == peak


def test_running_session_results_leave_out_the_per_trace_table() -> None:
    # after each trace: the session's score as it stands, without per_trace_signals; the
    # closed session's results carry the table
    traces = [
        Trace(id=f"t{i}", input="Where is my order?", output=answer, session_id="s")
        for i, answer in enumerate(["It shipped.", "It shipped.", "It shipped."])
    ]
    closed: list[list[MetricResult]] = []
    running: list[list[MetricResult]] = []
    engine = Engine(
        ["loop_detection", "agent_reliability"],
        sinks=[
            CallbackSink(
                lambda trace, results: running.append(results.session_results),
                on_session=lambda session_id, results: closed.append(results),
            )
        ],
    )
    engine.score_sync(traces)
    final = engine.close_session("s")
    assert [len(r) for r in running] == [1, 1, 1]
    assert all("per_trace_signals" not in r[0].metadata for r in running)
    # t1 and t2 repeat t0 word for word: loop risk 1 → reliability 0 from t1 on
    # (float32 vectors: an exact repeat has cosine 1 to within 1e-7)
    assert [r[0].score for r in running] == pytest.approx([1.0, 0.0, 0.0], abs=1e-6)
    assert running[-1][0].metadata["flagged_traces"] == ["t1", "t2"]
    assert closed == [final] and final[0].score == pytest.approx(0.0, abs=1e-6)
    assert final[0].metadata["per_trace_signals"] == {
        "t0": {"loop_risk": 0.0, "step_risk": 0.0},
        "t1": {"loop_risk": 1.0, "step_risk": 1.0},
        "t2": {"loop_risk": 1.0, "step_risk": 1.0},
    }


def outputs_in_two_sessions() -> list[Trace]:
    """Two interleaved sessions whose outputs repeat, so loop detection has work to do."""
    answers = {
        "x": ["Order A-1 shipped.", "Order A-1 shipped.", "", "Refund sent.", "Order A-1 shipped."],
        "y": ["Hello.", "Your card was charged.", "Your card was charged twice.", "Hello.", ""],
    }
    return [
        Trace(id=f"{session}{i}", input=f"question {i}", output=answer or None, session_id=session)
        for i in range(5)
        for session, answer in ((s, answers[s][i]) for s in ("x", "y"))
    ]


def test_a_batch_scores_each_trace_as_one_by_one() -> None:
    # the engine scores a batch with one call per metric; traces of one session inside the
    # batch still see exactly the traces before them
    traces = outputs_in_two_sessions()
    scored: dict[str, list[MetricResult]] = {}
    engine = Engine(
        ["coherence", "loop_detection"],
        sinks=[CallbackSink(lambda trace, results: scored.update({trace.id: results.results}))],
    )
    assert asyncio.run(engine.stream([traces[:7], traces[7:]])) == 10
    coherence, loop = resolve_metrics(["coherence", "loop_detection"])[0]
    for index, trace in enumerate(traces):
        earlier = [t for t in traces[:index] if t.session_id == trace.session_id]
        expected = [coherence.measure(trace), loop.measure(trace, history=earlier)]
        got = scored[trace.id]
        assert [r.model_dump(exclude={"latency_ms"}) for r in got] == [
            r.model_dump(exclude={"latency_ms"}) for r in expected
        ]
    # x4 repeats x0 and x1 (x2 has no output): its window is x0, x1, x3 at positions 0, 1, 3
    comparisons = scored["x4"][1].metadata["comparisons"]
    assert [(c["trace_index"], c["trace_id"]) for c in comparisons] == [
        (0, "x0"),
        (1, "x1"),
        (3, "x3"),
    ]
    assert scored["x4"][1].score == pytest.approx(0.0, abs=1e-6)


class BrokenBatch(Metric):
    name = "broken_batch"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(1.0)

    def measure_batch(
        self, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
    ) -> list[MetricResult]:
        if len(cases) > 2:
            raise ValueError("cannot take more than two")
        return super().measure_batch(cases, histories)[:1]


def test_a_metric_whose_batch_code_breaks_fails_alone() -> None:
    traces = [Trace(id=f"t{i}", input="q", output="a") for i in range(5)]
    scored: list[TraceResults] = []
    engine = Engine(
        [BrokenBatch(), "coherence"], sinks=[CallbackSink(lambda t, r: scored.append(r))]
    )
    asyncio.run(engine.stream([traces[:3], traces[3:]]))
    assert [r.trace_id for r in scored] == ["t0", "t1", "t2", "t3", "t4"]
    broken = [r.results[0] for r in scored]
    assert [(r.name, r.trace_id, r.score, r.error) for r in broken] == [
        ("broken_batch", "t0", None, "ValueError: cannot take more than two"),
        ("broken_batch", "t1", None, "ValueError: cannot take more than two"),
        ("broken_batch", "t2", None, "ValueError: cannot take more than two"),
        ("broken_batch", "t3", None, "RuntimeError: measure_batch returned 1 results for 2 cases"),
        ("broken_batch", "t4", None, "RuntimeError: measure_batch returned 1 results for 2 cases"),
    ]
    coherence = create_metric("coherence").measure(traces[0]).score
    assert [r.results[1].score for r in scored] == [coherence] * 5


class DictBatch(Metric):
    """A metric whose own batch code returns its results as plain mappings."""

    name = "dict_batch"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(0.25)

    def measure_batch(
        self, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
    ) -> list[MetricResult]:
        results = super().measure_batch(cases, histories)
        return [result.model_dump() for result in results]  # type: ignore[misc]


def test_a_batch_that_returns_anything_but_results_fails_alone() -> None:
    scored: list[TraceResults] = []
    engine = Engine([DictBatch(), "coherence"], sinks=[CallbackSink(lambda t, r: scored.append(r))])
    traces = [Trace(id=f"t{i}", input="q", output="a", session_id="s") for i in range(2)]
    asyncio.run(engine.stream([traces]))
    assert [
        [(r.name, r.trace_id, r.session_id, r.score, r.error) for r in t.results[:1]]
        for t in scored
    ] == [
        [
            (
                "dict_batch",
                f"t{i}",
                "s",
                None,
                "TypeError: measure_batch returned a dict, not a MetricResult",
            )
        ]
        for i in range(2)
    ]
    coherence = create_metric("coherence").measure(traces[0]).score
    assert [t.results[1].score for t in scored] == [coherence] * 2


def one_open_session(closed: list[tuple[str, list[str]]]) -> Engine:
    """An engine that keeps one session open at most and adds each session it closes to
    ``closed``, with the traces its reliability counted."""
    return Engine(
        ["coherence", "agent_reliability"],
        max_open_sessions=1,
        sinks=[
            CallbackSink(
                lambda trace, results: None,
                on_session=lambda session, results: closed.append(
                    (session, list(results[0].metadata["per_trace_signals"]))
                ),
            )
        ],
    )


def test_sessions_past_the_limit_close_after_their_batch() -> None:
    # one open session at most, a batch of x, y, x: closing x when y arrived would lose x's
    # second trace; the least recently active session (y) closes after the batch instead
    traces = [
        Trace(id=trace_id, input="q", output="a", session_id=trace_id[0])
        for trace_id in ("x0", "y0", "x1")
    ]
    closed: list[tuple[str, list[str]]] = []
    engine = one_open_session(closed)
    asyncio.run(engine.stream([traces]))
    assert closed == [("y", ["y0"])]
    engine.close_all()
    assert closed == [("y", ["y0"]), ("x", ["x0", "x1"])]


class _Slow(Metric):
    """Waits on the event loop (so traces are measured concurrently) for a time its trace
    names: the later traces of a batch finish first."""

    name = "slow"
    kind: ClassVar[MetricKind] = MetricKind.JUDGE

    async def acompute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        await asyncio.sleep(float(str(case.actual_output)))  # the order, not a time
        return Score(1.0, "done")


@pytest.mark.parametrize("concurrent", [False, True], ids=["in order", "concurrently"])
def test_a_session_s_closing_results_come_after_all_its_traces(concurrent: bool) -> None:
    # one session open at most: b0 makes a close. Its closing results used to reach the
    # sinks when it closed, before a1's results (folded, not yet delivered): a results
    # file then had a's closing line above a trace of a, and a report read that trace as
    # the start of a new part of a
    events: list[tuple[str, str]] = []
    sink = CallbackSink(
        lambda trace, results: events.append(("trace", trace.id)),
        on_session=lambda session, results: events.append(("session", session)),
    )
    metrics: list[str | Metric] = ["coherence", "agent_reliability"]
    if concurrent:  # a0 and a1 take longer than b0: b0 is measured first
        metrics.append(_Slow())
    engine = Engine(metrics, max_open_sessions=1, sinks=[sink], concurrency=4)
    outputs = {"a0": "0.05", "a1": "0.05", "b0": "0"}
    batch = [Trace(id=i, input="q", output=o, session_id=i[0]) for i, o in outputs.items()]
    asyncio.run(engine.stream([batch]))
    engine.close_all()
    traces = [("trace", "a0"), ("trace", "a1"), ("trace", "b0")]
    if concurrent:  # b0, folded first, found a in flight and closed b (after b0's results)
        assert events == [*traces, ("session", "b"), ("session", "a")]
    else:  # the batch folded whole, a closed: after a1's results, before b0's
        assert events == [*traces[:2], ("session", "a"), traces[2], ("session", "b")]


def test_a_session_closed_past_the_limit_and_met_again_is_counted_as_cut() -> None:
    # one open session at most; batches [a0, b0], [a1], [b1]: a closes after the first
    # batch (b was the more recent), a1 opens it again (cut 1) and b closes; b1 opens b
    # again (cut 2). A session closed on request and met again is no cut.
    def turn(trace_id: str) -> Trace:
        return Trace(id=trace_id, input="q", output="a", session_id=trace_id[0])

    closed: list[tuple[str, list[str]]] = []
    engine = one_open_session(closed)
    asyncio.run(engine.stream([[turn("a0"), turn("b0")], [turn("a1")], [turn("b1")]]))
    engine.close_all()
    assert closed == [("a", ["a0"]), ("b", ["b0"]), ("a", ["a1"]), ("b", ["b1"])]
    assert engine.sessions_cut == 2
    asyncio.run(engine.stream([[turn("c0")]]))
    engine.close_session("c")
    asyncio.run(engine.stream([[turn("c1")]]))
    assert engine.sessions_cut == 2
    assert closed[-1] == ("c", ["c0"])
    for wrong in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_open_sessions must be a whole number >= 1"):
            Engine(["coherence"], max_open_sessions=wrong)  # type: ignore[arg-type]


def test_an_engine_remembers_a_bounded_number_of_sessions_closed_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one id remembered, one session open, a batch each: b0 closes a, c0 closes b (a is
    # forgotten), a1 is then no cut and closes c, and c1 is one
    monkeypatch.setattr(engine_module, "CLOSED_EARLY_KEPT", 1)
    engine = one_open_session([])
    for trace_id in ("a0", "b0", "c0", "a1", "c1"):
        asyncio.run(
            engine.stream([[Trace(id=trace_id, input="q", output="a", session_id=trace_id[0])]])
        )
    assert engine.sessions_cut == 1


class FixedJudgeMetric(Metric):
    """A judge metric whose judge always answers 0.9."""

    name = "fixed_judge"
    kind: ClassVar[MetricKind] = MetricKind.JUDGE

    async def acompute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(0.9, "judged")


def test_traces_left_out_of_the_judge_sample_say_so() -> None:
    traces = [Trace(id=f"t{i}", input="q", output="a") for i in range(20)]
    engine = Engine([FixedJudgeMetric(), "tool_call_loops"], judge_sample_rate=0.3, seed=7)
    outcomes = engine.score_sync(traces)
    draws = random.Random(7)  # one draw per trace, in input order
    judged = [draws.random() < 0.3 for _ in traces]
    assert 0 < judged.count(True) < 20
    for outcome, in_sample in zip(outcomes, judged, strict=True):
        judge_result, loops = outcome.results
        if in_sample:
            assert (judge_result.score, judge_result.reason) == (0.9, "judged")
        else:
            assert (
                judge_result.name,
                judge_result.score,
                judge_result.status,
                judge_result.reason,
                judge_result.metadata,
            ) == (
                "fixed_judge",
                None,
                "skipped",
                "not in the judge sample (judge_sample_rate=0.3)",
                {"judge_sample_rate": 0.3},
            )
        assert loops.score == 1.0  # the other metrics score every trace
    assert engine.judge_not_sampled == judged.count(False)


ANSWERS = ["", "Order A-1 shipped.", "Order A-1 shipped today.", "Refund sent."]
NO_LATENCY: Any = {
    "results": {"__all__": {"latency_ms"}},
    "session_results": {"__all__": {"latency_ms"}},
}


def in_batches(traces: list[Trace], cuts: list[int]) -> list[list[Trace]]:
    """``traces`` in order, cut into batches of the sizes ``cuts`` gives, repeated."""
    batches: list[list[Trace]] = []
    rest = list(traces)
    for size in cuts * len(traces):
        if not rest:
            break
        batches.append(rest[:size])
        rest = rest[size:]
    return batches


@settings(max_examples=40)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from("xyz"), st.sampled_from(ANSWERS), st.booleans()),
        min_size=1,
        max_size=14,
    ),
    cuts=st.lists(st.integers(1, 6), min_size=1, max_size=14),
)
def test_any_batching_scores_like_one_trace_at_a_time(
    rows: list[tuple[str, str, bool]], cuts: list[int]
) -> None:
    # interleaved sessions, repeated and empty answers, failed runs: however the traces are
    # cut into batches, every result and every closed session's result is the same (with
    # fewer open sessions allowed than there are sessions, where a session closes depends on
    # the batches: test_sessions_past_the_limit_close_after_their_batch)
    traces = [
        Trace(
            id=f"t{index}",
            input="Where is order A-1?",
            output=answer or None,
            session_id=session,
            status=RunStatus.OK if ok else RunStatus.ERROR,
        )
        for index, (session, answer, ok) in enumerate(rows)
    ]
    batches = in_batches(traces, cuts)

    def scored(batches: list[list[Trace]]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        per_trace: dict[str, Any] = {}
        closed: list[tuple[str, Any]] = []
        engine = Engine(
            ["coherence", "loop_detection", "tool_call_loops", "agent_reliability"],
            sinks=[
                CallbackSink(
                    lambda trace, results: per_trace.update(
                        {trace.id: results.model_dump(exclude=NO_LATENCY)}
                    ),
                    on_session=lambda session, results: closed.append(
                        (session, [r.model_dump(exclude={"latency_ms"}) for r in results])
                    ),
                )
            ],
        )
        asyncio.run(engine.stream(batches))
        engine.close_all()
        return per_trace, closed

    one_by_one = scored([[trace] for trace in traces])
    batched = scored(batches)
    assert batched == one_by_one


@settings(max_examples=60)
@given(
    sessions=st.lists(st.sampled_from("abcde"), min_size=1, max_size=30),
    cuts=st.lists(st.integers(1, 5), min_size=1, max_size=10),
    limit=st.integers(1, 4),
)
def test_sessions_cut_by_the_limit_lose_no_trace_and_are_all_counted(
    sessions: list[str], cuts: list[int], limit: int
) -> None:
    # any interleaving, any batches, any limit: every trace is in exactly one part of its
    # session, in order, and the parts are the sessions plus the cuts counted
    traces = [
        Trace(id=f"t{index}", input="q", output=f"answer {index}", session_id=session)
        for index, session in enumerate(sessions)
    ]
    batches = in_batches(traces, cuts)
    parts: list[tuple[str, list[str]]] = []
    engine = Engine(
        ["tool_call_loops", "agent_reliability"],
        max_open_sessions=limit,
        sinks=[
            CallbackSink(
                lambda trace, results: None,
                on_session=lambda session, results: parts.append(
                    (session, list(results[0].metadata["per_trace_signals"]))
                ),
            )
        ],
    )
    asyncio.run(engine.stream(batches))
    engine.close_all()
    assert len(parts) == len(set(sessions)) + engine.sessions_cut
    for session in set(sessions):
        ids = [trace_id for name, part in parts if name == session for trace_id in part]
        assert ids == [trace.id for trace in traces if trace.session_id == session]
    if limit >= len(set(sessions)):
        assert engine.sessions_cut == 0


def test_a_batch_scored_at_once_embeds_each_text_once(judge_server: JudgeServer) -> None:
    # a remote embedder without a cache: the embedding metrics score the batch themselves,
    # so nothing embeds the batch's texts beforehand as well
    traces = [
        Trace(id=f"t{i}", input=f"question {i}", output=f"answer {i}", session_id="s")
        for i in range(3)
    ]
    embedder = HTTPEmbedder("embed-model", base_url=judge_server.base_url)
    engine = Engine(["coherence", "loop_detection"], embedder=embedder)
    assert asyncio.run(engine.stream([traces])) == 3
    sent = [request["input"] for request in judge_server.embedding_requests]
    # coherence: each question and answer; loop_detection: the answers with a previous one
    assert sent == [
        ["question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2"],
        ["answer 1", "answer 0", "answer 2"],
    ]


def test_summaries_count_errors_by_kind_and_keep_a_bounded_set_of_reasons() -> None:
    def failed(error: str, kind: ErrorKind | None) -> MetricResult:
        metadata = {"error_kind": kind} if kind is not None else {}
        return MetricResult(
            name="m", version="1", score=None, threshold=0.5, success=None, error=error,
            metadata=metadata,
        )  # fmt: skip

    first, second = ResultSummary(), ResultSummary()
    # a long replay whose judge errors each name their own trace: 150 distinct texts
    first.add([failed(f"judge unavailable: trace t{i} timed out", ErrorKind.UNAVAILABLE)
               for i in range(150)])  # fmt: skip
    first.add([failed("budget exhausted: $0.50 of $0.50", ErrorKind.BUDGET)] * 3)
    second.add([failed("KeyError: 'x'", None)] * 2)  # a result written before kinds existed
    second.add([failed("other text", ErrorKind.UNAVAILABLE)])
    first.merge(second)
    summary = first.metrics["m"]
    assert summary.errors == 156
    assert summary.error_kinds == {
        ErrorKind.UNAVAILABLE: 151, ErrorKind.BUDGET: 3, ErrorKind.METRIC_ERROR: 2
    }  # fmt: skip
    assert len(summary.reasons) == MetricSummary.MAX_REASONS + 1
    # the first 100 texts kept one each; the other 50, the budget's 3, the KeyError's 2 and
    # the last 1 (all seen after the bound was reached) counted together
    assert summary.reasons[MetricSummary.OTHER_REASONS] == 50 + 3 + 2 + 1
    assert sum(summary.reasons.values()) == 156
    assert summary.as_dict()["error_kinds"] == {"unavailable": 151, "budget": 3, "metric_error": 2}


def test_a_run_whose_end_was_not_seen_is_not_scored_nor_a_failure_of_its_session(
    tmp_path: Path,
) -> None:
    # a run agenteval stopped recording before it ended (the evaluator closed while it
    # ran, or it was taken for lost) scored as a failure would be a guess: every metric
    # skips it, and its session is scored on the runs that ended
    unfinished = Trace(
        id="t1",
        session_id="s1",
        input="Where is A-1?",
        status=RunStatus.UNFINISHED,
        status_reason="still running when the evaluator closed: recorded as it stood",
    )
    ended = Trace(id="t2", session_id="s1", input="Where is A-2?", output="A-2 is processing.")
    capture = tmp_path / "c.jsonl"
    with CaptureWriter(capture) as writer:
        writer.write(unfinished)
        writer.write(ended)
    traces: dict[str, list[MetricResult]] = {}
    sessions: list[list[MetricResult]] = []
    replay(
        capture,
        ["coherence", "tool_failures", "agent_reliability"],
        on_trace=lambda trace, results: traces.setdefault(trace.id, results),
        sinks=[CallbackSink(on_session=lambda _, results: sessions.append(results))],
    )
    reason = (
        "not scored: how the run ended was not recorded "
        "(still running when the evaluator closed: recorded as it stood)"
    )
    assert [(r.name, r.score, r.skipped, r.reason) for r in traces["t1"]] == [
        ("coherence", None, True, reason),
        ("tool_failures", None, True, reason),
    ]
    assert [(r.name, r.skipped) for r in traces["t2"]] == [
        ("coherence", False),
        ("tool_failures", False),
    ]
    [[reliability]] = sessions
    assert reliability.metadata["traces_evaluated"] == 1  # the run that ended, alone
    assert reliability.metadata["total_traces_in_session"] == 2
