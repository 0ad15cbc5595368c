"""tool_failures: failed tool calls and recovery, scored without a judge, and the session
signal it feeds."""

from __future__ import annotations

from pathlib import Path

import hotel_agent
import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from agenteval_core import (
    AGENT_NAME,
    AgentStep,
    CallbackSink,
    MetricResult,
    OnlineEvaluator,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    Trace,
    agent_reliability,
    default_metric_names,
    replay,
)
from agenteval_core.metrics import ToolFailures


def run_of(calls: list[ToolCall], answer: str | None = "done", **fields: object) -> Trace:
    """A run whose model asked for ``calls`` one at a time, then answered."""
    steps = [AgentStep(tool_calls=[call]) for call in calls]
    return Trace.from_steps("q", [*steps, AgentStep(output=answer)], **fields)


OK = ToolCall(name="book", arguments={"city": "Rome"}, result="booked")
DOWN = ToolCall(name="book", arguments={"city": "Rome"}, error="503 Service Unavailable")
MISSING = ToolCall(name="lookup", arguments={"order_id": "B-2"}, error="KeyError: 'B-2'")


@pytest.mark.parametrize(
    ("calls", "answer", "score", "unrecovered"),
    [
        ([OK], "Booked.", 1.0, 0),
        # one failure, owned up to: risk 0.5 over one call
        ([DOWN], "Sorry, the booking service is unavailable.", 0.5, 0),
        # one failure, ignored: the answer claims success, nothing followed
        ([DOWN], "Your hotel is booked.", 0.0, 1),
        # a retry of the same call that worked: recovered, 1 − 0.5 / 2
        ([DOWN, OK], "Booked.", 0.75, 0),
        # the same failing call twice, then silence: both unrecovered? the first was
        # followed only by the same failure, so neither recovered: 1 − (2 + 2) / 4
        ([DOWN, DOWN], "Booked.", 0.0, 2),
        # a different call after the failure recovers it: 1 − 0.5 / 2
        ([DOWN, ToolCall(name="book", arguments={"city": "Roma"}, result="ok")], "ok", 0.75, 0),
        # a result that reads as an error is a failure (as the judges' heuristic has it)
        ([ToolCall(name="book", result={"error": "no rooms"})], "Booked.", 0.0, 1),
        # a lookup of something that does not exist raised, and the answer says so: owned
        # up to (these read as a failure nobody reported)
        ([OK, MISSING], "A-1 shipped; B-2 not found.", 0.75, 0),
        ([MISSING], "Order B-2 does not exist.", 0.5, 0),
        ([MISSING], "There is no such order as B-2.", 0.5, 0),
        ([MISSING], "We have no record of order B-2.", 0.5, 0),
        ([MISSING], "Order B-2 shipped yesterday.", 0.0, 1),
        # an agent that owns up in its user's language (it was "not recovered": 0.0)
        ([DOWN], "Lo siento, no pude reservar el hotel: el servicio no está disponible.", 0.5, 0),
        ([DOWN], "Désolé, je n'ai pas pu réserver l'hôtel.", 0.5, 0),
        ([DOWN], "Leider konnte ich das Hotel nicht buchen.", 0.5, 0),
        ([DOWN], "Mi dispiace, non è stato possibile prenotare l'hotel.", 0.5, 0),
        ([DOWN], "Desculpe, não foi possível reservar o hotel.", 0.5, 0),
        ([DOWN], "Su hotel está reservado.", 0.0, 1),  # claims success: still unrecovered
        # and in the languages written without spaces, and Russian (each was 0.0)
        ([DOWN], "抱歉，预订服务暂时不可用，无法为您预订酒店。", 0.5, 0),
        ([DOWN], "申し訳ありませんが、ホテルを予約できませんでした。", 0.5, 0),
        ([DOWN], "죄송합니다. 호텔을 예약할 수 없습니다.", 0.5, 0),
        ([DOWN], "К сожалению, не удалось забронировать отель.", 0.5, 0),
        ([MISSING], "没有找到订单 B-2。", 0.5, 0),
        ([DOWN], "您的酒店已预订。", 0.0, 1),  # "your hotel is booked": unrecovered
        ([DOWN], "ホテルを予約しました。", 0.0, 1),
    ],
)
def test_scores_by_hand(calls: list[ToolCall], answer: str, score: float, unrecovered: int) -> None:
    result = ToolFailures().measure(run_of(calls, answer))
    assert result.score == pytest.approx(score)
    assert result.metadata["unrecovered"] == unrecovered
    assert result.metadata["failed"] == sum(c.failed for c in calls)
    assert result.success is (score >= 0.7)


def test_the_failed_calls_are_in_the_metadata() -> None:
    result = ToolFailures().measure(run_of([OK, DOWN], "Sorry, I could not book it."))
    assert result.metadata["failures"] == [
        {
            "index": 1,
            "name": "book",
            "arguments": {"city": "Rome"},
            "error": "503 Service Unavailable",
            "recovered": True,
        }
    ]
    assert result.reason == "1 of 2 tool calls failed (book), 0 not recovered"


def test_no_vacuous_pass_for_a_run_that_did_not_complete() -> None:
    assert ToolFailures().measure(run_of([], "hi")).score == 1.0
    stopped = ToolFailures().measure(run_of([], None, status=RunStatus.ERROR, error="boom"))
    assert stopped.skipped and "did not complete (error)" in stopped.reason
    # an apology in a run that did not complete recovers nothing
    errored = ToolFailures().measure(
        run_of([DOWN], "Sorry, unavailable.", status=RunStatus.ERROR, error="boom")
    )
    assert errored.score == 0.0


def _two_agents(other_starts: float, first_says: str = "R-9 is pending") -> Trace:
    """A run of two agents: the refunds agent (from 0 to 2 s) whose lookup at 1 s failed,
    and the orders agent, whose lookup starts at ``other_starts``."""

    def agent(name: str, start: float, end: float, output: str) -> Span:
        return Span(
            id=name,
            parent_id="root",
            kind=SpanKind.AGENT,
            name=name,
            start_time=start,
            end_time=end,
            output=output,
            attributes={AGENT_NAME: name},
        )

    def lookup(parent: str, start: float, call: ToolCall) -> list[Span]:
        """The model call of ``parent`` that asks for ``call``, then the call."""
        named = {AGENT_NAME: parent}
        asking = Span(
            parent_id=parent,
            kind=SpanKind.LLM,
            name="m",
            start_time=start - 0.1,
            requested_tool_calls=[call],
            attributes=named,
        )
        kind, name = SpanKind.TOOL, call.name
        ran = Span(parent_id=parent, kind=kind, name=name, start_time=start, tool_call=call)
        return [asking, ran.model_copy(update={"attributes": named})]

    refund = ToolCall(id="c1", name="refund", arguments={"id": "R-9"}, error="timed out")
    order = ToolCall(id="c2", name="order", arguments={"id": "A-1"}, result="ok")
    spans = [
        Span(id="root", kind=SpanKind.AGENT, name="crew", start_time=0.0, end_time=9.0),
        agent("refunds", 0.0, 2.0, first_says),
        agent("orders", 0.5, 8.0, "A-1 shipped"),
        *lookup("refunds", 1.0, refund),
        *lookup("orders", other_starts, order),
    ]
    spans.sort(key=lambda span: span.start_time or 0.0)
    return Trace(input="R-9 and A-1?", output="A-1 shipped; R-9 pending", spans=spans)


def test_a_call_of_another_agent_recovers_a_failure_only_after_it_was_handed_on() -> None:
    # another agent's call made while the failing agent still ran did not see the failure;
    # one made after that agent ended (its answer handed on, as to a supervisor) may have
    recovered, unrecovered = 1.0 - 1 / 4, 1.0 - 2 / 4
    beside = ToolFailures().measure(_two_agents(other_starts=1.5))
    assert (beside.score, beside.version) == (unrecovered, "3")  # version 1 said 0.75
    assert ToolFailures().measure(_two_agents(other_starts=3.0)).score == recovered
    # the failing agent's own answer says so: recovered, whatever the run's answer says
    owned_up = _two_agents(other_starts=1.5, first_says="Sorry, R-9 could not be found.")
    assert ToolFailures().measure(owned_up).score == recovered
    # an agent the failing one runs itself (a sub-agent, after the failure) saw it
    root, *rest = _two_agents(other_starts=3.0).spans
    made_by_root = [
        span.model_copy(update={"parent_id": "root"} if span.parent_id == "refunds" else {})
        for span in rest
        if span.id != "refunds"
    ]
    nested = Trace(input="R-9?", output="R-9 pending", spans=[root, *made_by_root])
    assert ToolFailures().measure(nested).score == recovered


def test_it_is_a_default_metric_and_a_session_signal() -> None:
    assert "tool_failures" in default_metric_names()
    # risks: coherence 1 − 0.6 = 0.4, tool failures 1 − 0.5 = 0.5 (weight 1.0) → step risk
    # 0.5; one trace: raw risk 0.9·0.5 + 0.1·0.5 = 0.5, score 0.5
    result = agent_reliability([{"coherence": 0.6, "tool_failures": 0.5}])
    assert result.score == pytest.approx(0.5)
    assert result.metadata["per_trace_signals"]["trace-0"] == {
        "coherence_risk": 0.4,
        "tool_failure_risk": 0.5,
        "step_risk": 0.5,
    }
    # with only PandaProbe's signals, nothing changes
    assert agent_reliability([{"coherence": 0.6}]).score == pytest.approx(0.6)


NO_JUDGE = ["coherence", "tool_call_loops", "tool_failures", "agent_reliability"]
"""Default metrics without a judge, less loop_detection: five answers that differ only in the
city read as a loop across turns, in both sessions alike, and would hide what is compared."""


def _session_reliability(tmp_path: Path, booking_fails: bool) -> MetricResult:
    """Five turns of a real LangGraph agent in one session, replayed without a judge."""
    capture = tmp_path / f"fails-{booking_fails}.jsonl"
    evaluator = OnlineEvaluator(capture=capture, log=False)
    handler = AgentEvalCallbackHandler(evaluator, session_id="s")
    for city in ("Rome", "Paris", "Oslo", "Lisbon", "Vienna"):
        hotel_agent.run(f"Book a hotel in {city}", handler, booking_fails=booking_fails)
    evaluator.close()
    sessions: list[list[MetricResult]] = []
    sink = CallbackSink(on_session=lambda _, results: sessions.append(results))
    replay(capture, NO_JUDGE, sinks=[sink])
    [results] = sessions
    return next(r for r in results if r.name == "agent_reliability")


def test_a_session_whose_tools_failed_scores_below_a_healthy_one(tmp_path: Path) -> None:
    healthy = _session_reliability(tmp_path, booking_fails=False)
    failing = _session_reliability(tmp_path, booking_fails=True)
    assert healthy.score is not None and failing.score is not None
    # every 503 turn: one failed call owned up to, risk 0.5, above each turn's coherence risk
    signals = failing.metadata["per_trace_signals"]
    assert {entry["tool_failure_risk"] for entry in signals.values()} == {0.5}
    assert all(entry["step_risk"] == 0.5 for entry in signals.values())
    # the failure signal is what lowered it: every turn's coherence risk is below 0.5
    assert all(entry["coherence_risk"] < 0.5 for entry in signals.values())
    assert failing.score == pytest.approx(0.5)
    assert healthy.score > failing.score
    assert {e["tool_failure_risk"] for e in healthy.metadata["per_trace_signals"].values()} == {0.0}


# --- what counts as a result that mentions an error -------------------------------------------

_words = st.sampled_from(["ok", "Error", "ERROR: no stock", "errors", "err or", "fine", "x" * 5])
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _words),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_words, inner, max_size=4)
    ),
    max_leaves=20,
)


def _reports(value: object, response: bool = True) -> bool:
    """The definition on these short texts: a text that says "error" (each is a status, none
    over 500 characters nor in a content field), an error report's key ("Error", "errors")
    that holds something (not None, False, 0, "", [] or {}), or the response's own "ok"
    that is false."""
    if isinstance(value, dict):
        return (response and value.get("ok") is False) or any(
            (k in ("Error", "errors") and v not in (None, False, 0, "", [], {}))
            or _reports(v, False)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return any(_reports(v, False) for v in value)
    return isinstance(value, str) and "error" in value.lower()


@settings(max_examples=300)
@given(result=_json)
def test_a_result_fails_when_it_reports_an_error_however_it_is_nested(result: object) -> None:
    call = ToolCall(name="lookup", arguments={}, result=result)
    assert call.failed == _reports(result)


DOCS = (
    "Errors and Exceptions. Until now error messages haven't been more than mentioned, but "
    "if you have tried out the examples you have probably seen some. There are two kinds of "
    "errors: syntax errors and exceptions. Syntax errors, also known as parsing errors, are "
    "perhaps the most common kind of complaint you get while you are still learning Python. "
    "Even if a statement is syntactically correct, it may cause an error when an attempt is "
    "made to execute it. Errors detected during execution are called exceptions and are not "
    "unconditionally fatal: you will soon learn how to handle them in Python programs."
)


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        # what a tool found, mentioning errors: data, not a failure of the call
        (DOCS, False),  # a documentation search's page (over 500 characters)
        ([{"title": "KeyError", "content": "Raised when a mapping key is not found."}], False),
        ({"service": "api", "error_rate": 0.02, "p99_ms": 120}, False),  # a figure
        ({"error_count": 3}, False),
        ({"hits": [{"snippet": "ERROR disk full on db-1"}]}, False),  # a log search's hit
        # how the call went: still failures
        ("Error: ToolException('503 Service Unavailable')", True),
        ("ValueError: no order B-2", True),
        ("Sorry, an error occurred while fetching the weather.", True),
        (
            'Traceback (most recent call last):\n  File "tool.py"\n' + "x" * 600 + "\nKeyError: 7",
            True,
        ),
        ({"status": "error", "message": "rate limited"}, True),
        ({"errorMessage": "Not authorised"}, True),
        ({"lastError": "disk full"}, True),
        ({"snippet": "Error: index unavailable"}, True),  # a content field that opens as one
    ],
)
def test_a_result_that_mentions_errors_is_not_one_that_reports_one(
    result: object, failed: bool
) -> None:
    # every call of a documentation or log search whose hits mention "error" failed, and a
    # coding assistant's one-call answer to "how do I handle errors?" scored tool_failures 0.0
    assert ToolCall(name="search", arguments={}, result=result).failed is failed
    run = run_of([ToolCall(name="search", arguments={"q": "errors"}, result=result)])
    assert ToolFailures().measure(run).score == (0.0 if failed else 1.0)


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        ({"order": {"id": "A-1", "status": "shipped"}, "error": None}, False),
        ({"data": {"id": 1}, "errors": []}, False),
        ({"ok": True, "Error": "", "error_count": 0}, False),
        ('{"order": {"id": "A-1"}, "error": null}', False),  # an API's JSON, returned as text
        ('[{"id": 1, "errors": []}, {"id": 2, "errors": []}]', False),
        ({"error": "order not found"}, True),
        ({"error": {"code": 404}}, True),
        ({"error": True}, True),
        ({"error_code": 404}, True),
        ('{"error": "order not found"}', True),
        ('{"error": null, "note": "ERROR in line 3"}', True),
        ("{not json: error}", True),
        ("Error: timed out", True),
    ],
)
def test_an_error_key_that_holds_nothing_is_no_error(result: object, failed: bool) -> None:
    # {"error": null} beside the data is how many APIs say all went well: every such call
    # counted as failed, and tool_failures failed runs whose tools all worked
    assert ToolCall(name="lookup", arguments={}, result=result).failed is failed
    run = run_of([ToolCall(name="lookup", arguments={"id": "A-1"}, result=result)])
    assert ToolFailures().measure(run).score == (0.0 if failed else 1.0)


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        # the response says the call failed, in a field made for it
        ({"isError": True, "content": [{"type": "text", "text": "Order 991 not found"}]}, True),
        ('{"isError": true, "content": [{"type": "text", "text": "no such order"}]}', True),
        ({"success": False, "message": "Order 991 not found"}, True),
        ({"ok": False, "description": "Bad Request: chat not found"}, True),  # Slack, Telegram
        ({"status_code": 404, "body": "Not Found"}, True),
        ({"statusCode": 500, "message": "Internal"}, True),
        ({"status": 429, "detail": "slow down"}, True),
        ({"exit_code": 2, "stdout": "", "stderr": "ls: cannot access 'x': No such file"}, True),
        ({"returncode": 128, "stderr": "fatal: not a git repository"}, True),
        # it worked, or what it returned is data
        ({"isError": False, "content": [{"type": "text", "text": "Order 991 shipped"}]}, False),
        ({"success": True, "status_code": 200, "data": []}, False),
        ({"exit_code": 1, "stdout": "", "stderr": ""}, False),  # grep that found nothing
        ({"returncode": 0, "stderr": "warning: LF will be replaced by CRLF"}, False),
        ([{"build": 7, "success": False}, {"build": 8, "success": True}], False),
        ('{"builds": [{"id": 7, "ok": false}]}', False),
        ({"job": "nightly", "status": "failed"}, False),  # a job's state, reported
        ({"status": 200, "items": 3}, False),
    ],
)
def test_a_response_that_says_the_call_failed_is_a_failed_call(
    result: object, failed: bool
) -> None:
    # MCP's isError, ok/success false, an HTTP status of 404 and a shell command that exited
    # 2 with its reason on stderr: every one of these passed tool_failures as a call that
    # worked (none says "error")
    assert ToolCall(name="lookup", arguments={}, result=result).failed is failed
    run = run_of([ToolCall(name="lookup", arguments={"id": "991"}, result=result)])
    assert ToolFailures().measure(run).score == (0.0 if failed else 1.0)


NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad "
    "Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>"
)
GOOGLE_404 = (
    "<!DOCTYPE html><html lang=en><meta charset=utf-8><title>Error 404 (Not Found)!!1</title>"
    f"<style>{'*{margin:0;padding:0}' * 60}</style><p><b>404.</b> That's an error.<p>The "
    "requested URL was not found on this server. That's all we know."
)
TUTORIAL = (
    "<!DOCTYPE html><html><head><title>Error handling in Python - Tutorial</title></head>"
    f"<body>{'Errors are raised when something goes wrong. ' * 20}</body></html>"
)


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        # reports of a failure that never say "error": each passed as a call that worked
        ("404 Not Found", True),  # a fetch tool's response text
        ("HTTP/1.1 403 Forbidden", True),
        ("HTTP 429", True),
        ("503 Service Unavailable", True),
        ("Request failed with status code 404", True),  # axios, a JavaScript tool's message
        ("Exception: quota exhausted", True),
        ("requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='api.x.com')", True),
        ('Traceback (most recent call last):\n  File "tool.py"\nKeyboardInterrupt', True),
        ("fatal: not a git repository", True),
        ({"message": "404 Not Found"}, True),
        # a server's error page, as a fetch tool returns the page it got
        (NGINX_502, True),
        (GOOGLE_404, True),  # over 500 characters: as a text that mentions an error, data
        ({"url": "https://x.org/a", "page": NGINX_502}, True),
        # what a tool found that opens with such words: data
        ("500 service members joined the exercise on Monday.", False),
        ("Exceptions are handled by the caller.", False),
        ("Fatal accidents fell by 5% in 2025.", False),
        ({"title": "404 Not Found: why pages go missing", "url": "https://x.org/a"}, False),
        ("HTTP 200 OK", False),
        (TUTORIAL, False),  # a page about errors
        ({"title": "Search", "html": NGINX_502}, False),  # a crawl's hit: data
    ],
)
def test_a_failure_reported_without_the_word_error_is_a_failed_call(
    result: object, failed: bool
) -> None:
    # a web fetch that got "404 Not Found", a tool that raised an Exception shown as text, a
    # git tool's "fatal:": only a text that said "error" was looked at as a report of one
    assert ToolCall(name="fetch", arguments={}, result=result).failed is failed
    run = run_of([ToolCall(name="fetch", arguments={"url": "https://x.org/a"}, result=result)])
    assert ToolFailures().measure(run).score == (0.0 if failed else 1.0)


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        # what Python and a shell say, as a tool that returns str(exc) or stderr gives it
        ("[Errno 2] No such file or directory: 'notes/q3.txt'", True),  # OSError
        ("[Errno 111] Connection refused", True),
        ("[Errno -2] Name or service not known", True),
        ("Command '['git', 'push']' returned non-zero exit status 128.", True),
        ("bash: jq: command not found", True),
        ("/bin/sh: 1: jq: not found", True),
        ("ls: cannot access 'build': No such file or directory", True),
        ({"stderr": "cat: secrets.env: Permission denied"}, True),
        # in words, as a tool that caught what it raised says it
        ("Failed to fetch https://x.org/a: [Errno 111] Connection refused", True),
        ("Unable to find order 991", True),
        ("Could not resolve host: api.x.com", True),
        ("Permission denied", True),
        ("Rate limit exceeded. Retry in 20 seconds.", True),
        ("Timeout 30000ms exceeded.", True),  # Playwright
        ("timed out", True),  # a socket's timeout
        ("All connection attempts failed", True),  # httpx
        # data that opens with such words, or a longer text that does: a document
        ("Failed deliveries: 3 of 120 this week", False),
        ("Ticket 42: customer reports Permission denied on login", False),
        ("Could be rain tomorrow; 18 degrees.", False),
        ("Cannot be refunded after 30 days (policy 4.2).", False),
        ("Rate limits: 100 requests per minute", False),
        ("Unable to connect? " + "Check the router and the cable, then restart. " * 12, False),
        ({"snippet": "Permission denied (publickey) when pushing to GitHub"}, False),
    ],
)
def test_a_failure_as_python_a_shell_or_words_give_it_is_a_failed_call(
    result: object, failed: bool
) -> None:
    # a file tool that returned str(exc) for a missing file, a shell tool's "command not
    # found", a fetch that said "Failed to fetch ...": each was a call that worked
    assert ToolCall(name="read", arguments={}, result=result).failed is failed


def test_a_tool_that_returns_what_it_raised_failed(tmp_path: Path) -> None:
    # a real agent loop with the tool tutorials write: it catches what it raised and returns
    # it to the model. The file is missing, the model says it read it: that run scored 1.0
    @tool
    def read_file(path: str) -> str:
        """Read a text file."""
        try:
            return Path(path).read_text()
        except OSError as exc:
            return str(exc)

    missing = tmp_path / "q3.txt"
    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("read_file", "r1", path=str(missing))]),
            AIMessage("Q3 revenue was up 12%."),
        ]
    )
    with OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False) as evaluator:
        agent = create_agent(model, tools=[read_file])
        agent.invoke(
            {"messages": [("user", "What does the Q3 report say?")]},
            {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
        [trace] = evaluator.captured()
    [read] = trace.tool_calls()
    said = f"[Errno 2] No such file or directory: '{missing}'"
    assert (read.arguments, read.result, read.error, read.failed) == (
        {"path": str(missing)},
        said,
        None,
        True,
    )
    result = ToolFailures().measure(trace)
    assert (result.score, result.reason) == (
        0.0,
        "1 of 1 tool calls failed (read_file), 1 not recovered",
    )
    assert result.metadata["failures"] == [
        {
            "index": 0,
            "name": "read_file",
            "arguments": {"path": str(missing)},
            "error": said,
            "recovered": False,
        }
    ]


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        # a dict's str(), as LlamaIndex and CrewAI show a tool's dict to the model
        ("{'output': '42\\n', 'error': None}", False),
        ("[{'id': 1, 'errors': []}, {'id': 2, 'errors': []}]", False),
        ("{'success': True, 'status_code': 200, 'data': []}", False),
        ("{'output': '', 'error': 'ZeroDivisionError: division by zero'}", True),
        ("{'success': False, 'message': 'Order 991 not found'}", True),
        ("{'status_code': 404, 'body': 'Not Found'}", True),
        ("{'a': __import__('os').getcwd(), 'error': None}", True),  # no literal: never run
        # an object's repr(), pydantic's str(): its fields read as a result object's keys
        ("order_id='A-1' status='shipped' error=None", False),
        ("Order(id='A-1', status='shipped', errors=[])", False),
        ("Result(ok=True, error_message='')", False),
        ("Stats(error_rate=0.02, p99_ms=120)", False),  # a figure
        ("Order(id='A-1', error='not found')", True),
        ("Job(errors=['timeout'])", True),
        ("Order(id='A-1', error=None); then an error occurred", True),
    ],
)
def test_a_python_value_written_as_text_is_read_as_one(result: str, failed: bool) -> None:
    # a code tool's {'output': '42\n', 'error': None}: its text says "error", and not being
    # JSON it was read as a short text that says so, a failed call of a run that worked; a
    # lookup that returned a pydantic model with an empty error field likewise
    assert ToolCall(name="execute", arguments={}, result=result).failed is failed


def test_a_coding_assistant_that_looked_up_error_handling_did_not_fail(tmp_path: Path) -> None:
    # a real agent loop: the user asks how to handle errors, the docs search returns the
    # page on errors, the agent answers. Its one call "failed" (the page says "error"):
    # tool_failures 0.0 and a regression case for a run that went right
    @tool
    def search_docs(query: str) -> str:
        """Search the Python documentation."""
        return DOCS

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("search_docs", "d1", query="handle errors")]),
            AIMessage("Wrap the call in try/except and catch the exception you expect."),
        ]
    )
    with OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False) as evaluator:
        agent = create_agent(model, tools=[search_docs])
        agent.invoke(
            {"messages": [("user", "How do I handle errors in Python?")]},
            {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
        [trace] = evaluator.captured()
    [searched] = trace.tool_calls()
    assert (searched.result, searched.error, searched.failed) == (DOCS, None, False)
    result = ToolFailures().measure(trace)
    assert (result.score, result.reason) == (1.0, "none of 1 tool calls failed")


def test_a_shared_or_self_containing_result_is_looked_at_once() -> None:
    page: list[object] = [{"status": "shipped"}]
    looped: list[object] = ["fine"]
    looped.append(looped)  # JSON cannot write it; its str() is what the text would be
    shared = [page, page, [page, {"note": "ERROR in line 3"}]]
    assert ToolCall(name="t", arguments={}, result=shared).failed
    assert not ToolCall(name="t", arguments={}, result=[page] * 1000).failed
    assert not ToolCall(name="t", arguments={}, result=looped).failed
    assert ToolCall(name="t", arguments={}, result={"detail": ValueError("boom")}).failed is False
    assert ToolCall(name="t", arguments={}, result={"detail": RuntimeError("an Error")}).failed


@pytest.mark.parametrize("together", [True, False])
def test_a_call_asked_for_beside_a_failed_one_does_not_recover_it(
    tmp_path: Path, together: bool
) -> None:
    # a real agent loop: the model asks for the weather and the time at once, the weather
    # service answers 503, and the model makes the weather up. The time call, asked for
    # beside the failed one before the model saw the failure, counted as its recovery:
    # 0.75 and "recovered". Asked for in the next step, after the failure, it is one
    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return "503 Service Unavailable"

    @tool
    def get_time(city: str) -> str:
        """Local time in a city."""
        return "15:00"

    weather, time = (
        tool_call("get_weather", "w1", city="Paris"),
        tool_call("get_time", "t1", city="Paris"),
    )
    asked = (
        [AIMessage("", tool_calls=[weather, time])]
        if together
        else [
            AIMessage("", tool_calls=[weather]),
            AIMessage("", tool_calls=[time]),
        ]
    )
    model = ScriptedChatModel(replies=[*asked, AIMessage("It is 15:00 and sunny in Paris.")])
    with OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False) as evaluator:
        create_agent(model, tools=[get_weather, get_time]).invoke(
            {"messages": [("user", "Weather and time in Paris?")]},
            {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
        [trace] = evaluator.captured()
    # calls asked for together run at once (ToolNode's threads), either may start first
    calls = [(c.name, c.result, c.failed) for c in trace.tool_calls()]
    assert sorted(calls, reverse=True) == [
        ("get_weather", "503 Service Unavailable", True),
        ("get_time", "15:00", False),
    ]
    assert together or calls[0][0] == "get_weather"
    assert [
        sorted((c.name for c in step.tool_calls), reverse=True)
        for step in trace.steps()
        if step.tool_calls
    ] == ([["get_weather", "get_time"]] if together else [["get_weather"], ["get_time"]])
    result = ToolFailures().measure(trace)
    # together: 1 − (1 failed + 1 unrecovered) / (2 × 2); apart: 1 − 1 / 4
    assert (result.score, result.metadata["failures"][0]["recovered"]) == (
        (0.5, False) if together else (0.75, True)
    )
