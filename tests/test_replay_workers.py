"""Replay in several processes: shards of a capture, merged reports and results files."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from judge_server import JudgeServer, Reply
from replay_helpers import (
    assert_one_limit_spaced,
    assert_the_budget_held_for_two,
    four_calls_budget,
    session_parts,
    sessions_taking_turns,
    twenty_a_second,
)

from agenteval_core import (
    AgentStep,
    CaptureError,
    CaptureFormatError,
    CaptureWriter,
    EvalCase,
    Metric,
    MetricKind,
    ProcessTimes,
    RunStatus,
    Score,
    StaticEmbedder,
    ToolCall,
    Trace,
    line_shard,
    read_capture,
    replay,
)
from agenteval_core.cli import cli
from agenteval_core.embedders._static import default_embedder
from agenteval_core.judges import OpenAIJudge
from agenteval_core.offline._line_index import (
    TaskTable,
    byte_ranges,
    index_range,
    lines_by_shard,
    read_own_lines,
)
from agenteval_core.offline._processes import _Clock, _start_method, _Workers, task_count
from agenteval_core.offline._replay import LOCAL_BATCH_SIZE
from agenteval_core.report._report import load_results
from agenteval_core.schema._capture import read_in_run_order, read_numbered


def _trace(index: int, session: str | None, output: str, **fields: Any) -> Trace:
    return Trace.from_steps(
        f"question {index} about order {index % 4}",
        [
            AgentStep(
                tool_calls=[ToolCall(name="lookup", arguments={"id": index % 3}, result="ok")],
                output=output,
            )
        ],
        id=f"t{index}",
        session_id=session,
        **fields,
    )


def _capture(path: Path) -> Path:
    """Seven sessions interleaved (one id with a quote and an accent, which the writer
    escapes), repeated answers, failed runs, traces without a session, a bad line, and a
    trace written by another tool with its keys in another order."""
    sessions = ["s0", "s1", 's"2é', "s3", "s4", "s5", "s6"]
    answers = ["Your order shipped.", "Still checking, please hold.", "Refund issued."]
    lines = []
    for index in range(60):
        session = None if index % 11 == 5 else sessions[index % 7]
        status = RunStatus.ERROR if index % 13 == 0 else None
        trace = _trace(index, session, answers[(index // 7) % 3], status=status)
        lines.append(trace.model_dump_json())
    lines.insert(17, "{not json")
    other = _trace(60, "s3", "Refund issued.").model_dump(mode="json")
    lines.insert(40, json.dumps(other, sort_keys=True))  # session_id is not near the start
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _sessions(path: Path, *, traces: int, sessions: int) -> Path:
    """A capture of ``traces`` short traces, ``t0`` on, in ``sessions`` interleaved sessions."""
    with CaptureWriter(path) as writer:
        for index in range(traces):
            writer.write(Trace(id=f"t{index}", session_id=f"s{index % sessions}", output="ok"))
    return path


def _wait_for_every_worker() -> None:
    for worker in multiprocessing.active_children():
        worker.join(timeout=60)


def _without_latency(line: str) -> Any:
    record = json.loads(line)
    for key in ("results", "session_results"):
        for result in record.get(key, []):
            result.pop("latency_ms")
    return record


def test_workers_give_what_one_process_gives(tmp_path: Path) -> None:
    path = _capture(tmp_path / "capture.jsonl")
    one_bad: list[CaptureFormatError] = []
    three_bad: list[CaptureFormatError] = []
    one = replay(path, output=tmp_path / "one.jsonl", on_bad_line=one_bad.append)
    three = replay(path, output=tmp_path / "three.jsonl", on_bad_line=three_bad.append, workers=3)

    assert (three.traces, three.sessions) == (one.traces, one.sessions) == (61, 7)
    assert [(e.line, e.problem) for e in three_bad] == [(e.line, e.problem) for e in one_bad]
    assert [e.line for e in three.bad_lines] == [18]
    for ours, theirs in (
        (three.summary, one.summary),
        (three.session_summary, one.session_summary),
    ):
        assert list(ours.metrics) == list(theirs.metrics)
        for name, summary in ours.metrics.items():
            expected = theirs.metrics[name]
            assert summary.as_dict() == {
                **expected.as_dict(),
                "mean": pytest.approx(expected.mean),
                "pass_rate": pytest.approx(expected.pass_rate),
            }
    assert set(three.session_results) == set(one.session_results)
    for session_id, results in one.session_results.items():
        assert [
            r.model_dump(exclude={"latency_ms"}) for r in three.session_results[session_id]
        ] == [r.model_dump(exclude={"latency_ms"}) for r in results]
    # the results file: every line, in the order one process writes them
    one_lines = (tmp_path / "one.jsonl").read_text().splitlines()
    three_lines = (tmp_path / "three.jsonl").read_text().splitlines()
    assert [_without_latency(line) for line in three_lines] == [
        _without_latency(line) for line in one_lines
    ]
    assert len(one_lines) == 61 + 7
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("agenteval-replay-")]
    # how each process spent the replay: every task and trace counted once, in its order
    assert one.processes == []
    shards = lines_by_shard([index_range(path, (0, None), task_count(3))], task_count(3))
    tasks = sum(1 for lines in shards if len(lines))  # a shard with no line is no task
    assert tasks == 12
    _check_times(three.processes, processes=3, tasks=tasks, traces=61, indexed=True)


def _check_times(
    times: Sequence[ProcessTimes], *, processes: int, tasks: int, traces: int, indexed: bool
) -> None:
    assert [t.process for t in times] == list(range(processes))
    assert sum(t.tasks for t in times) == tasks
    assert sum(t.traces for t in times) == traces
    for t in times:
        assert 0.0 <= t.started <= t.indexed <= t.scoring <= t.finished
        assert (t.indexed > t.started) is indexed  # a capture directory needs no index
        assert t.cpu_seconds > 0.0
    assert times[0].started < 0.001  # the process that called replay starts it


def test_shards_split_a_capture_by_session(tmp_path: Path) -> None:
    path = _capture(tmp_path / "capture.jsonl")
    everything = list(read_capture(path, on_error=lambda error: None))
    shards: list[list[Trace]] = []
    bad: list[int] = []
    for index in range(3):
        shards.append(
            list(
                read_capture(path, shard=(index, 3), on_error=lambda error: bad.append(error.line))
            )
        )
    assert sorted(t.id for shard in shards for t in shard) == sorted(t.id for t in everything)
    assert bad == [18]  # read, and reported, by one shard only
    for shard in shards:  # each shard keeps the capture's order
        assert [t.id for t in shard] == [t.id for t in everything if t in shard]
    owner = {t.session_id: i for i, shard in enumerate(shards) for t in shard if t.session_id}
    assert len(owner) == 7
    for index, shard in enumerate(shards):
        assert all(owner[t.session_id] == index for t in shard if t.session_id)
    with pytest.raises(ValueError, match=r"shard must be \(index, count\)"):
        next(read_capture(path, shard=(3, 3)))


@settings(max_examples=200)
@given(session=st.text(min_size=1), number=st.integers(1, 10**6), count=st.integers(1, 9))
def test_a_session_lands_in_one_shard_however_its_line_is_written(
    session: str, number: int, count: int
) -> None:
    trace = Trace(id="t", session_id=session, output="x")
    ours = trace.model_dump_json().encode()
    theirs = json.dumps(trace.model_dump(mode="json"), sort_keys=True).encode()
    shard = line_shard(ours, number, count)
    assert 0 <= shard < count
    assert line_shard(theirs, number + 7, count) == shard
    unsessioned = Trace(id="t", output="x").model_dump_json().encode()
    assert line_shard(unsessioned, number, count) == number % count
    assert line_shard(b"[1, 2]", number, count) == number % count


LIMIT = 2000
"""The longest line the test below reads: a trace with a long output is over it."""


def _line_kinds() -> list[bytes]:
    """Every kind of line a capture holds: ours, another writer's, unsessioned, blank, CRLF,
    not JSON, not UTF-8, oversized, and a torn fragment glued to a whole trace."""
    ours = [_trace(i, f"s{i % 3}", "ok").model_dump_json().encode() for i in range(3)]
    theirs = json.dumps(_trace(3, "s1", "ok").model_dump(mode="json"), sort_keys=True).encode()
    loose = _trace(4, None, "ok").model_dump_json().encode()
    long = _trace(5, "s2", "x" * LIMIT).model_dump_json().encode()
    glued = ours[0][:30] + _trace(6, "s0", "ok").model_dump_json().encode()
    bad = [b"", b"  ", ours[1] + b"\r", b"{not json", b"\xff\xfe"]
    return [*ours, theirs, loose, long, glued, *bad]


@settings(max_examples=150)
@given(
    kinds=st.lists(st.integers(0, len(_line_kinds()) - 1), max_size=40),
    torn=st.booleans(),
    count=st.integers(1, 6),
)
def test_each_process_reads_exactly_its_shard_of_a_capture_file_from_the_ranges_indexes(
    tmp_path_factory: pytest.TempPathFactory, kinds: list[int], torn: bool, count: int
) -> None:
    # a worker of a replay indexes one byte range and reads the lines the ranges' indexes
    # give it: exactly what read_capture's shard=(worker, count) reads of the whole file,
    # problems and progress included, however odd the lines
    content = b"".join(_line_kinds()[kind] + b"\n" for kind in kinds)
    if torn:  # its writer stopped mid-line
        content += _trace(8, "s1", "ok").model_dump_json().encode()[:50]
    path = tmp_path_factory.mktemp("index") / "capture.jsonl"
    path.write_bytes(content)
    found = [index_range(path, span, count, LIMIT) for span in byte_ranges(path, count)]
    progress = 0
    for worker, lines in enumerate(lines_by_shard(found, count)):
        problems: list[CaptureFormatError] = []
        expected_problems: list[CaptureFormatError] = []
        sizes: list[int] = []
        read = read_own_lines(
            path,
            lines,
            on_error=problems.append,
            on_progress=sizes.append,
            max_line_bytes=LIMIT,
        )
        expected = read_numbered(
            path, shard=(worker, count), on_error=expected_problems.append, max_line_bytes=LIMIT
        )
        assert list(read) == list(expected)
        assert [(e.line, e.problem, e.truncated) for e in problems] == [
            (e.line, e.problem, e.truncated) for e in expected_problems
        ]
        progress += sum(sizes)
    assert progress == len(content)  # every byte read once, by one process


def test_the_task_table_holds_every_shard_largest_first(tmp_path: Path) -> None:
    # sessions of 1, 4 and 2 traces, and one line without a session (line 6, so shard 6 % 4)
    lines = [_trace(i, s, "ok").model_dump_json() for i, s in enumerate("abbbcbc")]
    lines[5] = _trace(5, None, "ok").model_dump_json()
    path = tmp_path / "capture.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = [index_range(path, span, 4) for span in byte_ranges(path, 2)]
    shards = lines_by_shard(found, 4)
    table = TaskTable.write(shards, os.fspath(tmp_path / "tasks.npy"))
    # every non-empty shard is a task, the most bytes first; ties keep the shard order
    bytes_of = [int(shard.sizes.sum()) for shard in shards]
    order = sorted((i for i in range(4) if bytes_of[i]), key=lambda i: -bytes_of[i])
    assert len(table) == len(order)
    for task, lines_of_task in zip(order, table.tasks(iter(range(len(table)))), strict=True):
        expected = shards[task]
        assert lines_of_task.starts.tolist() == expected.starts.tolist()
        assert lines_of_task.sizes.tolist() == expected.sizes.tolist()
        assert lines_of_task.numbers.tolist() == expected.numbers.tolist()
    numbers = sorted(n for t in table.tasks(iter(range(len(table)))) for n in t.numbers.tolist())
    assert numbers == [1, 2, 3, 4, 5, 6, 7]


def test_workers_replay_a_capture_without_traces(tmp_path: Path) -> None:
    # no line makes an empty table of tasks; bad lines only, tasks without a trace
    path = tmp_path / "capture.jsonl"
    path.write_text("")
    assert replay(path, workers=2, output=tmp_path / "r.jsonl").traces == 0
    assert (tmp_path / "r.jsonl").read_text() == ""
    path.write_text("\n\n{not json\n")
    bad: list[CaptureFormatError] = []
    report = replay(path, workers=3, on_bad_line=bad.append)
    assert (report.traces, [error.line for error in bad]) == (0, [3])


class _HoldsThisProcess(Metric):
    """Says which process scored each trace; in the calling process, its first case waits
    until every worker has finished."""

    name = "holds_this_process"
    kind = MetricKind.DETERMINISTIC
    held = False  # in the calling process

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if multiprocessing.parent_process() is None and not type(self).held:
            type(self).held = True
            _wait_for_every_worker()
        return Score(1.0, reason=str(os.getpid()))


def test_a_slow_process_holds_only_its_task_while_the_others_take_the_rest(
    tmp_path: Path,
) -> None:
    path = _sessions(tmp_path / "capture.jsonl", traces=600, sessions=60)
    out = tmp_path / "r.jsonl"
    report = replay(path, [_HoldsThisProcess()], output=out, workers=3)
    assert report.traces == 600
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by = {r["trace_id"]: r["results"][0]["reason"] for r in records if "trace_id" in r}
    assert list(by) == [f"t{index}" for index in range(600)]  # capture order
    # this process scored the one task it took before it was held, no more
    here = [trace_id for trace_id, pid in by.items() if pid == str(os.getpid())]
    tasks = [[t.id for t in read_capture(path, shard=(i, 48))] for i in range(48)]
    assert here in tasks and 0 < len(here) < 600


def test_workers_tell_the_progress_of_every_process(tmp_path: Path) -> None:
    path = _capture(tmp_path / "capture.jsonl")
    read: list[int] = []
    replay(path, workers=3, on_progress=read.append, on_bad_line=lambda error: None)
    assert sum(read) == path.stat().st_size


class _Locked(Metric):
    name = "locked_metric"
    kind = MetricKind.DETERMINISTIC

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(1.0)


class _BreaksInWorkers(Metric):
    """Scores in the calling process; in a worker process it cannot even be loaded."""

    name = "breaks_in_workers"
    kind = MetricKind.DETERMINISTIC

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(1.0)

    def __setstate__(self, state: dict[str, Any]) -> None:
        raise RuntimeError("this metric's model is not on this machine")


class _KillsItsWorker(Metric):
    """Kills the worker that scores it; in the calling process, its first case waits until
    every worker has died (each took a task while this process held its first)."""

    name = "kills_its_worker"
    kind = MetricKind.DETERMINISTIC
    scored = 0  # in the calling process

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if multiprocessing.parent_process() is not None:
            os._exit(3)
        type(self).scored += 1
        if type(self).scored == 1:
            _wait_for_every_worker()
        return Score(1.0)


class _WaitsForItsWorker(Metric):
    """In the calling process, its first case waits until the worker has ended; a worker
    cannot load it, so it fails while starting."""

    name = "waits_for_its_worker"
    kind = MetricKind.DETERMINISTIC
    scored = 0  # in the calling process

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        type(self).scored += 1
        workers = multiprocessing.active_children()
        if type(self).scored == 1 and workers:
            wait([worker.sentinel for worker in workers], timeout=60)
        return Score(1.0)

    def __setstate__(self, state: dict[str, Any]) -> None:
        raise RuntimeError("this metric's model is not on this machine")


def test_a_worker_that_fails_stops_the_replay_before_this_process_scores_its_share(
    tmp_path: Path,
) -> None:
    capture = _sessions(tmp_path / "capture.jsonl", traces=4000, sessions=40)
    share = sum(1 for _ in read_capture(capture, shard=(0, 2)))
    with pytest.raises(RuntimeError, match="this metric's model is not on this machine"):
        replay(capture, [_WaitsForItsWorker()], workers=2)
    # the worker failed while starting; this process noticed at the end of its first batch,
    # not after scoring its whole share
    assert 0 < _WaitsForItsWorker.scored < share / 2
    assert multiprocessing.active_children() == []


class _ReadsTheEnvironment(Metric):
    """Scores 1 where the process sees ``AGENTEVAL_TEST_MARK`` as the test set it."""

    name = "reads_the_environment"
    kind = MetricKind.DETERMINISTIC

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(float(os.environ.get("AGENTEVAL_TEST_MARK") == "after"))


def test_workers_see_the_environment_as_the_replay_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # workers fork from a server that started with the first replay's environment; what
    # changed since (a key, a cache directory) reaches them as it would a new process
    path = _capture(tmp_path / "capture.jsonl")
    monkeypatch.setenv("AGENTEVAL_TEST_MARK", "before")
    before = replay(path, [_ReadsTheEnvironment()], workers=3, on_bad_line=lambda error: None)
    monkeypatch.setenv("AGENTEVAL_TEST_MARK", "after")
    after = replay(path, [_ReadsTheEnvironment()], workers=3, on_bad_line=lambda error: None)
    assert before.traces == after.traces == 61
    assert before.summary.metrics["reads_the_environment"].mean == 0.0
    assert after.summary.metrics["reads_the_environment"].mean == 1.0


def test_what_workers_cannot_do_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = _capture(tmp_path / "capture.jsonl")
    for workers in (0, -2, True, 1.5):
        with pytest.raises(ValueError, match="workers must be a whole number >= 1"):
            replay(path, workers=workers)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"metrics, embedder or judge cannot be sent"):
        replay(path, judge=_Locked(), workers=2)
    with pytest.raises(ValueError, match="cannot call sinks or on_trace"):
        replay(path, on_trace=lambda trace, results: None, workers=2)
    with pytest.raises(ValueError, match=r"cannot be sent to another process \(TypeError"):
        replay(path, [_Locked()], workers=2)
    assert multiprocessing.active_children() == []


def test_a_failing_worker_fails_the_replay_and_leaves_no_process(tmp_path: Path) -> None:
    path = _capture(tmp_path / "capture.jsonl")
    with pytest.raises(RuntimeError, match="this metric's model is not on this machine"):
        replay(path, [_BreaksInWorkers()], workers=2)
    assert multiprocessing.active_children() == []
    out = tmp_path / "r.jsonl"
    with pytest.raises(RuntimeError, match="stopped with exit code 3 before reporting"):
        replay(path, [_KillsItsWorker()], output=out, workers=3)
    assert multiprocessing.active_children() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capture.jsonl", "r.jsonl"]
    # the results this process scored are kept: its first task, whole (the workers died on
    # their first trace, and this process saw it when that task ended)
    kept = [json.loads(line).get("trace_id") for line in out.read_text().splitlines()]
    tasks = [
        [t.id for t in read_capture(path, shard=(index, 48), on_error=lambda error: None)]
        for index in range(48)
    ]
    assert task_count(3) == 48
    assert [trace_id for trace_id in kept if trace_id is not None] in tasks
    assert kept[0] is not None


def _stops_after_its_index(connection: Any, path: Path, span: tuple[int, int | None]) -> None:
    connection.send(("index", index_range(path, span, 32)))
    connection.send(("error", RuntimeError("this metric's model is not on this machine")))
    connection.close()


def test_a_worker_that_stops_after_its_index_fails_the_replay_with_its_own_error(
    tmp_path: Path,
) -> None:
    # the table of tasks reaches it, or finds its end of the pipe closed: either way, what
    # it said is what the replay raises
    path = tmp_path / "capture.jsonl"
    path.write_bytes(b"{}\n" * 2_000)
    spans = byte_ranges(path, 2)
    context = _start_method()
    here, there = context.Pipe()
    process = context.Process(target=_stops_after_its_index, args=(there, path, spans[1]))
    process.start()
    there.close()
    workers = _Workers()
    workers.started.append((process, here))
    try:
        with pytest.raises(RuntimeError, match="this metric's model is not on this machine") as e:
            clock = _Clock(began=time.monotonic(), process=0)
            workers.share_out(path, spans[0], 32, os.fspath(tmp_path / "tasks.npy"), clock)
            workers.wait(while_waiting=lambda: None)
    finally:
        workers.stop()
    assert multiprocessing.active_children() == []
    # not chained to a send that failed: that send's frames held its pickling buffer, and
    # collecting them crashed Python 3.12.1 (a segmentation fault in the next test)
    assert e.value.__context__ is None


def _default_embedder_there(connection: Any, sent: bytes) -> None:
    received = pickle.loads(sent)
    connection.send((default_embedder()._model is not None, received is default_embedder()))
    connection.close()


def test_workers_start_with_the_default_embedder_loaded() -> None:
    # each worker would load the model itself (about 0.15 s of CPU) at the start of every
    # replay; the fork server loads it once, and the default embedder sent to a worker in
    # its metrics is that one
    context = _start_method()
    here, there = context.Pipe()
    process = context.Process(
        target=_default_embedder_there, args=(there, pickle.dumps(default_embedder()))
    )
    process.start()
    there.close()
    try:
        assert here.recv() == (True, True)
    finally:
        process.join()
    other = StaticEmbedder(max_tokens=7)
    copy = pickle.loads(pickle.dumps(other))  # any other one travels as its settings
    assert copy is not other and copy.max_tokens == 7 and copy._model is None


def test_cli_replay_with_workers(tmp_path: Path) -> None:
    path = _capture(tmp_path / "capture.jsonl")
    runner = CliRunner()
    one = runner.invoke(cli, ["replay", str(path), "--json", str(tmp_path / "one.jsonl")])
    two = runner.invoke(
        cli,
        ["replay", str(path), "--json", str(tmp_path / "two.jsonl")],
        env={"AGENTEVAL_REPLAY_WORKERS": "2"},
    )
    assert one.exit_code == two.exit_code == 1  # the bad line
    assert "1 bad line(s) skipped; the other 61 were scored" in two.output
    assert [_without_latency(x) for x in (tmp_path / "two.jsonl").read_text().splitlines()] == [
        _without_latency(x) for x in (tmp_path / "one.jsonl").read_text().splitlines()
    ]
    exported = runner.invoke(
        cli,
        ["replay", str(path), "--workers", "2", "--otel-endpoint", "http://127.0.0.1:9/v1/traces"],
        env={"OTEL_SDK_DISABLED": None},  # the test session turns the SDK off
    )
    assert exported.exit_code == 2 and "cannot export to OpenTelemetry" in exported.output


def test_workers_share_one_judge_rate_limit_and_give_one_process_results(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    # the judge's confidence depends on the request: a score per answer, a reason per trace
    def verdict(request: dict[str, Any]) -> Reply:
        asked = json.dumps(request)
        score = 0.9 if "shipped" in asked else 0.3
        return Reply(json.dumps({"score": score, "reason": f"judged {len(asked) % 97}"}))

    judge_server.responder = verdict
    capture = tmp_path / "c.jsonl"
    with CaptureWriter(capture) as writer:
        for index in range(24):
            answer = "Your order shipped." if index % 3 else "Still checking."
            writer.write(_trace(index, f"s{index % 6}", answer))
    judge = OpenAIJudge(
        "judge-model",
        base_url=judge_server.base_url,
        cache=None,
        requests_per_period=8,
        period=1.0,
        max_concurrency=4,
    )
    names = ["confidence", "agent_reliability", "agent_consistency"]
    two = replay(capture, names, judge=judge, workers=2, output=tmp_path / "two.jsonl")
    # 24 judge requests from two processes through one limit of 8 per second: the first
    # and the last reach the server at least 23/8 s apart (two processes each at their own
    # 8 per second would take 11/8 s)
    paced = sorted(judge_server.arrivals)
    assert len(paced) == 24 and paced[-1] - paced[0] >= 23 / 8 - 0.1
    one = replay(capture, names, judge=judge, output=tmp_path / "one.jsonl")
    confidence = two.summary.metrics["confidence"]
    assert confidence.scored == one.summary.metrics["confidence"].scored == 24
    assert confidence.mean == pytest.approx((16 * 0.9 + 8 * 0.3) / 24)
    assert [_without_latency(x) for x in (tmp_path / "two.jsonl").read_text().splitlines()] == [
        _without_latency(x) for x in (tmp_path / "one.jsonl").read_text().splitlines()
    ]


def _sharded_capture(directory: Path, shards: int) -> list[Trace]:
    """The traces of :func:`_capture` (its bad line aside) written as a capture directory."""
    skipped: list[CaptureFormatError] = []  # the capture's bad line, not written again
    traces = list(read_capture(_capture(directory.parent / "flat.jsonl"), on_error=skipped.append))
    assert [e.line for e in skipped] == [18]
    with CaptureWriter(directory, shards=shards) as writer:
        for trace in traces:
            writer.write(trace)
    assert writer.written == len(traces) == 61
    return traces


def test_a_capture_directory_holds_each_session_in_one_shard_in_order(tmp_path: Path) -> None:
    traces = _sharded_capture(tmp_path / "capture", 3)
    names = sorted(p.name for p in (tmp_path / "capture").iterdir())
    assert names == [f"part-0000{i}-of-00003.jsonl" for i in range(3)]
    shards = [list(read_capture(tmp_path / "capture" / name)) for name in names]
    assert sorted(t.id for shard in shards for t in shard) == sorted(t.id for t in traces)
    for shard in shards:  # each file keeps the order the traces were written in
        assert [t.id for t in shard] == [t.id for t in traces if t in shard]
    owner = {t.session_id: i for i, shard in enumerate(shards) for t in shard if t.session_id}
    for index, shard in enumerate(shards):  # a session never spans two files
        assert all(owner[t.session_id] == index for t in shard if t.session_id)
    assert len({owner[t.session_id] for t in traces if t.session_id}) == 3  # all three used
    # read as one capture: the shards one after another, every field as written
    assert list(read_capture(tmp_path / "capture")) == [t for shard in shards for t in shard]
    # read in two parts: whole files, shard 0 and 2, then shard 1
    assert list(read_capture(tmp_path / "capture", shard=(0, 2))) == shards[0] + shards[2]
    assert list(read_capture(tmp_path / "capture", shard=(1, 2))) == shards[1]


@settings(max_examples=60)
@given(
    sessions=st.lists(st.sampled_from(["a", "b", "c", "d", None]), min_size=1, max_size=30),
    shards=st.integers(1, 5),
    timed=st.booleans(),
)
def test_a_capture_directory_reads_in_the_order_the_runs_started(
    sessions: list[str | None], shards: int, timed: bool
) -> None:
    # every trace once; each shard's order kept (a session's turns in order); traces
    # written as they started come back in that order, whatever the shards
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name) / "capture"
        with CaptureWriter(directory, shards=shards) as writer:
            for index, session in enumerate(sessions):
                start = float(index) if timed else None
                writer.write(Trace(id=f"t{index}", session_id=session, start_time=start))
        read = [t.id for t in read_in_run_order(directory)]
        parts = [[t.id for t in read_capture(part)] for part in sorted(directory.iterdir())]
    assert sorted(read) == sorted(f"t{index}" for index in range(len(sessions)))
    for part in parts:
        assert [i for i in read if i in part] == part
    if timed:
        assert read == [f"t{index}" for index in range(len(sessions))]


def test_a_capture_directory_refuses_what_would_split_its_sessions(tmp_path: Path) -> None:
    _sharded_capture(tmp_path / "capture", 3)
    with pytest.raises(CaptureError, match=r"holds a capture in 3 shards; writing 4 would split"):
        CaptureWriter(tmp_path / "capture", shards=4)
    with CaptureWriter(tmp_path / "capture", shards=3) as again:  # appending is fine
        again.write(_trace(99, "s0", "again"))
    assert [t.id for t in read_capture(tmp_path / "capture")].count("t99") == 1
    with pytest.raises(CaptureError, match=r"flat.jsonl: a file; CaptureWriter\(path, shards=N\)"):
        CaptureWriter(tmp_path / "flat.jsonl", shards=2)
    with pytest.raises(ValueError, match="shards must be a whole number >= 1, got 0"):
        CaptureWriter(tmp_path / "other", shards=0)
    (tmp_path / "plain").mkdir()
    with pytest.raises(CaptureError, match=r"plain: a directory with no capture shards"):
        next(read_capture(tmp_path / "plain"))


def test_workers_read_whole_shards_of_a_capture_directory(tmp_path: Path) -> None:
    _sharded_capture(tmp_path / "capture", 4)
    # a bad line in one shard: reported with its file and line, by the worker that reads it
    shard = tmp_path / "capture" / "part-00002-of-00004.jsonl"
    shard.write_bytes(shard.read_bytes() + b"{not json\n")
    outcomes = []
    for workers in (1, 2, 3):
        bad: list[CaptureFormatError] = []
        output = tmp_path / f"results-{workers}.jsonl"
        report = replay(
            tmp_path / "capture", output=output, on_bad_line=bad.append, workers=workers
        )
        outcomes.append(
            (
                report.traces,
                report.sessions,
                [(Path(e.path).name, e.line, e.problem) for e in bad],
                [_without_latency(line) for line in output.read_text().splitlines()],
            )
        )
    lines = len(shard.read_bytes().splitlines())
    problem = "not valid JSON (Invalid JSON: key must be a string at line 1 column 2)"
    assert outcomes[0][:3] == (61, 7, [("part-00002-of-00004.jsonl", lines, problem)])
    assert outcomes[1] == outcomes[0] and outcomes[2] == outcomes[0]
    _check_times(report.processes, processes=3, tasks=4, traces=61, indexed=False)
    # one process over the directory scores what it scores over the file it came from
    flat = replay(tmp_path / "flat.jsonl", output=tmp_path / "flat-results.jsonl")
    flat_lines = [
        _without_latency(x) for x in (tmp_path / "flat-results.jsonl").read_text().splitlines()
    ]
    assert sorted(map(json.dumps, outcomes[0][3])) == sorted(map(json.dumps, flat_lines))
    assert flat.traces == 61


def test_more_workers_than_shard_files_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _sharded_capture(tmp_path / "capture", 2)
    report = replay(tmp_path / "capture", workers=3)
    assert report.traces == 61
    tasks = [t.tasks for t in report.processes]
    assert sum(tasks) == 2 and tasks.count(0) >= 1  # two files for three processes
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "agenteval: 3 workers for a capture directory of 2 shard files: each file is "
        "scored whole by one process, so 1 will have nothing to score: use at most 2 "
        "workers, or write the capture in more shards (CaptureWriter(path, shards=N), "
        "agenteval shard)"
    ]


def test_results_go_to_a_directory_of_shards_that_the_report_reads_as_one(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "capture"
    _sharded_capture(capture, 2)
    replay(capture, output=tmp_path / "one.jsonl")
    expected = sorted(
        json.dumps(_without_latency(x)) for x in (tmp_path / "one.jsonl").read_text().splitlines()
    )
    results = tmp_path / "results"
    for workers in (3, 2, 1):  # each run replaces the shards the one before left
        replay(capture, output=f"{results}/", workers=workers)
        shards = sorted(p.name for p in results.iterdir())
        assert shards == [f"results-0000{i}-of-0000{workers}.jsonl" for i in range(workers)]
        lines = [x for shard in shards for x in (results / shard).read_text().splitlines()]
        assert sorted(json.dumps(_without_latency(x)) for x in lines) == expected
    data = load_results(results, capture)  # the results directory and the capture directory
    assert len(data.traces) == 61 and len(data.sessions) == 7 and len(data.captured) == 61
    page = tmp_path / "r.html"
    done = CliRunner().invoke(
        cli, ["report", str(results), "--html", str(page), "--capture", str(capture)]
    )
    assert done.exit_code == 0, done.output
    assert "question 59 about order 3" in page.read_text()  # a trace's input, from the capture
    # results never go among a capture's shards: the report would read those as results
    with pytest.raises(ValueError, match=r"capture holds a capture's shards; write the results"):
        replay(capture, output=capture)


def test_an_existing_capture_is_split_into_shards_that_replay_as_it_does(
    tmp_path: Path,
) -> None:
    path = _capture(tmp_path / "capture.jsonl")  # bad line, foreign key order, no sessions
    raw = path.read_bytes().splitlines(keepends=True)
    done = CliRunner().invoke(cli, ["shard", str(path), str(tmp_path / "shards"), "--shards", "3"])
    assert done.exit_code == 0, done.output
    assert "62 line(s) of" in done.output and "3 shard(s)" in done.output
    parts = sorted((tmp_path / "shards").iterdir())
    assert [p.name for p in parts] == [f"part-0000{i}-of-00003.jsonl" for i in range(3)]
    copied = [line for part in parts for line in part.read_bytes().splitlines(keepends=True)]
    assert sorted(copied) == sorted(raw)  # every line, byte for byte
    for part in parts:  # each shard keeps the capture's order
        lines = part.read_bytes().splitlines(keepends=True)
        assert lines == [line for line in raw if line in lines]
    # the same shard a CaptureWriter(shards=3) gives each session: one file per session
    traces = {t.id: t for t in read_capture(path, on_error=lambda error: None)}
    owner: dict[str, int] = {}
    for index, part in enumerate(parts):
        for trace in read_capture(part, on_error=lambda error: None):
            if trace.session_id:
                assert owner.setdefault(trace.session_id, index) == index
    assert set(owner) == {t.session_id for t in traces.values() if t.session_id}
    bad: list[CaptureFormatError] = []
    sharded = replay(tmp_path / "shards", output=tmp_path / "r.jsonl", on_bad_line=bad.append)
    one = replay(path, output=tmp_path / "one.jsonl", on_bad_line=lambda error: None)
    assert (sharded.traces, sharded.sessions) == (one.traces, one.sessions) == (61, 7)
    assert [e.problem for e in bad] == [one.bad_lines[0].problem]
    again = CliRunner().invoke(cli, ["shard", str(path), str(tmp_path / "shards")])
    assert again.exit_code == 2 and "already holds a capture's shards" in again.output


def test_cli_replays_a_capture_directory_and_says_what_a_plain_one_lacks(tmp_path: Path) -> None:
    _sharded_capture(tmp_path / "capture", 2)
    runner = CliRunner()
    done = runner.invoke(cli, ["replay", str(tmp_path / "capture"), "--workers", "2"])
    assert done.exit_code == 0, done.output
    assert "61 traces" in done.output
    (tmp_path / "plain").mkdir()
    refused = runner.invoke(cli, ["replay", str(tmp_path / "plain")])
    assert refused.exit_code == 2
    assert " ".join(refused.output.split()) == (
        f"agenteval: error: {tmp_path / 'plain'}: a directory with no capture shards "
        "(part-NNNNN-of-NNNNN.jsonl, as CaptureWriter(path, shards=N) or agenteval shard "
        "writes); pass a capture file, or replay on Ray (--engine ray, engine='ray'), which "
        "reads every *.jsonl below a directory"
    )


_INTERRUPTED = """
import multiprocessing, os, signal, sys
from agenteval_core import EvalCase, Metric, MetricKind, Score, replay

signal.signal(signal.SIGINT, signal.default_int_handler)  # even where SIGINT is ignored


class Held(Metric):
    # at its 200th case in each process, says so and waits for a byte from the test, which
    # sends Ctrl-C first: every process is then mid-replay, with 7,800 traces to go
    name = "held_for_test"
    kind = MetricKind.DETERMINISTIC

    def __init__(self, fifo):
        super().__init__()
        self.fifo = fifo
        self.seen = 0

    def compute(self, case, history=()):
        self.seen += 1
        if self.seen == 200:
            os.write(1, b"reading\\n")  # one write: the processes' lines never interleave
            held = os.open(self.fifo, os.O_RDWR)  # read-write: opening never waits
            os.read(held, 1)
            os.close(held)
        return Score(1.0)


if __name__ == "__main__":
    try:
        replay(sys.argv[1], [Held(sys.argv[4])], output=sys.argv[2], workers=int(sys.argv[3]))
    except KeyboardInterrupt:
        print("interrupted; processes left:", len(multiprocessing.active_children()), flush=True)
        sys.exit(130)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="Ctrl-C to a process group is POSIX")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_stops_a_replay_at_once_and_keeps_what_was_scored(
    tmp_path: Path, workers: int
) -> None:
    """Nothing in a replay without a judge waits, so Ctrl-C used to land only when every
    trace was scored; it now stops the replay within a batch, in every worker."""
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        for index in range(8000):
            writer.write(Trace(id=f"t{index}", session_id=f"s{index % 50}", output="ok"))
    script = tmp_path / "interrupted.py"
    script.write_text(_INTERRUPTED, encoding="utf-8")
    out = tmp_path / "results.jsonl"
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    # held open here until the end: a pipe drops what it holds when its last reader closes,
    # and a worker that took its byte and stopped could otherwise close it before another
    # process opens it to wait for its own
    release = os.open(fifo, os.O_RDWR)
    process = subprocess.Popen(
        [sys.executable, str(script), str(capture), str(out), str(workers), str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches
    )
    try:
        assert process.stdout is not None
        for _ in range(workers):  # every process is held mid-replay
            assert process.stdout.readline() == "reading\n"
        os.killpg(process.pid, signal.SIGINT)
        os.write(release, b"x" * workers)  # then each goes on with its batch
        stdout, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        os.close(release)
    assert process.returncode == 130, stderr[-2000:]
    assert stdout == "interrupted; processes left: 0\n"
    scored = [json.loads(line)["trace_id"] for line in out.read_text().splitlines()]
    # each process stopped at the end of the batch that held its 200th
    assert 0 < len(scored) <= workers * (200 + LOCAL_BATCH_SIZE)
    numbers = [int(trace_id[1:]) for trace_id in scored]
    assert numbers == sorted(numbers)  # in capture order, each line whole
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("agenteval-replay-")]


def test_workers_hold_the_open_sessions_limit_each_and_count_the_cuts(tmp_path: Path) -> None:
    # two shards, each of two sessions taking turns for 200 traces: each worker scores one
    # shard as one process scores such a file (3 cuts of its first session with one session
    # open at most: see test_capture_and_replay), and the report adds the cuts up
    directory = tmp_path / "capture"
    directory.mkdir()
    sessions_taking_turns(directory / "part-00000-of-00002.jsonl", 100, "ab")
    sessions_taking_turns(directory / "part-00001-of-00002.jsonl", 100, "cd")
    out = tmp_path / "results/"
    report = replay(directory, ["agent_reliability"], workers=2, max_open_sessions=1, output=out)
    assert (report.traces, report.sessions, report.sessions_cut) == (400, 10, 6)
    assert session_parts(tmp_path / "results") == [
        *[("a", 4)] + [("a", 32)] * 3,
        ("b", 100),
        *[("c", 4)] + [("c", 32)] * 3,
        ("d", 100),
    ]


def test_a_metric_workers_cannot_import_is_said_before_any_process_starts(
    tmp_path: Path, callers_metric: type[Metric]
) -> None:
    # registered inside a function: each worker, which never ran it, refused the name as
    # "unknown metric 'answer_words'" after every process had started; and given as an
    # instance, the advice was to pass it by name
    from agenteval_core import UnknownMetricError

    path = _capture(tmp_path / "capture.jsonl")
    said = (
        "replay with workers=2: the metrics, embedder or judge cannot be sent to another process (",
        # pickle's own words between, which differ between Python versions: 3.11 "Can't
        # pickle local object", 3.13 "Can't get local object"
        "); a worker imports "
        "each one's class by its module and name (define it at the top level of a module "
        "or of your script, not inside a function or a notebook) and receives its "
        "attributes pickled, so none may hold a lock or an open client (a LangChain chat "
        "model holds its HTTP client: judge with OpenAIJudge(model, base_url=...) on its "
        "OpenAI-compatible API instead); or replay in one process",
    )
    for metrics in (["answer_words"], [callers_metric()]):
        with pytest.raises(ValueError) as refused:
            replay(path, metrics, workers=2)
        before, why = str(refused.value).split(said[0])
        assert before == "" and why.endswith(said[1])
        assert "local object 'callers_metric.<locals>.AnswerWords'" in why.removesuffix(said[1])
    assert replay(path, ["answer_words"]).summary.metrics["answer_words"].scored == 61
    with pytest.raises(UnknownMetricError, match="did you mean tool_failures"):
        replay(path, ["tool_failurez"], workers=2)
    assert multiprocessing.active_children() == []


def test_a_judge_budget_holds_for_every_worker_together(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    # each worker had the whole budget: --judge-budget-usd 5 with 4 workers could spend $20
    judge_server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    capture = _sessions(tmp_path / "c.jsonl", traces=24, sessions=6)
    judge = four_calls_budget(judge_server.base_url)
    report = replay(capture, ["confidence"], judge=judge, workers=2)
    assert_the_budget_held_for_two(report, len(judge_server.requests), 24)
    assert judge.shared_spend is None  # the caller's judge, as it was


def test_an_http_embedders_rate_limit_holds_for_every_worker_together(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    # each worker kept the embedder's 20 requests a second to itself: two workers sent
    # the server 24 requests within 50 ms
    with CaptureWriter(tmp_path / "c.jsonl") as writer:
        for index in range(12):  # 24 texts
            question, answer = f"question {index} {'a' * index}", f"answer {index} {'b' * index}"
            writer.write(Trace(input=question, output=answer, session_id=f"s{index % 4}"))
    embedder = twenty_a_second(judge_server.base_url)
    report = replay(tmp_path / "c.jsonl", ["coherence"], embedder=embedder, workers=2)
    assert report.summary.metrics["coherence"].scored == 12
    assert_one_limit_spaced(judge_server.embedding_arrivals, 24)
