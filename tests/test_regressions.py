"""From failure to regression case to CI gate: `agenteval cases` on real LangGraph runs with
known failures, `agenteval suite` against a fixed and a broken agent, baselines."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from math import comb, factorial
from pathlib import Path
from typing import Any

import hotel_agent
import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from click.testing import CliRunner
from judge_server import JudgeServer, Reply
from langchain.agents import create_agent
from langchain_core.messages import AIMessage

from agenteval_core import (
    AgentStep,
    CaptureError,
    CaptureWriter,
    EvalCase,
    EvalSuite,
    ExpectedToolCall,
    Metric,
    MetricInputError,
    OnlineEvaluator,
    RegressionCase,
    RunStatus,
    Span,
    SpanKind,
    SuiteReport,
    ToolCall,
    ToolCallLimit,
    Trace,
    cases_from_capture,
    compare_to_baseline,
    drop_probability,
    read_capture,
    read_cases,
    replay,
    unflaggable_baseline,
)
from agenteval_core.cli import cli
from agenteval_core.metrics import ToolCallAccuracy
from agenteval_core.pytest_plugin import assert_pass_k

HERE = Path(__file__).resolve().parent
METRICS = "tool_failures,tool_call_loops,agent_reliability"


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real runs of the hotel agent, with known failures: a booking service that fails
    (twice with the same input, in a session after a good turn), a loop the guard stops, a
    recursion limit; then the same booking succeeding, and a healthy run."""
    path = tmp_path_factory.mktemp("regressions") / "capture.jsonl"
    evaluator = OnlineEvaluator(capture=path, log=False)

    def handler(session: str, stop: bool = False) -> AgentEvalCallbackHandler:
        return AgentEvalCallbackHandler(evaluator, session_id=session, stop_on_loop=stop)

    hotel_agent.run("Book a hotel in Lisbon", handler("s1"))
    hotel_agent.run("Book a hotel in Rome", handler("s1"), booking_fails=True)
    hotel_agent.run("Book a hotel in Rome", handler("s2"), booking_fails=True)
    hotel_agent.run("Find me a hotel in Paris", handler("s3", stop=True), behaviour="loop")
    hotel_agent.run("Book a hotel in Rome", handler("s4"))
    hotel_agent.run("Plan my trip in Oslo", handler("s5"), behaviour="endless", recursion_limit=6)
    evaluator.close()
    return path


def traces_of(path: Path) -> list[Trace]:
    return list(read_capture(path))


def test_cases_from_real_failures_one_per_distinct_failure(capture: Path, tmp_path: Path) -> None:
    traces = traces_of(capture)
    lisbon, rome_1, rome_2, paris, rome_ok, oslo = traces
    # what the runs did, before reading what agenteval made of them
    assert [c.failed for c in rome_1.tool_calls()] == [True] and rome_1.status == "ok"
    assert paris.status == "stopped" and paris.alerts[0].pattern == "repeated_call"
    # a recursion limit is a limit (it was: status error)
    assert oslo.status == "limit" and "GraphRecursionError" in (oslo.status_reason or "")
    out = tmp_path / "cases.jsonl"
    result = CliRunner().invoke(
        cli, ["cases", str(capture), "--metrics", METRICS, "-o", str(out)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "wrote 3 case(s) for 4 failed run(s)" in result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rome, loop, limit = (RegressionCase.model_validate(line) for line in lines)

    # the booking that failed twice: one case, count 2, the session's earlier turn kept, the
    # later successful booking of the same input as the reference trajectory
    assert rome.id.startswith("book-a-hotel-in-rome-") and rome.input == "Book a hotel in Rome"
    assert rome.count == 2 and rome.provenance.trace_ids == [rome_1.id, rome_2.id]
    assert rome.conversation == [{"input": "Book a hotel in Lisbon", "output": lisbon.output}]
    assert rome.metrics == ["tool_failures", "tool_constraints", "trajectory_match"]
    assert rome.tools_must_succeed == ["book_hotel"] and rome.tool_call_limits is None
    assert [(c.name, c.arguments) for c in rome.expected_tool_calls or []] == [
        ("book_hotel", {"city": "Rome"})
    ]
    origin = rome.provenance
    assert (origin.session_id, origin.status, origin.reference_trace_id) == ("s1", "ok", rome_ok.id)
    assert origin.failed_tools == ["book_hotel"] and origin.alerts == []
    # one failed call, owned up to ("Sorry, ..."): 1 − (1 + 0) / 2 = 0.5 < 0.7
    assert [(m.name, m.score, m.threshold) for m in origin.failing_metrics] == [
        ("tool_failures", 0.5, 0.7)
    ]
    assert origin.capture == str(capture) and origin.time is not None

    # the loop the guard stopped: no loop again, and the refused call at most twice
    assert loop.input == "Find me a hotel in Paris" and loop.count == 1
    assert loop.metrics == ["tool_failures", "tool_call_loops", "tool_constraints"]
    assert loop.tool_call_limits == [
        ToolCallLimit(name="search_hotels", arguments={"city": "Paris"}, max_calls=2)
    ]
    assert loop.tools_must_succeed is None  # a refused call is no failure of the tool
    assert loop.provenance.status == "stopped" and loop.provenance.alerts == [
        'repeated_call: search_hotels called 3 times with the same arguments {"city": "Paris"}'
    ]
    # the stopped run flagged its session: agent_reliability failed, a session metric, so
    # provenance only (a case is one run); tool_failures: 2 ok + 1 refused, not recovered
    failed = {m.name: m.score for m in loop.provenance.failing_metrics}
    assert failed == {
        "tool_failures": pytest.approx(1 - 2 / 6),
        "tool_call_loops": 0.0,
        "agent_reliability": 0.0,
    }

    # the recursion limit: the run must complete (the suite's own rule) with working tools
    assert limit.input == "Plan my trip in Oslo" and limit.metrics == ["tool_failures"]
    assert limit.provenance.status == str(oslo.status)
    assert [m.name for m in limit.provenance.failing_metrics] == ["agent_reliability"]
    assert read_cases(out)[0].metadata["count"] == 2


def test_a_results_file_selects_the_same_failures(
    capture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results.jsonl"
    replay(capture, METRICS.split(","), output=results)
    # what the HTML report lists of a large file never limits what cases reads of it
    monkeypatch.setattr("agenteval_core.report._report.MAX_TRACES", 1)
    monkeypatch.setattr("agenteval_core.report._report.MAX_SESSIONS", 1)
    from_file = cases_from_capture(capture, results=results)
    from_replay = cases_from_capture(capture, metrics=METRICS.split(","))
    assert [c.model_dump() for c in from_file] == [c.model_dump() for c in from_replay]
    only_incomplete = cases_from_capture(capture, results=results, select=["incomplete"])
    assert [c.input for c in only_incomplete] == [
        "Find me a hotel in Paris",
        "Plan my trip in Oslo",
    ]
    assert all(c.provenance.failing_metrics == [] for c in only_incomplete)


def test_a_capture_shipped_twice_gives_the_cases_of_each_run_once(
    capture: Path, tmp_path: Path
) -> None:
    # every line delivered twice (a log shipper's retry): each failed run counted twice in
    # its case, its trace id listed twice, its turn twice in later cases' conversations;
    # with --results, a repeat's skipped line took the failure of the run it repeated
    lines = capture.read_text().splitlines(keepends=True)
    twice = tmp_path / "twice.jsonl"
    twice.write_text("".join(lines[:3] + lines[1:] + lines[3:]))
    results = tmp_path / "twice-results.jsonl"
    assert replay(twice, METRICS.split(","), output=results).repeated_traces == len(lines) - 1
    expected = [c.model_dump() for c in cases_from_capture(capture, metrics=METRICS.split(","))]
    for cases in (
        cases_from_capture(twice, metrics=METRICS.split(",")),
        cases_from_capture(twice, results=results),
    ):
        dumped = [c.model_dump() for c in cases]
        for case in dumped:
            case["provenance"]["capture"] = str(capture)
        assert dumped == expected
    rome = next(c for c in expected if c["input"] == "Book a hotel in Rome")
    assert rome["count"] == 2 and len(rome["provenance"]["trace_ids"]) == 2


def test_a_failed_run_with_no_session_shipped_twice_is_one_run_of_its_case(
    tmp_path: Path,
) -> None:
    def failed(trace_id: str) -> Trace:
        return Trace(
            id=trace_id,
            input="Book a hotel in Rome",
            error="400 Bad Request",
            status=RunStatus.ERROR,
        )

    lines = [failed(trace_id).model_dump_json() for trace_id in ("f0", "f1", "f0")]
    capture = tmp_path / "twice.jsonl"
    capture.write_text("".join(f"{line}\n" for line in lines))
    [case] = cases_from_capture(capture)
    assert (case.count, case.provenance.trace_ids) == (2, ["f0", "f1"])


def test_a_capture_of_many_failures_prints_the_most_frequent_and_writes_every_one(
    tmp_path: Path,
) -> None:
    # a production capture's thousands of failures became a table of thousands of rows;
    # 25 requests that failed once each and one that failed 3 times: the table shows 20,
    # the most frequent first, and the file holds all 26
    def failed(trace_id: str, request: str) -> str:
        trace = Trace(id=trace_id, input=request, error="400 Bad Request", status=RunStatus.ERROR)
        return trace.model_dump_json() + "\n"

    lines = [failed(f"t{n}", f"Book hotel number {n}") for n in range(25)]
    lines += [failed(f"r{n}", "Book a hotel in Rome") for n in range(3)]
    capture = tmp_path / "many.jsonl"
    capture.write_text("".join(lines))
    out = tmp_path / "cases.jsonl"
    done = CliRunner().invoke(cli, ["cases", str(capture), "-o", str(out)], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    rows = [line for line in done.output.splitlines() if line.startswith("│")]
    assert len(rows) == 20
    assert "Book a hotel in Rome" in rows[0] and "│     3 │" in rows[0]
    assert done.output.splitlines()[-2:] == [
        f"the 20 seen most often of 26 are shown; {out} holds every case",
        f"wrote 26 case(s) for 28 failed run(s) to {out}",
    ]
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(case["count"] for case in written) == [1] * 25 + [3]
    # too many to run as a suite: --top keeps those seen most often, ties in the order seen
    top = CliRunner().invoke(
        cli, ["cases", str(capture), "-o", str(out), "--top", "5"], env={"COLUMNS": "200"}
    )
    assert top.exit_code == 0, top.output
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(case["input"], case["count"]) for case in kept] == [
        ("Book a hotel in Rome", 3),
        *[(f"Book hotel number {n}", 1) for n in range(4)],
    ]
    assert top.output.splitlines()[-2:] == [
        f"wrote 5 case(s) for 7 failed run(s) to {out}",
        "left out 21 case(s) seen less often (--top 5)",
    ]


def test_a_capture_directory_gives_the_cases_of_the_same_traces_in_one_file(
    capture: Path, tmp_path: Path
) -> None:
    # a directory is read shard after shard; its failures, their earlier turns and the
    # later passing run of the same input are those of the runs in the order they ran
    directory = tmp_path / "sharded"
    with CaptureWriter(directory, shards=3) as writer:
        for trace in traces_of(capture):
            writer.write(trace)
    shards = [[t.session_id for t in read_capture(part)] for part in sorted(directory.iterdir())]
    # the passing Rome run (s4) is read before the failure that came first (s1)
    assert shards == [["s2", "s4", "s5"], ["s1", "s1", "s3"], []]
    out = tmp_path / "cases.jsonl"
    result = CliRunner().invoke(
        cli, ["cases", str(directory), "--metrics", METRICS, "-o", str(out)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "wrote 3 case(s) for 4 failed run(s)" in result.output

    def without_source(case: RegressionCase) -> dict[str, Any]:
        dumped = case.model_dump()
        assert dumped["provenance"].pop("capture") in (str(capture), str(directory))
        return dumped

    written = [RegressionCase.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [without_source(c) for c in written] == [
        without_source(c) for c in cases_from_capture(capture, metrics=METRICS.split(","))
    ]
    missing = CliRunner().invoke(cli, ["cases", str(tmp_path / "nothing"), "-o", str(out)])
    assert missing.exit_code == 2
    assert "nothing: no such file or directory; pass a capture file (.jsonl) or a capture " in (
        missing.output
    )


@pytest.fixture
def cases_file(capture: Path, tmp_path: Path) -> Path:
    out = tmp_path / "cases.jsonl"
    from_capture = cases_from_capture(capture, metrics=METRICS.split(","))
    out.write_text("".join(c.model_dump_json() + "\n" for c in from_capture))
    return out


def test_suite_passes_the_fixed_agent_and_fails_the_broken_one(
    cases_file: Path, tmp_path: Path
) -> None:
    agent = str(HERE / "hotel_agent.py")
    base, junit = tmp_path / "base.json", tmp_path / "junit.xml"
    fixed = CliRunner().invoke(
        cli,
        [
            "suite",
            str(cases_file),
            "--agent",
            f"{agent}:fixed_agent",
            "--attempts",
            "3",
            "--min-pass-pow-k",
            "0.7",
            "--save",
            str(base),
            "--junit",
            str(junit),
        ],
        env={"COLUMNS": "200"},
    )
    assert fixed.exit_code == 0, fixed.output
    assert "no regression recurs" in fixed.output
    # 3/3 per case: posterior Beta(4, 1), median 0.5^(1/4) = 0.841, interval [0.025^(1/4),
    # 0.975^(1/4)] = [0.398, 0.994]; the suite's posterior mean E[p] = 4/5
    assert fixed.output.count("3/3    │ 0.841 [0.398, 0.994]") == 3
    assert "pass^1 = 0.800" in fixed.output
    tree = ET.parse(junit).getroot().find("testsuite")
    assert tree is not None and tree.get("failures") == "0" and tree.get("tests") == "4"

    broken = CliRunner().invoke(
        cli,
        [
            "suite",
            str(cases_file),
            "--agent",
            f"{agent}:broken_agent",
            "--attempts",
            "3",
            "--baseline",
            str(base),
            "--junit",
            str(junit),
        ],
        env={"COLUMNS": "200"},
    )
    assert broken.exit_code == 1, broken.output
    assert "recurring:" in broken.output
    assert (
        "tool_constraints 0.000 < 1: 1 of 1 constraints broken: book_hotel's last call failed "
        "(1 of 1 failed)"
    ) in broken.output
    # 3/3 → 0/3: P(drop) = 1 − P(Beta(1, 4) > Beta(4, 1)) = 1 − 1/70 = 0.986 > 0.95
    assert broken.output.count("│ 3/3      │ 0/3 │   0.986 │ REGRESSED │") == 3
    assert "agenteval: error: 3 case(s) regressed" in broken.output
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "4"
    failures = [case.find("failure") for case in suite.findall("testcase")]
    assert all(f is not None for f in failures)
    assert failures[0].get("message", "").startswith("3/3 attempts failed: tool_failures 0.500")  # type: ignore[union-attr]


def test_a_suite_given_no_bound_fails_on_any_failed_attempt(
    cases_file: Path, tmp_path: Path
) -> None:
    # `agenteval suite CASES --agent ...` alone in CI: a gate, never a pass for any agent
    agent, junit = str(HERE / "hotel_agent.py"), tmp_path / "junit.xml"
    ids = [case.id for case in read_cases(cases_file)]
    fixed = CliRunner().invoke(cli, ["suite", str(cases_file), "--agent", f"{agent}:fixed_agent"])
    assert fixed.exit_code == 0, fixed.output
    assert "no regression recurs: every attempt of every case passed" in fixed.output
    broken = CliRunner().invoke(
        cli,
        ["suite", str(cases_file), "--agent", f"{agent}:broken_agent", "--junit", str(junit)],
        env={"COLUMNS": "200"},
    )
    assert broken.exit_code == 1, broken.output
    problem = (
        f"{len(ids)} of {len(ids)} case(s) failed an attempt ({', '.join(ids)}); with no "
        "--min-pass-at-k, --min-pass-pow-k or --baseline, every attempt must pass"
    )
    assert broken.output.endswith(f"agenteval: error: {problem}\n")
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    [gate] = [
        case for case in suite.findall("testcase") if case.get("name") == "agenteval suite gate"
    ]
    failure = gate.find("failure")
    assert failure is not None and failure.get("message") == problem


def test_an_agent_that_stops_calling_the_failed_tool_fails_its_case(tmp_path: Path) -> None:
    # a booking that failed in production, with no later run that passed: the case checks
    # tool_failures and that book_hotel succeeds. An agent that now claims the booking
    # without calling the tool made no call to fail, and both checks had passed it
    capture = tmp_path / "capture.jsonl"
    evaluator = OnlineEvaluator(capture=capture, log=False)
    hotel_agent.run(
        "Book a hotel in Rome",
        AgentEvalCallbackHandler(evaluator, session_id="s1"),
        booking_fails=True,
    )
    evaluator.close()
    [case] = cases_from_capture(capture, metrics=METRICS.split(","))
    assert (case.metrics, case.tools_must_succeed, case.expected_tool_calls) == (
        ["tool_failures", "tool_constraints"],
        ["book_hotel"],
        None,
    )
    cases = tmp_path / "cases.jsonl"
    cases.write_text(case.model_dump_json() + "\n")
    agent = str(HERE / "hotel_agent.py")
    lying = CliRunner().invoke(
        cli, ["suite", str(cases), "--agent", f"{agent}:lying_agent"], env={"COLUMNS": "200"}
    )
    assert lying.exit_code == 1, lying.output
    assert (
        "tool_constraints 0.000 < 1: 1 of 1 constraints broken: book_hotel was never called "
        "(it must be called and succeed)"
    ) in lying.output
    fixed = CliRunner().invoke(cli, ["suite", str(cases), "--agent", f"{agent}:fixed_agent"])
    assert fixed.exit_code == 0, fixed.output


def test_a_tool_the_agent_does_not_have_is_no_tool_a_case_requires(tmp_path: Path) -> None:
    # the model first asked for reserve_room, which the agent lacks (LangChain answers "not
    # a valid tool" and runs nothing), then book_hotel, whose service was down. The case
    # requires book_hotel to succeed; requiring reserve_room would fail every fixed agent
    replies = iter(
        [
            AIMessage("", tool_calls=[tool_call("reserve_room", "r1", city="Rome")]),
            AIMessage("", tool_calls=[tool_call("book_hotel", "b1", city="Rome")]),
            AIMessage("Sorry, I could not book a hotel in Rome: the service is down."),
        ]
    )
    capture = tmp_path / "capture.jsonl"
    evaluator = OnlineEvaluator(capture=capture, log=False)
    agent = create_agent(
        ScriptedChatModel(reply=lambda messages: next(replies)),
        tools=[hotel_agent.book_hotel, hotel_agent.search_hotels],
    )
    token = hotel_agent._booking_fails.set(True)
    try:
        agent.invoke(
            {"messages": [("user", "Book a hotel in Rome")]},
            {"callbacks": [AgentEvalCallbackHandler(evaluator, session_id="s1")]},
        )
    finally:
        hotel_agent._booking_fails.reset(token)
    evaluator.close()
    [trace] = read_capture(capture)
    assert [(c.name, c.failed) for c in trace.tool_calls()] == [
        ("reserve_room", True),
        ("book_hotel", True),
    ]
    [case] = cases_from_capture(capture, metrics=METRICS.split(","))
    assert (case.metrics, case.tools_must_succeed) == (
        ["tool_failures", "tool_constraints"],
        ["book_hotel"],
    )
    assert case.provenance.failed_tools == ["book_hotel"]


def _turn(session: str, request: str, answer: str, *calls: ToolCall) -> Trace:
    step = [AgentStep(tool_calls=list(calls))] if calls else []
    return Trace.from_steps(request, step, output=answer, session_id=session, status=RunStatus.OK)


def test_the_same_follow_up_after_two_offers_is_two_requests(tmp_path: Path) -> None:
    # "Yes, please." accepting a room in Rome, then in another session accepting an order's
    # cancellation (which went well), then accepting a room in Paris: the two failed
    # bookings were one case of "Yes, please.", and the cancellation its reference
    # trajectory, so the case asked the fixed agent to cancel an order
    rome, paris = (
        "Hotel Roma has a room on Friday. Shall I book it?",
        "Hotel Lutece has a room. Book it?",
    )

    def booking_failed(session: str, hotel: str) -> Trace:
        call = ToolCall(name="book_hotel", arguments={"hotel": hotel}, error="503")
        return _turn(session, "Yes, please.", "Sorry, the service is down.", call)

    cancelled = ToolCall(name="cancel_order", arguments={"id": "48213"}, result="ok")
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        for trace in (
            _turn("s1", "Find me a hotel in Rome", rome),
            booking_failed("s1", "Roma"),
            _turn("s2", "Cancel order 48213", "Shall I cancel order 48213?"),
            _turn("s2", "Yes, please.", "Cancelled.", cancelled),
            _turn("s3", "Find me a hotel in Paris", paris),
            booking_failed("s3", "Lutece"),
        ):
            writer.write(trace)
    cases = cases_from_capture(capture, metrics=["tool_failures"])
    assert [(c.input, c.count, c.conversation, c.expected_tool_calls) for c in cases] == [
        ("Yes, please.", 1, [{"input": "Find me a hotel in Rome", "output": rome}], None),
        ("Yes, please.", 1, [{"input": "Find me a hotel in Paris", "output": paris}], None),
    ]
    assert cases[0].id != cases[1].id and cases[0].id.startswith("yes-please-")


def test_a_loop_across_turns_fails_its_case_while_the_agent_still_repeats_itself(
    tmp_path: Path,
) -> None:
    # loop_detection failed on the second turn of a conversation; its case was run alone, with
    # no earlier output to compare with (1.0, "no previous output"), so the same answer again
    # passed every attempt. The case's earlier turns are now the history its metrics read
    same = "I am sorry, I cannot find any hotel rooms available in Paris for those dates."
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        writer.write(_turn("s1", "Find a hotel room in Paris for Friday", same))
        writer.write(_turn("s1", "Please look again for a hotel in Paris", same))
    [case] = cases_from_capture(capture, metrics=["loop_detection"])
    assert (case.input, case.metrics, case.conversation) == (
        "Please look again for a hotel in Paris",
        ["tool_failures", "loop_detection"],
        [{"input": "Find a hotel room in Paris for Friday", "output": same}],
    )

    def agent(answer: str) -> Any:
        def run(question: str, conversation: list[dict[str, Any]]) -> Trace:
            return _turn("", question, answer)

        return run

    suite = EvalSuite("loops").add_cases([case])  # as cases_from_capture made it
    looping = suite.run(agent(same), k=1, attempts=2).cases[0].runs
    assert [(r.outcome, r.reason) for r in looping] == [
        (
            "failed",
            "loop_detection 0.000 < 0.5: highest cosine × Jaccard overlap with a recent "
            "output: 1.0000",
        )
    ] * 2
    assert looping[0].results[1].metadata["comparisons"][0]["trace_id"] == "turn-0"
    fixed = suite.run(agent("Hotel Lutece has a room on Friday for 140 euros."), k=1, attempts=2)
    assert [r.outcome for r in fixed.cases[0].runs] == ["passed", "passed"]


def test_the_same_follow_up_in_spanish_after_two_offers_is_two_requests(tmp_path: Path) -> None:
    # "Sí, por favor." accepting a room, then a flight: one case of count 2 before, whose
    # earlier turn was the room's offer only
    room, flight = (
        "Hotel Roma tiene una habitación. ¿La reservo?",
        "Hay un vuelo a Roma. ¿Lo reservo?",
    )
    failed = ToolCall(name="book", arguments={"what": "room"}, error="503")
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        for session, offer in (("s1", room), ("s2", flight)):
            writer.write(_turn(session, "Busco un hotel en Roma", offer))
            writer.write(_turn(session, "Sí, por favor.", "Lo siento, no pude.", failed))
    cases = cases_from_capture(capture, metrics=["tool_failures"])
    assert [(c.input, c.count, c.conversation) for c in cases] == [
        ("Sí, por favor.", 1, [{"input": "Busco un hotel en Roma", "output": room}]),
        ("Sí, por favor.", 1, [{"input": "Busco un hotel en Roma", "output": flight}]),
    ]


def test_a_case_late_in_a_long_session_keeps_its_last_turns(tmp_path: Path) -> None:
    # every case kept every turn before it: one session of 2,000 turns (3.7 MB captured),
    # a failed lookup in each fifth, gave a 132 MB cases file, each case's conversation
    # handed whole to the agent
    failed = ToolCall(name="lookup", arguments={"id": "A-25"}, error="503")
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        for index in range(25):
            writer.write(_turn("s1", f"Where is order A-{index}?", f"A-{index} has shipped."))
        writer.write(_turn("s1", "Where is order A-25?", "Sorry, try later.", failed))
    turns = [
        {"input": f"Where is order A-{index}?", "output": f"A-{index} has shipped."}
        for index in range(25)
    ]
    [case] = cases_from_capture(capture, metrics=["tool_failures"])
    assert (case.conversation, case.provenance.turns_left_out) == (turns[5:], 5)
    [whole] = cases_from_capture(capture, metrics=["tool_failures"], max_turns=None)
    assert (whole.conversation, whole.provenance.turns_left_out) == (turns, 0)
    out = tmp_path / "cases.jsonl"
    done = CliRunner().invoke(
        cli,
        ["cases", str(capture), "-o", str(out), "--max-turns", "0", "--metrics", "tool_failures"],
    )
    assert done.exit_code == 0, done.output
    [none] = read_cases(out)
    assert none.conversation is None
    assert json.loads(out.read_text())["provenance"]["turns_left_out"] == 25


def test_without_turns_kept_a_follow_up_is_still_keyed_by_the_answer_it_accepts(
    tmp_path: Path,
) -> None:
    failed = ToolCall(name="book", arguments={}, error="503")
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        for session, offer in (("s1", "A room at Roma. Book it?"), ("s2", "A flight. Book it?")):
            writer.write(_turn(session, "Find me something in Rome", offer))
            writer.write(_turn(session, "Yes, please.", "Sorry.", failed))
    cases = cases_from_capture(capture, metrics=["tool_failures"], max_turns=0)
    assert [(c.input, c.count, c.conversation, c.provenance.turns_left_out) for c in cases] == [
        ("Yes, please.", 1, None, 1),
        ("Yes, please.", 1, None, 1),
    ]


def test_a_refusal_becomes_a_case_that_fails_while_the_model_refuses(tmp_path: Path) -> None:
    # a run the model refused completed, and no default metric fails it (coherence scores the
    # refusal's text, tool_failures has no calls to check): it became no case, and a suite
    # of it would pass an agent that still refuses
    capture, cases = tmp_path / "capture.jsonl", tmp_path / "cases.jsonl"
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        for session in ("s1", "s2"):  # two conversations (in one, a loop too)
            handler = AgentEvalCallbackHandler(evaluator, session_id=session)
            hotel_agent.run("Book a hotel in Rome", handler, behaviour="refuse")
        hotel_agent.run("Book a hotel in Lisbon", AgentEvalCallbackHandler(evaluator))
    refused, again, _ = traces_of(capture)
    made = CliRunner().invoke(
        cli, ["cases", str(capture), "-o", str(cases)], env={"COLUMNS": "200"}
    )
    assert made.exit_code == 0, made.output
    assert "wrote 1 case(s) for 2 failed run(s)" in made.output
    [case] = [RegressionCase.model_validate_json(line) for line in cases.read_text().splitlines()]
    assert (case.input, case.count, case.metrics, case.allow_refusal) == (
        "Book a hotel in Rome",
        2,
        ["tool_failures"],
        False,
    )
    origin = case.provenance
    assert (origin.trace_ids, origin.status, origin.refusal) == (
        [refused.id, again.id],
        "ok",
        hotel_agent.REFUSAL,
    )
    assert origin.failing_metrics == []
    assert re.search(
        r"book-a-hotel-in-rome-\w+ +│ +2 │ Book a hotel in Rome │ refused ", made.output
    )
    only = CliRunner().invoke(cli, ["cases", str(capture), "--select", "metrics", "-o", str(cases)])
    assert "wrote 0 case(s)" in only.output

    CliRunner().invoke(cli, ["cases", str(capture), "-o", str(cases)])
    agent = str(HERE / "hotel_agent.py")
    still = CliRunner().invoke(
        cli, ["suite", str(cases), "--agent", f"{agent}:refusing_agent", "--attempts", "2"]
    )
    assert still.exit_code == 1, still.output
    assert "2 refused" in still.output
    fixed = CliRunner().invoke(cli, ["suite", str(cases), "--agent", f"{agent}:fixed_agent"])
    assert fixed.exit_code == 0, fixed.output
    # an input the agent should refuse: the case says so, and the refusal passes
    case.allow_refusal = True
    cases.write_text(case.model_dump_json() + "\n")
    allowed = CliRunner().invoke(cli, ["suite", str(cases), "--agent", f"{agent}:refusing_agent"])
    assert allowed.exit_code == 0, allowed.output


def test_junit_holds_what_xml_cannot_and_ci_still_reads_it(tmp_path: Path) -> None:
    # a tool's error in colour, a NUL from a C library: ElementTree wrote them as they are,
    # and CI's JUnit readers refused the whole file
    (tmp_path / "agent.py").write_text(
        "def run_agent(question):\n"
        "    raise RuntimeError('tool said: \\x1b[31mERROR\\x1b[0m reset\\x00')\n"
    )
    cases = tmp_path / "cases.jsonl"
    case_id = "book \x1b[1mnow\x1b[0m\x07"
    cases.write_text(json.dumps({"agenteval_case": 1, "id": case_id, "input": "Book a room"}))
    junit = tmp_path / "junit.xml"
    agent = f"{tmp_path / 'agent.py'}:run_agent"
    result = CliRunner().invoke(
        cli,
        [
            "suite",
            str(cases),
            "--agent",
            agent,
            "--metrics",
            "tool_failures",
            "--junit",
            str(junit),
        ],
    )
    assert result.exit_code == 1, result.output
    suite = ET.parse(junit).getroot().find("testsuite")  # raised on the file before
    assert suite is not None
    [case, gate] = suite.findall("testcase")
    assert case.get("name") == "book now\\x07"
    failure = case.find("failure")
    assert failure is not None
    reason = "the agent raised RuntimeError: tool said: ERROR reset\\x00"
    assert failure.get("message") == f"1/1 attempts failed: {reason}"
    assert failure.text == f"attempt 0: agent_error: {reason}"
    assert gate.get("name") == "agenteval suite gate"


def test_a_hanging_agent_fails_by_the_timeout_and_the_process_ends(
    cases_file: Path, tmp_path: Path
) -> None:
    # an LLM call that never returns held the CI job until its own limit, naming nothing
    (tmp_path / "hanging.py").write_text(
        "import time\n\ndef run_agent(question):\n    time.sleep(3600)\n"
    )
    junit, ids = tmp_path / "junit.xml", [case.id for case in read_cases(cases_file)]
    command = [sys.executable, "-m", "agenteval_core.cli", "suite", str(cases_file)]
    command += ["--agent", f"{tmp_path / 'hanging.py'}:run_agent", "--timeout", "1"]
    done = subprocess.run(
        [*command, "--attempts", "2", "--junit", str(junit)],
        capture_output=True,
        text=True,
        timeout=120,  # the agent's threads sleep on: the process ends without them
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.endswith(
        f"agenteval: error: {len(ids)} of {len(ids)} case(s) failed an attempt "
        f"({', '.join(ids)}); with no --min-pass-at-k, --min-pass-pow-k or --baseline, every "
        "attempt must pass\n"
    )
    # no check of a case ran: the regression was neither seen again nor seen gone (it was
    # listed as "recurring")
    assert "recurring:" not in done.stdout
    assert "not checked (attempts that ran none of the case's checks):\n" in done.stdout
    assert done.stdout.count("2/2 attempts — the agent did not return within 1 s") == len(ids)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    failures = {
        case.get("name"): case.find("failure") for case in suite.findall("testcase")[: len(ids)]
    }
    assert {name: (f.get("message"), f.text) for name, f in failures.items() if f is not None} == {
        name: (
            "2/2 attempts failed: the agent did not return within 1 s",
            "attempt 0: agent_timeout: the agent did not return within 1 s\n"
            "attempt 1: agent_timeout: the agent did not return within 1 s",
        )
        for name in ids
    }


def test_suite_refuses_bad_input_in_one_line(cases_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    bad_agent = runner.invoke(cli, ["suite", str(cases_file), "--agent", "no_such_module:run"])
    assert bad_agent.exit_code == 2
    assert "cannot import no_such_module" in bad_agent.output
    no_colon = runner.invoke(cli, ["suite", str(cases_file), "--agent", "hotel_agent"])
    assert "give MODULE:FUNCTION" in no_colon.output and no_colon.exit_code == 2
    broken_line = tmp_path / "broken.jsonl"
    broken_line.write_text(
        '{"agenteval_case": 1, "id": "x", "tool_call_limits": [{"max_calls": -1}]}\n'
    )
    result = runner.invoke(cli, ["suite", str(broken_line), "--agent", "hotel_agent:fixed_agent"])
    assert result.exit_code == 2 and f"{broken_line}:1: tool_call_limits.0.name" in result.output
    # an output in a directory that is not there is refused before the agent runs, not
    # after the whole suite (whose results were then lost)
    agent = tmp_path / "marking.py"
    agent.write_text(
        "from pathlib import Path\n\ndef run(question):\n"
        "    Path(__file__).with_suffix('.ran').touch()\n    return 'x'\n"
    )
    for option in ("--junit", "--save"):
        lost = runner.invoke(
            cli, ["suite", str(cases_file), "--agent", f"{agent}:run", option, "no/such/out.xml"]
        )
        assert (lost.exit_code, lost.output) == (
            2,
            "agenteval: error: no/such/out.xml: no such file or directory; create no/such first\n",
        )
    assert not agent.with_suffix(".ran").exists()
    cases_out = runner.invoke(cli, ["cases", str(cases_file), "-o", f"{cases_file}/cases.jsonl"])
    assert (cases_out.exit_code, cases_out.output) == (
        2,
        f"agenteval: error: {cases_file}/cases.jsonl: {cases_file} is a file, not a directory\n",
    )
    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"agenteval_case": 9, "id": "x"}\n')
    with pytest.raises(CaptureError, match="cases format 9 is newer than this agenteval"):
        read_cases(newer)


def test_a_bound_no_agent_can_meet_is_refused_before_the_agent_runs(
    cases_file: Path, tmp_path: Path
) -> None:
    # with 5 attempts that all pass, pass^1 is the mean of Beta(6, 1), 6/7 = 0.857: the gate
    # --min-pass-pow-k 0.9 failed every agent, however good, after running all of them
    agent = tmp_path / "marking.py"
    agent.write_text(
        "from pathlib import Path\n\ndef run(question):\n"
        "    Path(__file__).with_suffix('.ran').touch()\n    return 'x'\n"
    )
    runner = CliRunner()
    suite = ["suite", str(cases_file), "--agent", f"{agent}:run"]
    refused = runner.invoke(cli, [*suite, "--attempts", "5", "--min-pass-pow-k", "0.9"])
    # (1 + n) / (2 + n) >= 0.9 from n = 8: 9/10
    assert (refused.exit_code, refused.output) == (
        2,
        "agenteval: error: --min-pass-pow-k 0.9 cannot be met with 5 attempts per case: "
        "pass^1 is a posterior mean, at most 0.857 when every attempt passes; give "
        "--attempts 8 or more (pass^1 up to 0.900) or a lower bound\n",
    )
    # k = 3 and the default attempts (3): pass@3 = 1 − E[(1 − p)^3], 1 − p ~ Beta(1, 4):
    # 1 − (1·2·3)/(5·6·7) = 0.971; 0.99 needs (n+2)(n+3)(n+4) >= 600, n = 6 (720, 0.992);
    # a bound of 1 on pass^3 no posterior mean reaches
    both = runner.invoke(
        cli, [*suite, "-k", "3", "--min-pass-at-k", "0.99", "--min-pass-pow-k", "1"]
    )
    assert (both.exit_code, both.output) == (
        2,
        "agenteval: error: --min-pass-at-k 0.99 cannot be met with 3 attempts per case: "
        "pass@3 is a posterior mean, at most 0.971 when every attempt passes; give "
        "--attempts 6 or more (pass@3 up to 0.992) or a lower bound; --min-pass-pow-k 1 "
        "cannot be met with 3 attempts per case: pass^3 is a posterior mean, at most 0.571 "
        "when every attempt passes; no number of attempts reaches it: give a lower bound\n",
    )
    assert not agent.with_suffix(".ran").exists()
    with pytest.raises(MetricInputError, match=r"min_pass_pow_k 0\.9 cannot be met with 5 "):
        assert_pass_k(
            lambda question: "x", read_cases(cases_file), k=1, attempts=5, min_pass_pow_k=0.9
        )


def test_a_baseline_too_thin_to_flag_a_drop_is_refused_before_the_agent_runs(
    tmp_path: Path,
) -> None:
    # a baseline saved with 1 attempt, run again with 1: 1/1 then 0/1 is P(drop) 5/6, never
    # over 0.95, so an agent that failed every case passed the gate (exit 0)
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        '{"agenteval_case": 1, "id": "c1", "input": "find it", "metrics": ["tool_failures"]}\n'
    )
    agents = tmp_path / "agents.py"
    agents.write_text(
        "from pathlib import Path\n"
        "from agenteval_core import AgentStep, ToolCall, Trace\n\n"
        "def run(question, error=None):\n"
        "    call = ToolCall(name='lookup', arguments={'q': question}, result='ok', error=error)\n"
        "    return Trace.from_steps(question, [AgentStep(tool_calls=[call])], output='done')\n\n"
        "def broken(question):\n"
        "    Path(__file__).with_suffix('.ran').touch()\n"
        "    return run(question, error='503 Service Unavailable')\n"
    )
    runner = CliRunner()
    base = tmp_path / "base.json"
    saved = runner.invoke(
        cli,
        ["suite", str(cases), "--agent", f"{agents}:run", "--attempts", "1", "--save", str(base)],
    )
    assert saved.exit_code == 0, saved.output
    broken = ["suite", str(cases), "--agent", f"{agents}:broken", "--baseline", str(base)]
    refused = runner.invoke(cli, [*broken, "--attempts", "1"])
    # 1/1 then 0/n: P(drop) = 1 − 2 B(2, n + 2) = 1 − 2/((n+2)(n+3)): 0.833, 0.900, 0.933,
    # 0.952 for n = 1..4
    assert (refused.exit_code, refused.output) == (
        2,
        "agenteval: error: --baseline can flag no regression with 1 attempt(s) per case: a case "
        "that passed 1 of its 1 baseline attempt(s) and fails every attempt now has P(drop) "
        "0.833, not over --max-regression-prob 0.95, so an agent that fails every case would "
        "pass; give --attempts 4 or more (or save a baseline with more attempts)\n",
    )
    assert not agents.with_suffix(".ran").exists()
    flagged = runner.invoke(cli, [*broken, "--attempts", "4"])
    assert flagged.exit_code == 1 and "1 case(s) regressed: c1" in flagged.output
    # a baseline that passed none of the cases has no rate to drop from: nothing to refuse
    failing = SuiteReport.load(base).model_copy(update={"cases": []})
    assert unflaggable_baseline(failing, ["c1"], 1) is None


def test_a_case_new_since_the_baseline_must_pass_when_no_bound_is_given(tmp_path: Path) -> None:
    # a failure captured after the baseline was saved becomes a new case: the baseline has
    # no rate of it to compare with, and the suite passed while the agent failed it
    agents = tmp_path / "agents.py"
    agents.write_text(
        "from agenteval_core import AgentStep, ToolCall, Trace\n\n"
        "def run(question):\n"
        "    error = '503 Service Unavailable' if 'other' in question else None\n"
        "    call = ToolCall(name='lookup', arguments={'q': question}, result='ok', error=error)\n"
        "    return Trace.from_steps(question, [AgentStep(tool_calls=[call])], output='done')\n"
    )
    line = '{{"agenteval_case": 1, "id": "{}", "input": "{}", "metrics": ["tool_failures"]}}\n'
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(line.format("c1", "find it"))
    new.write_text(line.format("c1", "find it") + line.format("c2", "find the other"))
    runner = CliRunner()
    base = tmp_path / "base.json"
    agent = ["--agent", f"{agents}:run", "--attempts", "5"]
    saved = runner.invoke(cli, ["suite", str(old), *agent, "--save", str(base)])
    assert saved.exit_code == 0, saved.output
    gated = runner.invoke(cli, ["suite", str(new), *agent, "--baseline", str(base)])
    assert gated.exit_code == 1
    assert gated.output.endswith(
        "agenteval: error: 1 of 1 case(s) the baseline cannot judge (new or checked otherwise) "
        "failed an attempt (c2); with no --min-pass-at-k or --min-pass-pow-k, every attempt "
        "must pass\n"
    )
    # a bound says how many passes are enough, for new cases as for the others
    bounded = runner.invoke(
        cli, ["suite", str(new), *agent, "--baseline", str(base), "--min-pass-pow-k", "0.4"]
    )
    assert bounded.exit_code == 0, bounded.output


def test_a_case_a_judge_metric_failed_runs_with_the_suites_judge(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    # a failure task_completion found becomes a case that names it; agenteval suite took no
    # judge, so the case could not run at all ("task_completion needs a judge ... pass
    # --judge-model", an option the command did not have)
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        '{"agenteval_case": 1, "id": "rome", "input": "Book a hotel in Rome", '
        '"metrics": ["task_completion"]}\n'
    )
    agents = tmp_path / "agents.py"
    agents.write_text(
        "import os\n\ndef run(question):\n"
        "    return os.environ.get('ANSWER', 'Booked Hotel Roma Central for Friday.')\n"
    )

    def respond(request: dict[str, Any]) -> Reply:
        prompt = json.dumps(request["messages"])
        if request["response_format"]["json_schema"]["name"] == "TaskAndOutcome":
            return Reply(json.dumps({"task": "book a hotel in Rome", "outcome": prompt[-80:]}))
        booked = "Booked Hotel Roma" in prompt
        return Reply(json.dumps({"verdict": 0.9 if booked else 0.1, "reason": "r"}))

    judge_server.responder = respond
    suite = [
        "suite", str(cases), "--agent", f"{agents}:run", "--attempts", "2",
        "--judge-model", "judge-model", "--judge-base-url", judge_server.base_url, "--no-cache",
    ]  # fmt: skip
    runner = CliRunner()
    passed = runner.invoke(cli, suite)
    assert passed.exit_code == 0, passed.output
    assert "│ rome │ 2/2" in passed.output
    failed = runner.invoke(cli, suite, env={"ANSWER": "Sorry, I could not do that."})
    assert failed.exit_code == 1
    assert "task_completion 0.100 < 0.5" in failed.output
    verdicts = [r for r in judge_server.requests if "VerdictScore" in json.dumps(r)]
    assert len(verdicts) == 4  # two attempts in each run, one verdict each
    # another judge model is another check: a baseline judged by one is no rate of the other
    base = tmp_path / "base.json"
    assert runner.invoke(cli, [*suite, "--save", str(base)]).exit_code == 0
    model = suite.index("--judge-model") + 1
    other = [*suite[:model], "other-model", *suite[model + 1 :], "--baseline", str(base)]
    rejudged = runner.invoke(cli, other, env={"COLUMNS": "200"})
    assert rejudged.exit_code == 0, rejudged.output
    assert (
        "rome: not compared, checked otherwise than in the baseline (task_completion judge "
        "judge-model → other-model); judged as a new case"
    ) in rejudged.output


def _beta_pdf(a: int, b: int) -> dict[int, Fraction]:
    """x^(a−1)(1−x)^(b−1) / B(a, b) as polynomial coefficients."""
    scale = Fraction(factorial(a + b - 1), factorial(a - 1) * factorial(b - 1))
    return {a - 1 + j: scale * comb(b - 1, j) * (-1) ** j for j in range(b)}


def _exact_drop(baseline: tuple[int, int], now: tuple[int, int]) -> Fraction:
    """P(p_now < p_base) = ∫ f_base(x) F_now(x) dx, with rational arithmetic."""
    f = _beta_pdf(1 + baseline[0], 1 + baseline[1] - baseline[0])
    cdf = {k + 1: v / (k + 1) for k, v in _beta_pdf(1 + now[0], 1 + now[1] - now[0]).items()}
    return sum((x * y / (i + j + 1) for i, x in f.items() for j, y in cdf.items()), Fraction(0))


def test_drop_probability_is_exact() -> None:
    # worked with rational arithmetic: 9/10 → 3/10 is 265/266, 9/10 → 8/10 is 94/133
    assert _exact_drop((9, 10), (3, 10)) == Fraction(265, 266)
    assert _exact_drop((9, 10), (8, 10)) == Fraction(94, 133)
    assert drop_probability((9, 10), (3, 10)) == pytest.approx(265 / 266, abs=1e-12)
    assert drop_probability((9, 10), (8, 10)) == pytest.approx(94 / 133, abs=1e-12)
    assert drop_probability((5, 10), (5, 10)) == pytest.approx(0.5, abs=1e-12)
    # a Jeffreys prior (α = 0.5) is integrated numerically; equal counts are still 1/2
    assert drop_probability((5, 10), (5, 10), prior=(0.5, 0.5)) == pytest.approx(0.5, abs=1e-7)


def _report(passes_per_case: dict[str, int], attempts: int = 10) -> Any:
    """A suite run whose case c passes its first passes_per_case[c] attempts."""
    seen: dict[str, int] = {}

    def agent(question: str) -> Trace:
        seen[question] = seen.get(question, 0) + 1
        ok = seen[question] <= passes_per_case[question]
        from agenteval_core import AgentStep, ToolCall

        call = ToolCall(name="lookup" if ok else "search")
        return Trace.from_steps(question, [AgentStep(tool_calls=[call], output="done")])

    cases = [EvalCase(id=q, input=q, expected_tool_calls=["lookup"]) for q in passes_per_case]
    suite = EvalSuite("base").add_cases(cases).add_evaluators("tool_call_accuracy")
    return suite.run(agent, k=1, attempts=attempts, concurrency=1)


def test_a_real_drop_regresses_and_a_flaky_one_does_not(tmp_path: Path) -> None:
    baseline = _report({"fell": 9, "flaky": 9})
    path = tmp_path / "base.json"
    baseline.save(path)
    loaded = type(baseline).load(path)
    now = _report({"fell": 3, "flaky": 8})
    comparison = compare_to_baseline(now, loaded)
    by_case = {case.case_id: case for case in comparison.cases}
    assert by_case["fell"].drop_probability == pytest.approx(265 / 266)
    assert by_case["flaky"].drop_probability == pytest.approx(94 / 133)
    assert [case.case_id for case in comparison.regressions] == ["fell"]
    assert (by_case["fell"].baseline_passes, by_case["fell"].passes) == (9, 3)


def _lookups(
    cases: list[EvalCase], passes: dict[str, int], *evaluators: Metric | str
) -> SuiteReport:
    """10 attempts of each case: the agent calls lookup on the first passes[input] attempts
    of an input, search on the others."""
    seen: Counter[str] = Counter()

    def agent(question: str) -> Trace:
        seen[question] += 1
        call = ToolCall(name="lookup" if seen[question] <= passes[question] else "search")
        return Trace.from_steps(question, [AgentStep(tool_calls=[call], output="done")])

    suite = EvalSuite("lookups").add_cases(cases).add_evaluators(*evaluators)
    return suite.run(agent, k=1, attempts=10, concurrency=1)


def test_a_case_checked_otherwise_than_in_the_baseline_is_not_compared(tmp_path: Path) -> None:
    # the same agent, 9 of 10 lookups before and after: a case given another expectation
    # (the file is meant to be edited) failed 9 of 10 now and was "REGRESSED" (P(drop)
    # 0.999), a drop of the check, not of the agent; and a check relaxed since the baseline
    # could hide a drop as well
    lookup = ["lookup"]
    before = [
        EvalCase(id="same", input="a", expected_tool_calls=lookup),
        EvalCase(id="expect", input="b", expected_tool_calls=lookup),
        EvalCase(id="asked", input="c", expected_tool_calls=lookup),
        EvalCase(id="checked", input="d", expected_tool_calls=lookup),
    ]
    path = tmp_path / "base.json"
    _lookups(before, dict.fromkeys("abcd", 9), "tool_call_accuracy").save(path)
    baseline = SuiteReport.load(path)
    now = [
        before[0],
        before[1].model_copy(update={"expected_tool_calls": [ExpectedToolCall(name="search")]}),
        before[2].model_copy(update={"input": "c, quickly"}),
        before[3].model_copy(update={"metrics": ["tool_call_loops"]}),
    ]
    report = _lookups(now, {"a": 3, "b": 9, "c, quickly": 9, "d": 9}, "tool_call_accuracy")
    comparison = compare_to_baseline(report, baseline)
    by_case = {case.case_id: case for case in comparison.cases}
    assert {case: by_case[case].checks_changed for case in by_case} == {
        "same": [],
        "expect": ["expected_tool_calls changed"],
        "asked": ["input changed"],
        "checked": ["tool_call_loops added"],
    }
    assert (by_case["expect"].passes, by_case["expect"].drop_probability) == (
        1,
        pytest.approx(drop_probability((9, 10), (1, 10))),
    )
    assert by_case["expect"].drop_probability > 0.999 and not by_case["expect"].regressed
    assert [case.case_id for case in comparison.regressions] == ["same"]
    assert [case.case_id for case in comparison.rechecked] == ["expect", "asked", "checked"]
    # a report saved before reports kept definitions: its metrics and input still compare
    older = baseline.model_copy(
        update={"cases": [c.model_copy(update={"definition": None}) for c in baseline.cases]}
    )
    assert [case.checks_changed for case in compare_to_baseline(report, older).cases] == [
        [],
        [],
        ["input changed"],
        ["tool_call_loops added"],
    ]


def test_a_metric_of_another_version_or_threshold_is_another_check() -> None:
    # a metric whose scoring changed says so by its version (see "Writing a metric"); a
    # baseline scored by the earlier one, or at another threshold, measured another rate
    class Revised(ToolCallAccuracy):
        version = "2"

    cases = [EvalCase(id="c", input="a", expected_tool_calls=["lookup"])]
    baseline = _lookups(cases, {"a": 9}, "tool_call_accuracy")
    report = _lookups(cases, {"a": 9}, Revised(threshold=0.8), "tool_call_loops")
    (case,) = compare_to_baseline(report, baseline).cases
    assert case.checks_changed == [
        "tool_call_loops added",
        "tool_call_accuracy version 1 → 2",
        "tool_call_accuracy threshold 0.7 → 0.8",
    ]
    (case,) = compare_to_baseline(baseline, report).cases
    assert case.checks_changed == [
        "tool_call_loops removed",
        "tool_call_accuracy version 2 → 1",
        "tool_call_accuracy threshold 0.8 → 0.7",
    ]
    # an agent that raised on every attempt scored nothing: its checks are unknown, so
    # only the definitions compare
    raised = baseline.model_copy(
        update={
            "cases": [
                baseline.cases[0].model_copy(
                    update={
                        "runs": [
                            r.model_copy(update={"results": []}) for r in baseline.cases[0].runs
                        ]
                    }
                )
            ]
        }
    )
    assert compare_to_baseline(report, raised).cases[0].checks_changed == []


def test_a_failed_gate_keeps_the_baseline_it_would_save_over(tmp_path: Path) -> None:
    # `--baseline b.json --save b.json` keeps a rolling baseline: a failing run replaced it,
    # and the job's retry compared the broken agent with itself (0/5 against 0/5) and passed
    agents = tmp_path / "agents.py"
    agents.write_text(
        "import os\n"
        "from agenteval_core import AgentStep, ToolCall, Trace\n\n"
        "def run(question):\n"
        "    error = os.environ.get('BROKEN') and '503 Service Unavailable'\n"
        "    call = ToolCall(name='lookup', arguments={'q': question}, result='ok', error=error or None)\n"
        "    return Trace.from_steps(question, [AgentStep(tool_calls=[call])], output='done')\n"
    )
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        '{"agenteval_case": 1, "id": "c1", "input": "find it", "metrics": ["tool_failures"]}\n'
    )
    rolling = tmp_path / "baseline.json"
    gate = ["suite", str(cases), "--agent", f"{agents}:run", "--attempts", "5"]
    gate += ["--baseline", str(rolling), "--save", str(rolling)]
    runner = CliRunner()
    assert runner.invoke(cli, [*gate[:6], "--save", str(rolling)]).exit_code == 0
    saved = rolling.read_bytes()
    for _ in range(2):  # the failing run, then its retry
        failed = runner.invoke(cli, gate, env={"BROKEN": "1"})
        assert failed.exit_code == 1
        assert "│ c1   │ 5/5      │ 0/5 │   0.999 │ REGRESSED │" in failed.output
        assert failed.output.endswith(
            f"the gate failed: {rolling} is kept as the baseline (replaced by this run, it "
            f"would pass the same agent on a retry)\nreport saved to "
            f"{tmp_path / 'baseline.failed.json'}\nagenteval: error: 1 case(s) regressed: c1\n"
        )
        assert rolling.read_bytes() == saved
    assert SuiteReport.load(tmp_path / "baseline.failed.json").cases[0].passes == 0
    # a gate that passes rolls the baseline on
    passed = runner.invoke(cli, gate)
    assert passed.exit_code == 0 and f"report saved to {rolling}\n" in passed.output
    assert SuiteReport.load(rolling).cases[0].passes == 5 and rolling.read_bytes() != saved


def test_the_gate_judges_an_edited_case_as_a_new_one(tmp_path: Path) -> None:
    # the regression workflow: save a baseline, then give a case the trajectory it must
    # follow; the same agent was failed as "1 case(s) regressed"
    agents = tmp_path / "agents.py"
    agents.write_text(
        "from agenteval_core import AgentStep, ToolCall, Trace\n\n"
        "def run(question):\n"
        "    call = ToolCall(name='lookup', arguments={'q': question}, result='ok')\n"
        "    return Trace.from_steps(question, [AgentStep(tool_calls=[call])], output='done')\n"
    )
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        '{"agenteval_case": 1, "id": "c1", "input": "find it", "metrics": ["tool_failures"]}\n'
    )
    runner = CliRunner()
    base = tmp_path / "base.json"
    agent = ["--agent", f"{agents}:run", "--attempts", "5"]
    saved = runner.invoke(cli, ["suite", str(cases), *agent, "--save", str(base)])
    assert saved.exit_code == 0, saved.output
    cases.write_text(
        '{"agenteval_case": 1, "id": "c1", "input": "find it", "metrics": '
        '["tool_failures", "trajectory_match"], "expected_tool_calls": [{"name": "search"}]}\n'
    )
    gated = runner.invoke(
        cli, ["suite", str(cases), *agent, "--baseline", str(base)], env={"COLUMNS": "200"}
    )
    assert gated.exit_code == 1
    assert "│ c1   │ 5/5      │ 0/5 │       - │ checks changed │" in gated.output
    assert (
        "c1: not compared, checked otherwise than in the baseline (trajectory_match added; "
        "expected_tool_calls changed); judged as a new case"
    ) in gated.output
    assert "REGRESSED" not in gated.output and "case(s) regressed" not in gated.output
    assert gated.output.endswith(
        "agenteval: error: 1 of 1 case(s) the baseline cannot judge (new or checked otherwise) "
        "failed an attempt (c1); with no --min-pass-at-k or --min-pass-pow-k, every attempt "
        "must pass\n"
    )


def _console_blocks(page: Path) -> list[list[str]]:
    blocks = re.findall(r"```console\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def _run_as_written(line: str, directory: Path) -> subprocess.CompletedProcess[str]:
    """One documented command: `python` is this interpreter, `agenteval` its console
    script, leading NAME=value words are environment variables."""
    words = shlex.split(line)
    env = {**os.environ, "COLUMNS": "200"}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    program = {
        "python": [sys.executable],
        "agenteval": [sys.executable, "-m", "agenteval_core.cli"],
    }
    command = program[words[0]] + words[1:]
    return subprocess.run(
        command, cwd=directory, capture_output=True, text=True, timeout=300, env=env
    )


def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    walkthrough, broken = _console_blocks(HERE.parent / "docs" / "regressions.md")
    (tmp_path / "examples").symlink_to(HERE.parent / "examples")
    for line in walkthrough:
        done = _run_as_written(line, tmp_path)
        assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
    cases = [json.loads(line) for line in (tmp_path / "cases.jsonl").read_text().splitlines()]
    assert [(c["input"], c["count"], c["metrics"]) for c in cases] == [
        ("Book a hotel in Rome", 2, ["tool_failures", "tool_constraints"]),
        ("Find a free room in Paris", 1, ["tool_failures", "tool_call_loops", "tool_constraints"]),
    ]
    assert cases[0]["conversation"][0]["input"] == "Book a hotel in Lisbon"
    # the agent as it was when the failures were captured: the gate closes
    [line] = broken
    done = _run_as_written(line, tmp_path)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "agenteval: error: 2 case(s) regressed" in done.stderr
    assert "recurring:" in done.stdout and "the run did not complete (stopped)" in done.stdout


def test_the_pytest_recipe_parametrizes_one_test_per_case(tmp_path: Path, cases_file: Path) -> None:
    page = (HERE.parent / "docs" / "regressions.md").read_text(encoding="utf-8")
    [recipe] = [b for b in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "def test_" in b]
    recipe = recipe.replace(
        "from my_agent import run_agent", "from hotel_agent import fixed_agent as run_agent"
    )
    recipe = recipe.replace('"cases.jsonl"', repr(str(cases_file)))
    (tmp_path / "test_recipe.py").write_text(recipe, encoding="utf-8")
    (tmp_path / "hotel_agent.py").write_text((HERE / "hotel_agent.py").read_text(encoding="utf-8"))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "test_recipe.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "3 passed" in done.stdout
    assert "test_regression[book-a-hotel-in-rome-" in done.stdout


def test_a_saved_report_from_a_newer_agenteval_is_refused(tmp_path: Path) -> None:
    report = _report({"a": 1}, attempts=1)
    path = tmp_path / "base.json"
    report.save(path)
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "format_version": 2}))
    with pytest.raises(CaptureError, match="suite report format 2 is newer than this agenteval"):
        type(report).load(path)
    path.write_text('{"cases": 3}')
    with pytest.raises(CaptureError, match="not a suite report"):
        type(report).load(path)


def test_a_run_whose_end_was_not_seen_is_neither_a_case_nor_a_reference(tmp_path: Path) -> None:
    # an unfinished run (the evaluator closed while it ran) has no known outcome: it is no
    # failure to make a case of, and no later success whose trajectory a case should follow
    failed = Trace(
        id="t1",
        input="Book a hotel in Rome",
        status=RunStatus.ERROR,
        status_reason="RuntimeError: booking service down",
        error="RuntimeError: booking service down",
    )
    unfinished = Trace(
        id="t2",
        input="Book a hotel in Rome",
        status=RunStatus.UNFINISHED,
        status_reason="still running when the evaluator closed: recorded as it stood",
        spans=[
            Span(kind=SpanKind.TOOL, name="book_hotel", tool_call=ToolCall(
                name="book_hotel", arguments={"city": "Rome"},
                error="still running when the evaluator closed: recorded as it stood",
            ))
        ],
    )  # fmt: skip
    capture = tmp_path / "c.jsonl"
    with CaptureWriter(capture) as writer:
        writer.write(failed)
        writer.write(unfinished)
    [case] = cases_from_capture(capture, metrics=["tool_failures"])
    assert (case.count, case.provenance.trace_ids) == (1, ["t1"])
    assert (case.provenance.status, case.provenance.reference_trace_id) == ("error", None)
    assert case.expected_tool_calls is None


def _refund_agent(payments_up: bool) -> Any:
    """A LangGraph agent that refunds A-1 once a reviewer approves the call
    (``HumanInTheLoopMiddleware``); the payments API it calls is down unless
    ``payments_up``."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        if not payments_up:
            raise ConnectionError("payments API down")
        return f"refunded {amount} on {order_id}"

    def reply(messages: Any) -> AIMessage:
        if messages[-1].type == "tool":
            return AIMessage("Refunded." if "refunded" in str(messages[-1].content) else "Failed.")
        return AIMessage("", tool_calls=[tool_call("refund", "c1", order_id="A-1", amount=40.0)])

    return create_agent(
        ScriptedChatModel(reply=reply),
        tools=[refund],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
        checkpointer=InMemorySaver(),
    )


def attempt_capture(directory: Path) -> Path:
    """A capture file of its own for one attempt of a suite's agent, in the test's directory
    (the default, ``agenteval-capture.jsonl`` in the working directory, is shared by every
    test running at once, and the last trace in it may be another test's)."""
    return directory / f"attempt-{uuid.uuid4().hex}.jsonl"


def _run_reviewed(
    evaluator: OnlineEvaluator, request: str, answers: list[Any], thread: str, payments_up: bool
) -> None:
    """Ask the refund agent ``request`` and resume it with each answer as it pauses."""
    from langgraph.types import Command

    agent = _refund_agent(payments_up)
    config: Any = {
        "callbacks": [AgentEvalCallbackHandler(evaluator)],
        "configurable": {"thread_id": thread},
    }
    try:
        agent.invoke({"messages": [("user", request)]}, config=config)
        for answer in answers:
            agent.invoke(Command(resume=answer), config=config)
    except ConnectionError:
        pass  # the run failed: its trace says so


def _fails_until_payments_are_up(
    case: RegressionCase, agent: Callable[[bool], Any], answer: str
) -> EvalSuite:
    """A suite of ``case`` fails ``agent(payments_up=False)`` (each attempt incomplete,
    with the payments API's error) and passes ``agent(payments_up=True)``, which answers
    ``answer``."""
    suite = EvalSuite("refunds").add_cases([case.to_eval_case()])
    broken = suite.run(agent(False), k=1, attempts=2, progress=False)
    assert [(r.outcome, r.status, r.reason) for r in broken.cases[0].runs] == [
        (
            "incomplete",
            "error",
            "the run did not complete (error): ConnectionError: payments API down",
        )
    ] * 2
    fixed = suite.run(agent(True), k=1, attempts=2, progress=False)
    assert [(r.outcome, r.output) for r in fixed.cases[0].runs] == [("passed", answer)] * 2
    return suite


def test_a_run_resumed_after_a_humans_answer_is_a_case_that_resumes_with_it(
    tmp_path: Path,
) -> None:
    # a refund a reviewer approved failed once the run resumed. Its case held the paused
    # run as an earlier turn (the same request, no answer) and not the approval: the
    # suite's agent paused at the review on every attempt, and the failure after the
    # approval never ran again
    approve = {"decisions": [{"type": "approve"}]}
    capture = tmp_path / "capture.jsonl"
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        _run_reviewed(evaluator, "Refund A-1", [approve], "t-1", payments_up=False)
    paused, failed = read_capture(capture)
    [case] = cases_from_capture(capture, metrics=["tool_failures"])
    assert (case.input, case.resume, case.conversation, case.tools_must_succeed) == (
        "Refund A-1",
        [approve],
        None,  # the paused run is the same turn, not one before it
        ["refund"],
    )
    assert (case.provenance.trace_ids, case.provenance.turns_left_out) == ([failed.id], 0)
    listed = CliRunner().invoke(
        cli,
        ["cases", str(capture), "--metrics", "tool_failures", "-o", str(tmp_path / "c.jsonl")],
        env={"COLUMNS": "200"},
    )
    assert listed.exit_code == 0, listed.output
    assert "│ Refund A-1; answered: {'decisions': [{'type': 'approve'}]} │" in listed.output
    assert (
        paused.status is RunStatus.INTERRUPTED and failed.metadata["resumes_trace_id"] == paused.id
    )

    def agent(payments_up: bool) -> Any:
        def run(request: str, resume: list[Any]) -> Trace:
            with OnlineEvaluator(capture=attempt_capture(tmp_path), log=False) as evaluator:
                _run_reviewed(evaluator, request, resume, "suite", payments_up)
                return evaluator.captured()[-1]  # the run resumed last

        return run

    suite = _fails_until_payments_are_up(case, agent, "Refunded.")

    # an agent function that cannot be given the answers is not run: it would stop at the
    # review, where the captured run went on
    def asked_alone(request: str) -> Trace:
        raise AssertionError("not to be run")

    [alone] = suite.run(asked_alone, k=1, attempts=1, progress=False).cases[0].runs
    assert (alone.outcome, alone.passed) == ("out_of_context", False)
    assert alone.reason.startswith(
        "not run: the case's run went on from a human's answers (the case's `resume`: "
        "given at a pause, or while it ran)"
    )


def _parallel_refunds_agent(payments_up: bool) -> Any:
    """A LangGraph agent that refunds A-1 and B-2 at once, each in a tool that asks a
    reviewer first (``interrupt()``: two interrupts, answered together by id); the payments
    API is down unless ``payments_up``."""
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import interrupt

    @tool
    def refund(order_id: str) -> str:
        """Refund an order once a reviewer approves it."""
        if interrupt(f"Approve the refund of {order_id}?") != "yes":
            return f"refund of {order_id} rejected"
        if not payments_up:
            raise ConnectionError("payments API down")
        return f"refunded {order_id}"

    def reply(messages: Any) -> AIMessage:
        if messages[-1].type == "tool":
            return AIMessage("; ".join(str(m.content) for m in messages if m.type == "tool"))
        return AIMessage(
            "",
            tool_calls=[
                tool_call("refund", "c1", order_id="A-1"),
                tool_call("refund", "c2", order_id="B-2"),
            ],
        )

    return create_agent(
        ScriptedChatModel(reply=reply), tools=[refund], checkpointer=InMemorySaver()
    )


def test_interrupts_answered_at_once_by_id_are_a_case_a_new_run_can_be_given(
    tmp_path: Path,
) -> None:
    # a reviewer approved A-1 and rejected B-2, both asked at once and answered by interrupt
    # id; the approved refund failed, twice (two users). The case kept the ids as its
    # answer, and a new run's interrupts have new ids: every attempt paused again at the
    # review, fixed agent or not; and the two failures, answered alike, were two cases
    from agenteval_langchain import resume_command
    from langgraph.types import Command

    capture = tmp_path / "capture.jsonl"
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        agent = _parallel_refunds_agent(payments_up=False)
        for thread in ("t-1", "t-2"):
            config: Any = {
                "callbacks": [AgentEvalCallbackHandler(evaluator)],
                "configurable": {"thread_id": thread},
            }
            paused_at = agent.invoke({"messages": [("user", "Refund A-1 and B-2")]}, config=config)
            ids = {i.value: i.id for i in paused_at["__interrupt__"]}
            answers = {  # B-2's first: the answers are matched by question, not by place
                ids["Approve the refund of B-2?"]: "no",
                ids["Approve the refund of A-1?"]: "yes",
            }
            with pytest.raises(ConnectionError):
                agent.invoke(Command(resume=answers), config=config)
    [case] = cases_from_capture(capture, metrics=["tool_failures"])
    assert (case.input, case.tools_must_succeed, case.provenance.status, case.count) == (
        "Refund A-1 and B-2",
        ["refund"],
        "error",
        2,
    )
    assert case.resume == [
        {
            "answers_by_question": [
                {"question": "Approve the refund of B-2?", "answer": "no"},
                {"question": "Approve the refund of A-1?", "answer": "yes"},
            ]
        }
    ]
    cases_file = tmp_path / "cases.jsonl"
    listed = CliRunner().invoke(
        cli,
        ["cases", str(capture), "--metrics", "tool_failures", "-o", str(cases_file)],
        env={"COLUMNS": "200"},
    )
    assert listed.exit_code == 0, listed.output
    assert (  # each question beside its answer, never the interrupts' ids
        "│ Refund A-1 and B-2; answered: Approve the refund of B-2? no, Approve the … │"
        in listed.output
    )
    [read] = read_cases(cases_file)
    assert read.resume == case.resume
    # a hand-edited answer by question that is not one is refused where it is
    line = json.loads(cases_file.read_text())
    line["resume"] = [{"answers_by_question": [{"question": "Approve?"}]}]
    cases_file.write_text(json.dumps(line) + "\n")
    with pytest.raises(CaptureError) as refused:
        read_cases(cases_file)
    assert str(refused.value).startswith(f"{cases_file}:1: resume: ")
    assert 'holds a list of {"question": ..., "answer": ...} objects' in str(refused.value)

    def agent_fn(payments_up: bool) -> Any:
        def run(request: str, resume: list[Any]) -> Trace:
            with OnlineEvaluator(capture=attempt_capture(tmp_path), log=False) as evaluator:
                agent = _parallel_refunds_agent(payments_up)
                config: Any = {
                    "callbacks": [AgentEvalCallbackHandler(evaluator)],
                    "configurable": {"thread_id": str(uuid.uuid4())},
                }
                with contextlib.suppress(ConnectionError):  # the run failed: its trace says so
                    result = agent.invoke({"messages": [("user", request)]}, config=config)
                    for answer in resume:
                        result = agent.invoke(resume_command(answer, result), config=config)
                return evaluator.captured()[-1]

        return run

    _fails_until_payments_are_up(case, agent_fn, "refunded A-1; refund of B-2 rejected")


def test_resume_command_answers_the_interrupts_that_ask_the_cases_questions() -> None:
    from agenteval_langchain import resume_command
    from langgraph.types import Interrupt

    given = {
        "answers_by_question": [
            {"question": "Approve?", "answer": "yes"},
            {"question": {"amount": 40}, "answer": "ok"},
            {"question": "Approve?", "answer": "no"},
        ]
    }
    waiting = [
        Interrupt(value="Approve?", id="i1"),
        Interrupt(value="Anything else?", id="i2"),
        Interrupt(value={"amount": 40}, id="i3"),
        Interrupt(value="Approve?", id="i4"),
    ]
    # a question asked twice is answered in order; one not in the case is left waiting
    expected = {"i1": "yes", "i3": "ok", "i4": "no"}
    assert resume_command(given, {"__interrupt__": waiting}).resume == expected
    assert resume_command(given, waiting).resume == expected
    # an answer the captured run was resumed with as it is goes as it is
    decisions = {"decisions": [{"type": "approve"}]}
    assert resume_command(decisions, {"__interrupt__": waiting}).resume == decisions
    with pytest.raises(ValueError, match=r"none of the questions answered \(\['Approve\?'"):
        resume_command(given, [Interrupt(value="Which card?", id="i9")])
    with pytest.raises(ValueError, match=r"none of the questions answered .* \(\[\]\)"):
        resume_command(given, {"messages": []})  # the run did not pause
    with pytest.raises(ValueError, match=re.escape('a list of {"question": ..., "answer": ...}')):
        resume_command({"answers_by_question": ["yes"]}, waiting)


def test_answers_across_pauses_are_kept_in_order_and_a_paused_run_is_no_reference(
    tmp_path: Path,
) -> None:
    # a run approved, paused again for the amount, then resumed and failed: its case goes
    # on from both answers. A paused run of a failed request had been taken for a later
    # success, and its calls so far for the trajectory the case had to follow
    def run(trace_id: str, status: RunStatus, *calls: ToolCall, **fields: Any) -> Trace:
        steps = [AgentStep(tool_calls=list(calls))] if calls else []
        fields.setdefault("session_id", trace_id)
        return Trace.from_steps(
            fields.pop("request", "Refund A-1"), steps, id=trace_id, status=status, **fields
        )

    def resumed(
        trace_id: str, status: RunStatus, answer: str, paused: str, *calls: ToolCall
    ) -> Trace:
        session = paused.rstrip("0123456789")
        resumes = {"resume": answer, "resumes_trace_id": paused}
        return run(trace_id, status, *calls, session_id=session, metadata=resumes)

    search = ToolCall(name="find_order", arguments={"id": "A-1"}, result="A-1, 40 EUR")
    refund = ToolCall(name="refund", arguments={"id": "A-1"}, error="payments API down")
    refunded = ToolCall(name="refund", arguments={"id": "A-1"}, result="refunded")
    answered = {"human_answers": ["no", "20 EUR"]}
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        for trace in (
            _turn("s", "Hi", "Hello, how can I help?"),
            run("s1", RunStatus.INTERRUPTED, search, session_id="s"),
            resumed("s2", RunStatus.INTERRUPTED, "approve", "s1"),
            resumed("s3", RunStatus.ERROR, "40 EUR", "s2", refund),
            run("ok", RunStatus.OK, search, refunded),  # answered by no human: no reference
            # a request that failed, then paused before its calls: no success yet
            run("failed", RunStatus.ERROR, refund, request="Refund B-2"),
            run("paused", RunStatus.INTERRUPTED, search, request="Refund B-2"),
            # answered while it ran (a CrewAI flow's reviewer), then failed
            run("asked", RunStatus.ERROR, refund, request="Refund C-3", metadata=answered),
        ):
            writer.write(trace)
    case, failed, asked = cases_from_capture(capture, metrics=["tool_failures"])
    assert (asked.input, asked.resume) == ("Refund C-3", ["no", "20 EUR"])
    assert (case.resume, case.conversation, case.provenance.turns_left_out) == (
        ["approve", "40 EUR"],
        [{"input": "Hi", "output": "Hello, how can I help?"}],
        0,
    )
    for each in (case, failed):
        assert (each.provenance.reference_trace_id, each.expected_tool_calls) == (None, None)
    # the same answers given again, and the run went well: the case's reference
    with CaptureWriter(capture) as writer:
        writer.write(run("t1", RunStatus.INTERRUPTED, search, session_id="t"))
        writer.write(resumed("t2", RunStatus.INTERRUPTED, "approve", "t1"))
        writer.write(resumed("t3", RunStatus.OK, "40 EUR", "t2", refunded))
    case, _, _ = cases_from_capture(capture, metrics=["tool_failures"])
    assert case.provenance.reference_trace_id == "t3"
    assert case.expected_tool_calls == [ExpectedToolCall(name="refund", arguments={"id": "A-1"})]


def test_a_run_resumed_from_its_checkpoint_after_a_failure_is_no_reference(
    tmp_path: Path,
) -> None:
    # a booking failed, and the run was resumed from its checkpoint (LangGraph's durable
    # execution) and booked. The resumed run holds only the calls after the checkpoint:
    # taken for the case's reference, it made the fixed agent's search an extra call, and
    # trajectory_match failed the fix (0.5)
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    down = {"booking": True}

    @tool
    def search_hotels(city: str) -> str:
        """Hotels with rooms free in a city."""
        return f"Hotel {city} Central"

    @tool
    def book_hotel(hotel: str) -> str:
        """Book a room."""
        if down["booking"]:
            down["booking"] = False  # back for the run that resumes
            raise ConnectionError("booking service down")
        return f"booked {hotel}"

    def reply(messages: Any) -> AIMessage:
        last = messages[-1]
        if last.type == "human":
            return AIMessage("", tool_calls=[tool_call("search_hotels", "s1", city="Rome")])
        if last.name == "search_hotels":
            return AIMessage("", tool_calls=[tool_call("book_hotel", "b1", hotel=last.content)])
        return AIMessage(f"Done: {last.content}.")

    def agent(checkpointer: Any = None) -> Any:
        return create_agent(
            ScriptedChatModel(reply=reply),
            tools=[search_hotels, book_hotel],
            checkpointer=checkpointer,
        )

    capture = tmp_path / "capture.jsonl"
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        booking = agent(InMemorySaver())
        config: Any = {
            "callbacks": [AgentEvalCallbackHandler(evaluator)],
            "configurable": {"thread_id": "t-1"},
        }
        with pytest.raises(ConnectionError):
            booking.invoke({"messages": [("user", "Book a hotel in Rome")]}, config)
        booking.invoke(None, config)  # from the checkpoint, where it failed
    failed, resumed = read_capture(capture)
    assert (failed.status, resumed.status, resumed.metadata["resumes_trace_id"]) == (
        RunStatus.ERROR,
        RunStatus.OK,
        failed.id,
    )
    assert [c.name for c in resumed.tool_calls()] == ["book_hotel"]  # after the checkpoint
    [case] = cases_from_capture(capture, metrics=["tool_failures"])
    assert (case.provenance.reference_trace_id, case.expected_tool_calls) == (None, None)
    assert case.metrics == ["tool_failures", "tool_constraints"]

    def fixed(request: str) -> Trace:
        with OnlineEvaluator(capture=attempt_capture(tmp_path), log=False) as evaluator:
            agent().invoke(
                {"messages": [("user", request)]},
                {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
            )
            return evaluator.captured()[-1]

    report = EvalSuite("bookings").add_cases([case.to_eval_case()]).run(fixed, progress=False)
    assert [(r.outcome, r.output) for r in report.cases[0].runs] == [
        ("passed", "Done: booked Hotel Rome Central.")
    ]
