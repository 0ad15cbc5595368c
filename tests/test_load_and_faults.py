"""Nothing lost under odd data and failing resources: hostile values, full disks, forks,
rotated captures, crashed writers, read-only directories."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain._scripted import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

from agenteval_core import (
    CaptureError,
    EvalCase,
    Metric,
    MetricKind,
    OnlineEvaluator,
    ResultsFileSink,
    ResultsWriteError,
    Score,
    Span,
    SpanKind,
    Trace,
    plain,
    read_capture,
    replay,
)

# --- hostile values ------------------------------------------------------------------------


def _self_containing() -> list[Any]:
    loop: list[Any] = []
    loop.extend([loop, loop, loop])
    return loop


def _shared_dag(depth: int) -> list[Any]:
    node: list[Any] = ["leaf"]
    for _ in range(depth):
        node = [node, node, node]  # 3**depth paths to the leaf, depth + 1 objects
    return node


def _run_tool_returning(
    content: Any, tmp_path: Path, *, artifact: Any = None, **arguments: Any
) -> tuple[list[Trace], Any]:
    """One real LangGraph run whose only tool returns ``content`` (and ``artifact`` beside
    it) when the model calls it with ``arguments`` (default ``key="k1"``); the captured
    traces and the evaluator's stats once everything is flushed."""

    @tool(response_format="content_and_artifact")
    def fetch(key: str, count: int = 0) -> tuple[Any, Any]:
        """Fetch a record."""
        return content, artifact

    asked = arguments or {"key": "k1"}

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content="", tool_calls=[tool_call("fetch", "call-1", **asked)])
        return AIMessage(content="fetched")

    agent = create_agent(ScriptedChatModel(reply=reply), tools=[fetch])
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl", metrics=["tool_failures"], session_metrics=[]
    ) as ev:
        agent.invoke(
            {"messages": [("user", "fetch k1")]},
            config={"callbacks": [AgentEvalCallbackHandler(ev)]},
        )
        assert ev.flush(30)
        stats = ev.stats
    return list(read_capture(tmp_path / "c.jsonl")), stats


CYCLE = "[cycle: a value that contains itself]"


def test_a_tool_result_that_contains_itself_is_captured_with_cycle_markers(
    tmp_path: Path,
) -> None:
    traces, stats = _run_tool_returning("page 1", tmp_path, artifact=_self_containing())
    assert stats.captured == stats.scored == 1 and not stats.problems
    [trace] = traces
    [call] = trace.tool_calls()
    assert call.arguments == {"key": "k1"}
    assert call.result == "page 1"
    [span] = [s for s in trace.spans if s.kind is SpanKind.TOOL]
    cycles = json.dumps([CYCLE] * 3)
    assert span.attributes["agenteval.tool.artifact"] == (
        f"list, {len(cycles)} characters: {cycles}"
    )
    assert trace.output == "fetched"


def test_a_shared_object_graph_is_converted_in_bounded_work(tmp_path: Path) -> None:
    # 3**30 paths: expanded naively this never finishes; visited once per object, it does
    started = time.perf_counter()
    converted = plain(_shared_dag(30), max_nodes=10_000)
    elapsed = time.perf_counter() - started
    text = json.dumps(converted)
    assert text.count('"leaf"') <= 10_000 and "[cut: over agenteval's budget" in text
    assert elapsed < 5  # a bound on work, loose enough for any machine; naive is ~forever
    # a graph within the budget is kept whole: depth 5 has 3**5 leaves
    assert json.dumps(plain(_shared_dag(5))).count('"leaf"') == 3**5

    traces, stats = _run_tool_returning("exported", tmp_path, artifact=_shared_dag(30))
    assert stats.captured == stats.scored == 1 and not stats.problems
    [span] = [s for s in traces[0].spans if s.kind is SpanKind.TOOL]
    assert span.attributes["agenteval.tool.artifact"].startswith("list, ")
    assert span.output == "exported"


def test_a_lone_surrogate_and_a_huge_integer_are_captured_and_readable(tmp_path: Path) -> None:
    traces, stats = _run_tool_returning(
        "caf\ud800e", tmp_path, artifact={"count": 10**5000}, key="k\udc00", count=2**70
    )
    assert stats.captured == stats.scored == 1 and not stats.problems
    [trace] = traces
    [call] = trace.tool_calls()
    # a lone half becomes U+FFFD, the rest of the text is kept; past Python's 4,300-digit
    # str limit an integer is written in hexadecimal (exact), beyond 64 bits in decimal
    assert call.arguments == {"key": "k\ufffd", "count": str(2**70)}
    assert call.result == "caf\ufffde"
    [span] = [s for s in trace.spans if s.kind is SpanKind.TOOL]
    count_text = json.dumps({"count": hex(10**5000)})
    assert span.attributes["agenteval.tool.artifact"] == (
        f"dict, {len(count_text):,} characters: {count_text[:200]}…"
    )
    # every line is standard JSON
    for line in (tmp_path / "c.jsonl").read_text(encoding="utf-8").splitlines():
        json.loads(line)


def test_a_trace_built_by_hand_with_odd_values_is_captured_with_or_without_redaction(
    tmp_path: Path,
) -> None:
    for redactor in ("default", None):
        capture = tmp_path / f"{redactor}.jsonl"
        options: dict[str, Any] = {} if redactor == "default" else {"redactor": None}
        with OnlineEvaluator(
            capture=capture, metrics=["tool_failures"], session_metrics=[], **options
        ) as ev:
            ev.submit(
                Trace(
                    input="a\ud800b",
                    output=object(),
                    spans=[Span(kind=SpanKind.TOOL, name="t", output=_self_containing())],
                )
            )
            assert ev.flush(10)
            assert ev.stats.captured == ev.stats.scored == 1 and not ev.stats.problems
        [trace] = read_capture(capture)
        assert trace.input == "a\ufffdb"
        assert isinstance(trace.output, str) and trace.output.startswith("<object object at")
        assert trace.spans[0].output == ["[cycle: a value that contains itself]"] * 3


# --- faults that pass ----------------------------------------------------------------------


class FullDisk:
    """A file whose disk fills while ``full`` is set: a write stores what fits (``room``
    bytes, then nothing) and raises ENOSPC, as a real full disk does."""

    def __init__(self, file: Any, room: int = 100) -> None:
        self.file, self.room, self.full = file, room, False

    def write(self, data: Any) -> int:
        if self.full:
            stored = self.file.write(bytes(data[: self.room]))
            self.room = max(0, self.room - stored)
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(self.file.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def _json_lines(path: Path) -> list[Any]:
    """Each line of a JSON Lines file parsed; ``None`` for a line that is not JSON (a torn
    fragment)."""
    parsed = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            parsed.append(json.loads(line))
        except ValueError:
            parsed.append(None)
    return parsed


def _finished(index: int) -> Trace:
    return Trace(input=f"request {index}", output=f"answer {index}", session_id="s")


def test_a_full_results_disk_never_wedges_scoring_and_both_files_recover(
    tmp_path: Path,
) -> None:
    capture, results = tmp_path / "c.jsonl", tmp_path / "r.jsonl"
    ev = OnlineEvaluator(
        capture=capture,
        results_path=results,
        metrics=["tool_failures"],
        session_metrics=[],
        queue_size=5,  # the old wedge: 5 unfinished ids stopped all later scoring
        log=False,
    )
    [results_sink] = [s for s in ev.sinks if isinstance(s, ResultsFileSink)]
    results_file = results_sink._file = FullDisk(results_sink._file)
    capture_file = ev._capture._file = FullDisk(ev._capture._file)  # type: ignore[union-attr]

    def run(indices: range) -> None:
        for index in indices:  # one at a time: the hand-off of 5 never fills by pace
            ev.submit(_finished(index))
            # was False forever once 5 results writes had failed: their ids stayed "in
            # scoring", and every later trace was dropped from scoring
            assert ev.flush(10)

    run(range(3))
    results_file.full = capture_file.full = True  # one disk for both: full
    run(range(3, 23))
    results_file.full = capture_file.full = False  # space returns
    run(range(23, 26))
    ev.close()
    stats = ev.stats
    assert stats.submitted == 26 and stats.scored == 26 and stats.dropped_from_scoring == 0
    assert stats.captured == 6 and stats.capture_errors == 20
    assert stats.submitted == stats.captured + stats.capture_errors
    assert len(stats.uncaptured_trace_ids) == 20
    assert stats.callback_errors == 20  # the results sink's 20 failed writes, counted
    # both files are JSON Lines again after the fault: one torn fragment each, on its own line
    errors: list[Any] = []
    assert [t.input for t in read_capture(capture, on_error=errors.append)] == [
        f"request {i}" for i in (0, 1, 2, 23, 24, 25)
    ]
    assert [e.truncated for e in errors] == [True]
    parsed = _json_lines(results)
    assert len(parsed) == 3 + 1 + 3  # before, the fragment, after
    assert parsed[3] is None
    assert [r["trace_id"] for r in parsed if r is not None] == [
        t.id for t in read_capture(capture, on_error=lambda e: None)
    ]


FORK_WHILE_WRITING = textwrap.dedent(
    """
    import os, sys, threading
    from agenteval_core import OnlineEvaluator, Trace, read_capture
    from agenteval_core.schema._capture import _lock_file, _unlock_file

    capture = sys.argv[1]
    ev = OnlineEvaluator(capture=capture, metrics=["tool_failures"], session_metrics=[], log=False)
    writer = ev._capture
    holding, release = threading.Event(), threading.Event()

    def parent_thread_mid_write():
        # what a parent thread holds while it appends a line: the writer's lock and the flock
        with writer._lock:
            _lock_file(writer._file)
            holding.set()
            release.wait()
            _unlock_file(writer._file)

    threading.Thread(target=parent_thread_mid_write, daemon=True).start()
    holding.wait()
    ready, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own lock and file, so it captures, scores and exits
        os.write(told, b"x")
        ev.submit(Trace(input="from the child", output="ok"))  # waits for the parent's flock
        ok = ev.flush(20)
        ev.close(20)
        os._exit(0 if ok and ev.stats.captured == ev.stats.scored == 1 else 3)
    os.read(ready, 1)  # the child is about to write while the parent's write goes on
    release.set()
    ev.submit(Trace(input="from the parent", output="ok"))
    _, status = os.waitpid(pid, 0)
    ev.close(20)
    print(os.waitstatus_to_exitcode(status), sorted(t.input for t in read_capture(capture)))
    """
)


def test_a_fork_while_the_writer_holds_its_lock_leaves_the_child_working(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_WRITING, str(tmp_path / "c.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,  # a deadlocked child hung here for ever
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 ['from the child', 'from the parent']"


def test_a_deleted_or_renamed_capture_is_reopened_at_its_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the path is looked at every half second; here at every write, so no test waits
    monkeypatch.setattr("agenteval_core.schema._capture.PATH_CHECK_INTERVAL", 0.0)
    capture = tmp_path / "c.jsonl"
    with OnlineEvaluator(capture=capture, metrics=[], session_metrics=[], log=False) as ev:
        ev.submit(_finished(1))
        capture.unlink()  # logrotate without copytruncate, or a cleanup script
        ev.submit(_finished(2))
        assert [t.input for t in ev.captured()] == ["request 2"]
        capture.rename(tmp_path / "c.jsonl.1")
        ev.submit(_finished(3))
        ev.submit(_finished(4))
        assert [t.input for t in ev.captured()] == ["request 3", "request 4"]
        stats = ev.stats
    assert [t.input for t in read_capture(tmp_path / "c.jsonl.1")] == ["request 2"]
    assert stats.captured == 4 and ev._capture is not None and ev._capture.reopened == 2
    reopened = [r.getMessage() for r in caplog.records if "deleted or renamed" in r.getMessage()]
    assert (
        reopened
        == [
            f"agenteval: the capture file {capture} was deleted or renamed; reopened it at that "
            "path (later traces go to the new file)"
        ]
        * 2
    )


READ_ONLY_CWD = textwrap.dedent(
    """
    import logging
    from agenteval_langchain import AgentEvalCallbackHandler
    from agenteval_langchain._scripted import ScriptedChatModel
    from langchain.agents import create_agent
    from agenteval_core import read_capture
    from agenteval_core.online._evaluator import default_evaluator

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from langchain_core.messages import AIMessage
    agent = create_agent(ScriptedChatModel(replies=[AIMessage(content="hello")]), tools=[])
    result = agent.invoke(
        {"messages": [("user", "hi")]}, config={"callbacks": [AgentEvalCallbackHandler()]}
    )
    ev = default_evaluator()
    ev.flush(20)
    print(result["messages"][-1].content, ev.capture_path,
          [t.output for t in read_capture(ev.capture_path)])
    """
)


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs Linux's read-only /sys")
def test_a_read_only_working_directory_falls_back_to_the_temporary_directory(
    tmp_path: Path,
) -> None:
    fallback = tmp_path / "agenteval" / "agenteval-capture.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", READ_ONLY_CWD],
        cwd="/sys",  # not writable, even by root, as a container's read-only root
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hello {fallback} ['hello']"
    assert (
        "agenteval: cannot write /sys/agenteval-capture.jsonl (Permission denied); capturing "
        f"to {fallback} instead. Pass OnlineEvaluator(capture=PATH) to choose"
    ) in done.stderr


def test_a_capture_path_that_cannot_be_written_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CaptureError) as raised:
        OnlineEvaluator(capture=tmp_path / "a-file" / "c.jsonl")
    assert str(raised.value) == (
        f"cannot write the capture file: {tmp_path / 'a-file' / 'c.jsonl'}: "
        f"{tmp_path / 'a-file'} is a file, not a directory; "
        "pass capture= a path in a writable directory, or capture=None to capture nothing"
    )


class DiskFullOnce(FullDisk):
    """A file whose disk is full for its ``nth`` write only: that write stores ``room``
    bytes and raises ENOSPC; then space returns."""

    def __init__(self, file: Any, nth: int, room: int = 100) -> None:
        super().__init__(file, room)
        self.writes, self.nth = 0, nth

    def write(self, data: Any) -> int:
        self.writes += 1
        self.full = self.writes == self.nth
        return super().write(data)


class DiskFullOnceInAll(DiskFullOnce):
    """A file on a disk that is full for the ``nth`` write of all such files."""

    written = 0

    def write(self, data: Any) -> int:
        type(self).written += 1
        self.full = type(self).written == self.nth
        return FullDisk.write(self, data)


def _results_disk_fills_once(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    full: type[DiskFullOnce] = DiskFullOnce,
    nth: int = 2,
) -> Path:
    """A capture of 70 sessions of 10 traces, whose replay's results file (about 1 MB, four
    256 KiB writes) meets a full disk on its ``nth`` write (``full`` says whose)."""
    from ray_helpers import a_trace, write_capture

    from agenteval_core.engine import _sinks

    capture = tmp_path / "capture.jsonl"
    write_capture(capture, [a_trace(f"s{i // 10}", i % 10) for i in range(700)])
    real_open = open
    monkeypatch.setattr(
        _sinks, "open", lambda *a, **k: full(real_open(*a, **k), nth=nth), raising=False
    )
    return capture


def test_a_replay_whose_results_file_lost_lines_says_so_and_keeps_its_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    capture, results = _results_disk_fills_once(monkeypatch, tmp_path), tmp_path / "r.jsonl"
    with pytest.raises(ResultsWriteError) as raised:
        replay(capture, output=results)
    error = raised.value
    # every trace was scored and the report says so; only the file is short
    assert error.report is not None and error.report.traces == 700
    assert error.report.sessions == 70
    assert error.path == str(results) and isinstance(error.cause, OSError)
    assert error.cause.errno == errno.ENOSPC
    parsed = _json_lines(results)
    assert parsed.count(None) == 1  # the one torn fragment, on a line of its own
    whole = [record for record in parsed if record is not None]
    # 700 trace lines and 70 session lines were due: what is missing is what was counted
    assert 0 < error.lines_lost < 770
    assert len(whole) + error.lines_lost == 770
    assert str(error) == (
        f"{results}: no space left on device: {error.lines_lost:,} results line(s) were not "
        "written, so the results file is incomplete (the traces were scored); make room and "
        "replay again"
    )


def test_the_replay_command_fails_when_its_results_file_lost_lines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from agenteval_core.cli import cli

    capture, results = _results_disk_fills_once(monkeypatch, tmp_path), tmp_path / "r.jsonl"
    done = CliRunner().invoke(cli, ["replay", str(capture), "--json", str(results)])
    assert done.exit_code == 1
    assert f"agenteval: error: {results}: no space left on device: " in done.stderr
    assert "were not written, so the results file is incomplete" in done.stderr
    assert "per-trace results written to" not in done.output


def test_a_results_write_error_crosses_from_a_worker_whole() -> None:
    import pickle

    cause = OSError(errno.ENOSPC, "No space left on device")
    sent = ResultsWriteError("out/r.jsonl", 12, cause, report=object(), at_least=True)
    received = pickle.loads(pickle.dumps(sent))
    assert (received.path, received.lines_lost, received.at_least, received.report) == (
        "out/r.jsonl",
        12,
        True,
        None,  # the worker's own report stays behind
    )
    assert received.cause.errno == errno.ENOSPC
    assert str(received) == str(sent)
    assert "at least 12 results line(s) were not written" in str(received)


class _WaitsForThisProcessToEnd(Metric):
    """In a worker, its first case waits (60 s at most) for a word on ``port``, which the
    calling process sends once its own share has ended: until then the worker holds one
    task, and the calling process takes every other."""

    name = "waits_for_this_process_to_end"
    kind = MetricKind.DETERMINISTIC

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port, self.waited = port, False

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if multiprocessing.parent_process() is not None and not self.waited:
            self.waited = True
            with socket.create_connection(("127.0.0.1", self.port), timeout=60) as word:
                word.recv(2)
        return Score(1.0)


def test_a_multi_process_replay_names_its_results_file_when_a_share_lost_lines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # this process writes its share of the results file a part per task it takes, each
    # part at once as the next begins; the first of those writes meets the full disk (the
    # worker process writes its own share as usual). The worker is still scoring when this
    # process's share fails: the replay waits for it, and keeps its lines
    from agenteval_core.engine import _sinks
    from agenteval_core.offline import _replay

    monkeypatch.setattr(DiskFullOnceInAll, "written", 0)
    capture = _results_disk_fills_once(monkeypatch, tmp_path, DiskFullOnceInAll, nth=1)
    fills = _sinks.open  # type: ignore[attr-defined]
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    held: list[socket.socket] = []

    def opened(*args: Any, **kwargs: Any) -> Any:
        file = fills(*args, **kwargs)
        if os.fspath(args[0]).endswith("0.jsonl.1"):  # its second task's part
            held.append(listener.accept()[0])  # the worker is on its first case
        return file

    def closed(sink: Any) -> None:  # this process's share has ended: the worker goes on
        try:
            ends_share(sink)
        finally:
            with held.pop() as worker:
                worker.sendall(b"go")

    ends_share = _replay.NumberedResultsFile.close
    monkeypatch.setattr(_sinks, "open", opened)
    monkeypatch.setattr(_replay.NumberedResultsFile, "close", closed)
    results = tmp_path / "r.jsonl"
    metric = _WaitsForThisProcessToEnd(listener.getsockname()[1])
    with listener, pytest.raises(ResultsWriteError) as raised:
        replay(capture, [metric], workers=2, output=results)
    assert not held
    error = raised.value
    assert (error.path, error.at_least, error.report) == (str(results), True, None)
    assert error.lines_lost > 0 and error.cause.errno == errno.ENOSPC
    assert str(error).startswith(f"{results}: no space left on device: at least ")
    # the shares are merged all the same, the worker's whole: every trace's line is there
    # or counted lost (the line that began the next part too), whole lines, in capture order
    whole = [record for record in _json_lines(results) if record is not None]
    assert len(whole) + error.lines_lost == 700
    traces = [record["trace_id"] for record in whole]
    # "s{i // 10}-{i % 10}" for capture line i + 1
    assert traces == sorted(traces, key=lambda t: [int(n) for n in t[1:].split("-")])
    assert len(set(traces)) == len(traces)
    assert not list(tmp_path.glob("agenteval-replay-*"))  # its shares are cleaned up


needs_dev_full = pytest.mark.skipif(
    not os.path.exists("/dev/full"), reason="needs /dev/full, whose every write fails ENOSPC"
)


@needs_dev_full
def test_a_results_file_on_a_full_device_fails_the_replay_command_in_one_line() -> None:
    from click.testing import CliRunner

    from agenteval_core.cli import cli

    example = Path(__file__).resolve().parents[1] / "examples" / "captures" / "support_agent.jsonl"
    done = CliRunner().invoke(cli, ["replay", str(example), "--json", "/dev/full"])
    assert done.exit_code == 1
    # 9 traces and 3 sessions: not one line could be written
    assert done.stderr.splitlines()[-1] == (
        "agenteval: error: /dev/full: no space left on device: 12 results line(s) were not "
        "written, so the results file is incomplete (the traces were scored); make room and "
        "replay again"
    )


@needs_dev_full
def test_the_ray_results_writer_names_the_file_a_full_disk_refused() -> None:
    from agenteval_core.offline._ray import _ResultsOut

    with pytest.raises(OSError) as raised, _ResultsOut("/dev/full", 1) as results:
        results.write(0, b'{"trace_id": "t"}\n')  # buffered: the disk refuses it at close
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, "/dev/full")


FORKED_ADAPTERS = textwrap.dedent(
    """
    import asyncio, os, sys
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms import ChatMessage, MessageRole
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from agenteval_core import OnlineEvaluator, read_capture
    from agenteval_langchain import AgentEvalCallbackHandler
    from agenteval_langchain.testing import ScriptedChatModel, tool_call
    from agenteval_llamaindex import instrument

    def lookup_order(order_id: str) -> str:
        \"\"\"Status of an order by id.\"\"\"
        return "shipped"

    def langchain_run(handler, who):
        script = [
            AIMessage(content="", tool_calls=[tool_call("lookup_order", "c1", order_id=who)]),
            AIMessage(content=f"{who}: shipped"),
        ]
        create_agent(ScriptedChatModel(replies=script), tools=[lookup_order]).invoke(
            {"messages": [("user", f"langchain {who}")]}, config={"callbacks": [handler]}
        )

    def llamaindex_run(who):
        reply = ChatMessage(role=MessageRole.ASSISTANT, content=f"{who}: shipped")
        llm = MockFunctionCallingLLM(response_generator=lambda messages, **_: reply)
        agent = FunctionAgent(tools=[lookup_order], llm=llm)

        async def run():
            return await agent.run(user_msg=f"llamaindex {who}")

        asyncio.run(run())

    # made before the fork, as a web server's app is when its workers are forked from it
    evaluator = OnlineEvaluator(capture=sys.argv[1], log=False)
    handler = AgentEvalCallbackHandler(evaluator)
    instrument(evaluator)
    langchain_run(handler, "parent")
    assert evaluator.flush(30)
    pid = os.fork()
    if pid == 0:
        langchain_run(handler, "child")
        llamaindex_run("child")
        ok = evaluator.flush(30)
        evaluator.close(30)
        os._exit(0 if ok and evaluator.stats.captured == 3 else 3)
    _, status = os.waitpid(pid, 0)
    evaluator.close(30)
    print(os.waitstatus_to_exitcode(status))
    for trace in read_capture(sys.argv[1]):
        print(trace.framework, trace.status, trace.output, [c.arguments for c in trace.tool_calls()])
    """
)


def test_handlers_made_before_a_fork_record_the_childs_runs(tmp_path: Path) -> None:
    # gunicorn --preload, Celery's prefork pool: the handler is made in the parent, and each
    # worker's runs were queued where only the parent's (absent) thread would read them
    done = subprocess.run(
        [sys.executable, "-c", FORKED_ADAPTERS, str(tmp_path / "c.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "0",
        "langchain ok parent: shipped [{'order_id': 'parent'}]",
        "langchain ok child: shipped [{'order_id': 'child'}]",
        "llamaindex ok child: shipped []",
    ]
