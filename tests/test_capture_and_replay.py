"""Capture files, the scoring engine, replay and the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_helpers import (
    ANSWERS,
    results_without_timings,
    session_parts,
    sessions_taking_turns,
    shipped_twice,
)

from agenteval_core import (
    RESULTS_VERSION,
    SCHEMA_VERSION,
    AgentStep,
    CaptureError,
    CaptureFormatError,
    CaptureWriter,
    EvalCase,
    Metric,
    MetricKind,
    MetricResult,
    ReplayReport,
    ResultsLine,
    SchemaVersionError,
    Score,
    SessionHistory,
    Span,
    SpanKind,
    ToolCall,
    Trace,
    list_metrics,
    read_capture,
    replay,
)
from agenteval_core.cli import cli
from agenteval_core.offline._replay import LOCAL_BATCH_SIZE
from agenteval_core.report._report import load_results

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "captures" / "support_agent.jsonl"


def make_trace(output: str, session: str | None = "s1", **fields: object) -> Trace:
    return Trace.from_steps(
        "question",
        [
            AgentStep(
                tool_calls=[ToolCall(name="lookup", arguments={"id": 1}, result="ok")],
                output=output,
            )
        ],
        session_id=session,
        **fields,  # type: ignore[arg-type]
    )


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(lines), encoding="utf-8")
    return path


# --- capture ------------------------------------------------------------------------------


def test_round_trip_and_append(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    first, second = make_trace("a"), make_trace("b")
    with CaptureWriter(path) as writer:
        writer.write(first)
    with CaptureWriter(path) as writer:  # a restart appends, never truncates
        writer.write(second)
    assert list(read_capture(path)) == [first, second]


def test_torn_last_line_is_reported_after_every_complete_line(tmp_path: Path) -> None:
    good = [make_trace(str(i)) for i in range(3)]
    text = "".join(t.model_dump_json() + "\n" for t in good)
    path = write_lines(tmp_path / "c.jsonl", text, make_trace("x").model_dump_json()[:40])
    errors: list[CaptureFormatError] = []
    assert list(read_capture(path, on_error=errors.append)) == good
    assert len(errors) == 1 and errors[0].line == 4 and errors[0].truncated
    assert "truncated last line" in str(errors[0])
    # a writer opened on the torn file starts a fresh line, so its trace is readable
    with CaptureWriter(path) as writer:
        writer.write(make_trace("after crash"))
    read_back = list(read_capture(path, on_error=lambda e: None))
    assert [t.output for t in read_back] == ["0", "1", "2", "after crash"]


@pytest.mark.skipif(sys.platform == "win32", reason="writers lock the file with flock")
def test_a_line_being_written_is_read_whole(tmp_path: Path) -> None:
    """A capture replayed while a service writes it: the reader meets the last line half
    written, while its writer (here this test, holding the lock as CaptureWriter does for
    each line) is still appending it. The reader waits for the line, and reads it whole."""
    import fcntl

    path = tmp_path / "live.jsonl"
    first, second = make_trace("first"), make_trace("second")
    with CaptureWriter(path) as writer:
        writer.write(first)
    line = second.json_bytes() + b"\n"
    half = len(line) // 2
    read_half = threading.Event()
    got: list[Trace] = []
    errors: list[CaptureFormatError] = []

    def progress(size: int) -> None:
        if size == half:  # the reader has the half line, without its newline
            read_half.set()

    def read() -> None:
        got.extend(read_capture(path, on_error=errors.append, on_progress=progress))

    with path.open("ab", buffering=0) as appending:
        fcntl.flock(appending.fileno(), fcntl.LOCK_EX)
        appending.write(line[:half])
        reader = threading.Thread(target=read)
        reader.start()
        assert read_half.wait(10)
        appending.write(line[half:])
        fcntl.flock(appending.fileno(), fcntl.LOCK_UN)
    reader.join(10)
    assert (got, errors) == ([first, second], [])


def test_a_file_system_without_locks_still_takes_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some network and FUSE mounts refuse flock (ENOLCK): lines are appended unlocked."""
    import errno

    from agenteval_core import ResultsFileSink
    from agenteval_core.schema import _capture

    def refused(file: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(_capture, "_lock_file", refused)
    trace = make_trace("kept")
    with CaptureWriter(tmp_path / "c.jsonl") as writer:
        writer.write(trace)
    assert list(read_capture(tmp_path / "c.jsonl")) == [trace]
    sink = ResultsFileSink(tmp_path / "r.jsonl")
    sink.session_scored("s1", [])
    sink.close()
    assert (sink.lines_lost, sink.write_error) == (0, None)
    assert json.loads((tmp_path / "r.jsonl").read_text()) == {
        "results_version": RESULTS_VERSION,
        "session_id": "s1",
        "session_results": [],
    }


def test_bad_line_names_file_line_and_field(tmp_path: Path) -> None:
    bad = make_trace("x").model_dump(mode="json")
    bad["spans"][1]["kind"] = "robot"
    path = write_lines(
        tmp_path / "c.jsonl", make_trace("ok").model_dump_json() + "\n", json.dumps(bad) + "\n"
    )
    with pytest.raises(CaptureFormatError) as info:
        list(read_capture(path))
    assert info.value.line == 2 and info.value.field == "spans.1.kind"
    assert str(info.value).startswith(f"{path}:2 field 'spans.1.kind': Input should be")


def test_a_compressed_capture_or_results_file_is_refused_with_how_to_read_it(
    tmp_path: Path,
) -> None:
    # an archived capture: every line used to be reported as not UTF-8 ("is this a capture?")
    import bz2
    import gzip
    import lzma

    plain = write_lines(tmp_path / "c.jsonl", make_trace("x").model_dump_json() + "\n")
    data = plain.read_bytes()
    compressed = {
        "gzip": ("c.jsonl.gz", gzip.compress(data), "gunzip -k"),
        "xz": ("c.jsonl.xz", lzma.compress(data), "unxz -k"),
        "bzip2": ("c.jsonl.bz2", bz2.compress(data), "bunzip2 -k"),
        "zstd": ("c.jsonl.zst", b"\x28\xb5\x2f\xfd" + bytes(12), "zstd -d"),  # its magic
    }
    for kind, (name, content, command) in compressed.items():
        path = tmp_path / name
        path.write_bytes(content)
        message = (
            f"{path}: a {kind}-compressed file; decompress it first ({command} {path}): "
            "agenteval reads JSON Lines as they are written"
        )
        with pytest.raises(CaptureError) as refused:
            list(read_capture(path))
        assert str(refused.value) == message
        for command_line in (["replay", str(path)], ["report", str(path), "-o", "r.html"]):
            result = CliRunner().invoke(cli, command_line)
            assert (result.exit_code, result.output) == (2, f"agenteval: error: {message}\n")
    assert [t.output for t in read_capture(plain)] == ["x"]  # a plain capture reads as before


def test_newer_schema_version_and_non_jsonl_files(tmp_path: Path) -> None:
    newer = write_lines(
        tmp_path / "n.jsonl", json.dumps({"schema_version": SCHEMA_VERSION + 1}) + "\n"
    )
    with pytest.raises(SchemaVersionError, match="newer than this agenteval understands"):
        list(read_capture(newer))
    array = write_lines(tmp_path / "a.json", "[" + make_trace("x").model_dump_json() + "]\n")
    with pytest.raises(CaptureFormatError, match="JSON array, not JSON Lines"):
        list(read_capture(array))
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\xff\xfe\x00binary\n")
    with pytest.raises(CaptureFormatError, match="not UTF-8"):
        list(read_capture(binary))
    with pytest.raises(CaptureError, match="no such capture file"):
        list(read_capture(tmp_path / "missing.jsonl"))


def test_concurrent_writers_produce_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    writer = CaptureWriter(path)
    big = "x" * 20_000

    def work(thread: int) -> None:
        for i in range(25):
            writer.write(make_trace(f"{thread}-{i}-{big}"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    assert len(list(read_capture(path))) == 100


def test_a_writer_reads_back_its_own_lines_from_a_file_it_shares(tmp_path: Path) -> None:
    # two writers of one file (two evaluators, or another process), a fragment a killed
    # third one left, and a line of 200 kB: each writer reads back its own lines, in order
    path = tmp_path / "c.jsonl"
    ours, theirs = CaptureWriter(path), CaptureWriter(path)
    mine: list[Trace] = []
    for index, writer in enumerate("ootootto"):
        written = make_trace(f"{index} {'x' * (200_000 if index == 4 else 10)}")
        if writer == "o":
            ours.write(written)
            mine.append(written)
        else:
            theirs.write(written)
        if index == 2:
            with path.open("ab") as killed:
                killed.write(b'{"schema_version": 3, "id": "cut sh')
    assert [t.id for t in ours.read_written()] == [t.id for t in mine]
    assert [t.output for t in theirs.read_written()] == [f"{i} {'x' * 10}" for i in (2, 5, 6)]
    assert len(list(read_capture(path, on_error=lambda _: None))) == 8
    assert list(CaptureWriter(path).read_written()) == []  # a writer that wrote nothing
    # truncated in place (logrotate's copytruncate): what it wrote since
    with path.open("r+b") as rotated:
        rotated.truncate(0)
    after = make_trace("after the rotation")
    ours.write(after)
    theirs.write(make_trace("theirs, after"))
    assert [t.id for t in ours.read_written()] == [after.id]
    # a capture directory: each shard's own lines, shard by shard
    sharded, other = (
        CaptureWriter(tmp_path / "d", shards=3),
        CaptureWriter(tmp_path / "d", shards=3),
    )
    for index in range(12):
        (sharded if index % 3 else other).write(make_trace(f"{index}", session=f"s{index}"))
    assert sorted(t.output for t in sharded.read_written()) == sorted(
        f"{index}" for index in range(12) if index % 3
    )
    for writer in (ours, theirs, sharded, other):
        writer.close()


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outputs=st.lists(text, max_size=6), session=st.one_of(st.none(), text))
def test_written_traces_read_back_equal(
    tmp_path: Path, outputs: list[str], session: str | None
) -> None:
    path = tmp_path / f"h{abs(hash((tuple(outputs), session)))}.jsonl"
    path.unlink(missing_ok=True)
    traces = [make_trace(output, session=session) for output in outputs]
    with CaptureWriter(path) as writer:
        for trace in traces:
            writer.write(trace)
    assert list(read_capture(path)) == traces


def test_each_tool_call_is_written_once_and_version_1_lines_read_as_before(
    tmp_path: Path,
) -> None:
    old_lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line)["schema_version"] == 1 for line in old_lines), (
        "the shipped example capture is how version-1 reading is tested: keep it version 1"
    )
    old = list(read_capture(EXAMPLE))
    new_path = tmp_path / "v2.jsonl"
    with CaptureWriter(new_path) as writer:
        for trace in old:
            writer.write(trace)
    new_lines = new_path.read_text(encoding="utf-8").splitlines()
    # session-1-t0 called lookup_order once; version 1 held its result three times (the
    # model's request, the span's output, the call), version 2 once (the call)
    result = '"status":"shipped","carrier":"DHL","eta":"2026-01-03"'
    assert old_lines[0].count(result) == 3 and new_lines[0].count(result) == 1
    assert old_lines[0].count('"order_id":"A-1042"') == 3  # request, span input, call
    assert new_lines[0].count('"order_id":"A-1042"') == 2  # request, call
    assert sum(map(len, new_lines)) < sum(map(len, old_lines))
    assert [json.loads(line)["schema_version"] for line in new_lines] == [SCHEMA_VERSION] * 9
    assert list(read_capture(new_path)) == old  # every field, tool spans' input/output included
    tool_span = old[0].spans[2]
    assert (tool_span.input, tool_span.output, tool_span.error) == (
        {"order_id": "A-1042"},
        {"status": "shipped", "carrier": "DHL", "eta": "2026-01-03"},
        None,
    )

    def outcomes(path: Path) -> tuple[object, ...]:
        scored: list[object] = []
        report = replay(
            path,
            on_trace=lambda trace, results: scored.append(
                (trace.id, [r.model_dump(exclude={"latency_ms"}) for r in results])
            ),
        )
        sessions = {
            key: [r.model_dump(exclude={"latency_ms"}) for r in results]
            for key, results in report.session_results.items()
        }
        return scored, sessions, report.summary.as_dicts()

    assert outcomes(new_path) == outcomes(EXAMPLE)


def test_a_tool_span_that_differs_from_its_call_keeps_its_own_values(tmp_path: Path) -> None:
    call = ToolCall(id="c1", name="lookup", arguments={"id": 1}, result="found", error=None)
    span = Span(kind=SpanKind.TOOL, name="lookup", input=None, output="FOUND", tool_call=call)
    trace = Trace(spans=[span])
    line = json.loads(trace.to_json())
    assert {k: line["spans"][0][k] for k in ("input", "output")} == {
        "input": None,
        "output": "FOUND",
    }
    assert "error" not in line["spans"][0]  # equal to the call's: written once
    back = Trace.model_validate_json(trace.to_json())
    assert (back.spans[0].input, back.spans[0].output, back.spans[0].error) == (None, "FOUND", None)
    # a tool span built without them takes its call's
    bare = Trace(spans=[Span(kind=SpanKind.TOOL, name="lookup", tool_call=call)])
    assert (bare.spans[0].input, bare.spans[0].output) == ({"id": 1}, "found")


# --- scoring engine and replay --------------------------------------------------------------


def test_session_history_keeps_real_indices_and_little_memory() -> None:
    history = SessionHistory(keep=2)
    for output in ["a", "", "b", "c", ""]:
        history.append(make_trace(output))
    # only the last two traces with output ("b" at 2, "c" at 3) are kept; "a" reads as empty
    assert len(history) == 5
    assert [trace.output for trace in history] == [None, None, "b", "c", None]
    assert history[-2].output == "c"
    with pytest.raises(IndexError):
        history[5]
    assert [(i, t.output) for i, t in history.last_with_output(3)] == [(2, "b"), (3, "c")]
    assert [(i, t.output) for i, t in history.last_with_output(1)] == [(3, "c")]
    # a frozen copy is what a trace later in the same batch is scored against: later
    # appends reach the history, not the copy
    before = history.frozen()
    history.append(make_trace("d"))
    assert len(before) == 5 and [t.output for t in before][2:4] == ["b", "c"]
    assert len(history) == 6 and [t.output for t in history][3:] == ["c", None, "d"]
    nothing = SessionHistory(keep=0)  # no metric reads history: positions count, none kept
    nothing.append(make_trace("a"))
    assert len(nothing) == 1 and nothing[0].output is None


def test_replay_scores_sessions_and_writes_results(tmp_path: Path) -> None:
    stuck = "I am still checking the order status for you, please hold on."
    traces = [make_trace("The order shipped yesterday.", id="t0")]
    traces += [make_trace(stuck, id=f"t{i}") for i in range(1, 4)]
    traces.append(make_trace("Standalone answer", session=None, id="lone"))
    path = tmp_path / "c.jsonl"
    with CaptureWriter(path) as writer:
        for trace in traces:
            writer.write(trace)
    out = tmp_path / "results.jsonl"
    report = replay(path, ["loop_detection", "agent_reliability"], output=out)
    assert report.traces == 5 and report.sessions == 1
    assert repr(report) == (  # counts only, never every session's results
        f"ReplayReport(path={str(path)!r}, traces=5, sessions=1, "
        "metrics=['loop_detection'], bad_lines=0)"
    )
    loop = report.summary.metrics["loop_detection"]
    # t0 and the standalone trace have nothing before them (1.0); t1 differs from t0;
    # t2 and t3 repeat t1 exactly (cosine 1 × Jaccard 1 → 0.0)
    assert loop.scored == 5 and loop.passed == 3
    reliability = report.session_results["s1"][0]
    assert reliability.metadata["flagged_traces"] == ["t2", "t3"]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line.get("trace_id") for line in lines[:5]] == ["t0", "t1", "t2", "t3", "lone"]
    assert (
        lines[5]["session_id"] == "s1"
        and lines[5]["session_results"][0]["name"] == "agent_reliability"
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_a_trace_read_twice_in_its_session_is_scored_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, workers: int
) -> None:
    # a repeated capture line (at-least-once log shipping, captures concatenated) was
    # scored as another turn: counted twice, and compared with itself by loop_detection
    # (cosine 1 x Jaccard 1, a loop the agent never made), which then failed the session
    once, twice = shipped_twice(tmp_path)
    names = ["loop_detection", "agent_reliability"]
    expected = replay(once, names, output=tmp_path / "once.results")
    got = replay(twice, names, workers=workers, output=tmp_path / "twice.results")
    assert (expected.traces, expected.repeated_traces) == (3, 0)
    assert (got.traces, got.repeated_traces, got.sessions) == (5, 2, 1)
    first, repeats = results_without_timings(tmp_path / "once.results"), []
    for line in results_without_timings(tmp_path / "twice.results"):
        if line.get("results") and line["results"][0]["skipped"]:
            repeats.append(line)
        else:
            assert line in first  # each trace scored as when it was read once
    assert len(first) == 4 and got.summary.metrics["loop_detection"].passed == 3
    # each repeat's line gives the session's scores as they stood: the repeat adds nothing
    scores = [line["session_scores"] for line in first if "trace_id" in line]
    assert [(line["trace_id"], line["session_scores"]) for line in repeats] == [
        ("t1", scores[1]),
        ("t0", scores[2]),
    ]
    for line in repeats:
        trace_id = line["trace_id"]
        assert [(r["name"], r["score"], r["reason"], r["metadata"]) for r in line["results"]] == [
            (
                "loop_detection",
                None,
                f"not scored: a repeat of trace {trace_id}, already read in session s (a "
                "capture line written or shipped twice)",
                {"repeat_of": trace_id},
            )
        ]
    # the report reads each trace once, with its own results, and says it read repeats
    report = load_results(tmp_path / "twice.results")
    assert (report.trace_count, report.repeated_traces, report.session_count) == (3, 2, 1)
    # the session as it was: three turns, none of them a loop
    [reliability] = expected.session_results["s"]
    assert reliability.metadata["total_traces_in_session"] == 3
    assert [r.model_copy(update={"latency_ms": None}) for r in got.session_results["s"]] == [
        reliability.model_copy(update={"latency_ms": None})
    ]
    # another run under an id its session had (a capture written by hand) is no repeat
    reused = tmp_path / "reused.jsonl"
    other = Trace(id="t1", input="question 9", output=ANSWERS[2], session_id="s")
    reused.write_text(once.read_text() + other.model_dump_json() + "\n")
    both = replay(reused, names, workers=workers)
    assert (both.traces, both.repeated_traces) == (4, 0)
    assert both.summary.metrics["loop_detection"].scored == 4
    assert (
        "agenteval: 2 trace(s) were read again in their session (the same run under the same id: a capture "
        "line written or shipped twice); each was scored once, and its repeats are skipped "
        "results that say so" in caplog.text
    )


def test_a_run_with_no_session_read_twice_is_scored_once(tmp_path: Path) -> None:
    # a run with no session shipped twice counted twice in every summary (and in cases)
    lone = Trace(id="lone", input="question 0", output=ANSWERS[0])
    other = Trace(id="other", input="question 1", output=ANSWERS[1])
    path = tmp_path / "twice.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for t in (lone, other, lone)))
    scored: list[tuple[str, float | None, str]] = []
    report = replay(
        path,
        ["coherence"],
        on_trace=lambda trace, results: scored.append(
            (trace.id, results[0].score, results[0].reason)
        ),
    )
    assert (report.traces, report.repeated_traces) == (3, 1)
    assert report.summary.metrics["coherence"].scored == 2
    assert scored[2] == (
        "lone",
        None,
        "not scored: a repeat of trace lone, already read with no session (a capture line "
        "written or shipped twice)",
    )


def test_a_replay_says_how_often_a_session_was_cut_by_the_open_sessions_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 200 traces, batches of 64 (the replay's batch with a local embedder): both sessions
    # are open after each batch; with one session at most, the least recently active (a:
    # every batch ends with a b) closes, and the next batch starts with a: a is cut at the
    # start of batches 2, 3 and 4. Parts: a four times, b once.
    path = sessions_taking_turns(tmp_path / "c.jsonl", 100)
    out = tmp_path / "results.jsonl"
    report = replay(path, ["agent_reliability"], max_open_sessions=1, output=out)
    assert -(-200 // LOCAL_BATCH_SIZE) == 4
    assert (report.traces, report.sessions, report.sessions_cut) == (200, 5, 3)
    assert session_parts(out) == [
        ("a", 4),  # a96..a99, in the last batch (8 traces)
        ("a", 32),
        ("a", 32),
        ("a", 32),
        ("b", 100),
    ]
    assert [r.getMessage() for r in caplog.records if "cut in two" in r.getMessage()] == [
        "agenteval: sessions were cut in two 3 time(s): more than 1 were open at once, so the "
        "least recently active closed, and each part's session metrics cover that part alone "
        "(the sessions counted are the parts); raise max_open_sessions (--max-open-sessions) "
        "above the sessions active at once in the capture, or replay with workers or Ray, "
        "whose tasks each hold fewer sessions"
    ]
    caplog.clear()
    whole = replay(path, ["agent_reliability"])  # 1024 open at most: never cut
    assert (whole.sessions, whole.sessions_cut) == (2, 0)
    assert not [r for r in caplog.records if "cut in two" in r.getMessage()]
    command = [sys.executable, "-m", "agenteval_core.cli", "replay", str(path)]
    done = subprocess.run(
        [*command, "--metrics", "agent_reliability", "--max-open-sessions", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "5 sessions" in done.stdout
    assert "agenteval: sessions were cut in two 3 time(s): more than 1 were open" in done.stderr
    refused = CliRunner().invoke(cli, ["replay", str(path), "--max-open-sessions", "0"])
    assert refused.exit_code == 2 and "--max-open-sessions" in refused.output
    for how in ({}, {"workers": 2}, {"engine": "ray"}):  # before a process or Ray starts
        with pytest.raises(ValueError, match="max_open_sessions must be a whole number >= 1"):
            replay(path, max_open_sessions=0, **how)


def test_shipped_example_capture_replays_and_flags_the_loop() -> None:
    report = replay(EXAMPLE)
    assert report.traces == 9 and report.sessions == 3 and not report.bad_lines
    loop_scores = {
        tid: r.score
        for tid, r in _results_by_trace(EXAMPLE, "loop_detection").items()
        if r is not None
    }
    assert loop_scores["session-3-t2"] == pytest.approx(0.0, abs=1e-6)
    assert loop_scores["session-1-t1"] > 0.5


def _results_by_trace(path: Path, name: str) -> dict[str, object]:
    found: dict[str, object] = {}
    replay(path, [name], on_trace=lambda trace, results: found.update({trace.id: results[0]}))
    return found


# --- CLI ------------------------------------------------------------------------------------


def test_cli_replay_summary_and_json(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(
        cli,
        [
            "replay",
            str(EXAMPLE),
            "--metrics",
            "loop_detection,agent_reliability",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "9 traces" in result.output and "loop_detection" in result.output
    assert "session-3" in result.output
    assert len(out.read_text().splitlines()) == 9 + 3  # one line per trace, then per session


def test_cli_lists_metrics_one_entry_each_within_80_columns() -> None:
    result = CliRunner().invoke(cli, ["metrics"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    listed = [line.split()[0] for line in lines if line.startswith("  ") and line[2] != " "]
    # every registered metric, and best_of, which compares agents rather than scoring a trace
    assert sorted(listed) == sorted([info.name for info in list_metrics()] + ["best_of"])
    assert "comparison of several agents (name, summary; `agenteval compare`)" in result.output
    assert "tool_call_loops             0.5   Whether a run stayed out of loops" in result.output
    assert "``" not in result.output and "Seed" not in result.output  # no markup, no jargon


def test_cli_describes_one_metric_and_rejects_an_unknown_kind() -> None:
    result = CliRunner().invoke(cli, ["metrics", "reference_tool_correctness"])
    assert result.exit_code == 0
    assert result.output.startswith(
        "reference_tool_correctness (deterministic metric, version 1)\ndefault threshold: 1\n"
    )
    assert "  order_matters = True\n" in result.output
    judge_only = CliRunner().invoke(cli, ["metrics", "--kind", "judge"])
    assert "task_completion" in judge_only.output and "coherence" not in judge_only.output
    best_of = CliRunner().invoke(cli, ["metrics", "best_of"])
    assert best_of.output.startswith("best_of (comparison of several agents, LLM judge)\n")
    assert "agenteval compare agent_a.jsonl agent_b.jsonl --judge-model" in best_of.output
    bad = CliRunner().invoke(cli, ["metrics", "--kind", "foo"])
    assert bad.exit_code == 2 and "'foo' is not one of" in bad.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["replay", "missing.jsonl"], 2, "missing.jsonl: no such file"),
        (["replay", "{example}", "--metrics", "nope"], 2, "unknown metric 'nope'"),
        (
            ["replay", "{example}", "--metrics", "coherense"],
            2,
            "unknown metric 'coherense'; did you mean coherence?",
        ),
        (
            ["replay", "{example}", "--metrics", "task_completion"],
            2,
            "task_completion needs a judge: pass judge=OpenAIJudge(...) (from the command "
            "line: --judge-model), or leave the metric out",
        ),
        (
            ["replay", "{example}", "--json", "{file}/results.jsonl"],
            1,
            "{file}/results.jsonl: {file} is a file, not a directory",
        ),
        (
            ["demo", "--capture", "{file}/deeper/capture.jsonl"],
            1,
            "{file}/deeper/capture.jsonl: {file} is a file, not a directory",
        ),
        (["replay", "{newer}"], 1, "newer than this agenteval understands"),
        (["replay", "{torn}"], 1, "truncated last line"),
        (["replay", "{torn}"], 1, "1 bad line(s) skipped; the other 1 were scored"),
        (
            ["replay", "{garbage}"],
            1,
            "2 bad line(s) skipped; no line could be read as a trace (is this a capture file?)",
        ),
    ],
)
def test_cli_errors_are_one_line_without_traceback(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    newer = write_lines(
        tmp_path / "newer.jsonl", json.dumps({"schema_version": SCHEMA_VERSION + 1}) + "\n"
    )
    torn = write_lines(
        tmp_path / "torn.jsonl", make_trace("ok").model_dump_json() + "\n", '{"id": "x'
    )
    garbage = write_lines(tmp_path / "garbage.jsonl", "not json\n", "also bad\n")
    paths = {
        "file": str(garbage),
        "example": str(EXAMPLE),
        "newer": str(newer),
        "torn": str(torn),
        "garbage": str(garbage),
    }
    argv = [arg.format(**paths) for arg in args]
    done = subprocess.run(
        [sys.executable, "-m", "agenteval_core.cli", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == code
    assert "Traceback" not in done.stderr
    assert message.format(**paths) in done.stderr
    assert all(line.startswith("agenteval: error: ") for line in done.stderr.strip().splitlines())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["repaly", "x.jsonl"], "No such command 'repaly'. Did you mean 'replay'?"),
        (
            ["replay", "x.jsonl", "--jsno", "r.jsonl"],
            "No such option '--jsno'. Did you mean '--json'?",
        ),
    ],
)
def test_a_misspelt_command_or_option_gets_a_did_you_mean(args: list[str], message: str) -> None:
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 2 and message in done.output


def test_the_help_names_every_command() -> None:
    blurb = CliRunner().invoke(cli, ["--help"]).output.split("Options:")[0]
    for command in cli.commands:
        assert command in blurb, command


class _RemoteEmbedder:
    """An embedder outside the process, as replay sees it: it counts its requests."""

    name = "remote"

    def __init__(self) -> None:
        self.batches: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(len(texts))
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


class _BatchSizes(Metric):
    """Records the size of every batch the engine prepares."""

    name = "batch_sizes_seen"
    kind = MetricKind.DETERMINISTIC

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def prepare(self, cases: Sequence[EvalCase]) -> None:
        self.seen.append(len(cases))

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(1.0)


def test_replay_batches_small_in_process_and_large_for_a_remote_embedder(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.jsonl"
    with CaptureWriter(path) as writer:
        for i in range(300):
            writer.write(
                Trace(id=f"t{i}", input=f"question {i}", output=f"answer {i}", session_id=None)
            )
    batches = _BatchSizes()
    assert replay(path, [batches, "coherence"]).traces == 300
    assert batches.seen == [64] * 4 + [44]  # the default embedder runs here: smaller batches
    batches = _BatchSizes()
    remote = _RemoteEmbedder()
    report = replay(path, [batches, "coherence"], embedder=remote)
    assert report.summary.metrics["coherence"].scored == 300
    # one request per 256 traces: each trace's question and answer, all distinct
    assert batches.seen == [256, 44] and remote.batches[:1] == [512]


def test_a_batch_of_large_traces_ends_at_its_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a parsed trace takes about twice its line: traces of megabytes go a few at a time
    monkeypatch.setattr("agenteval_core.offline._replay.BATCH_BYTES", 100_000)
    path = tmp_path / "c.jsonl"
    traces = [
        Trace(id=f"t{i:02d}", input="question", output="x" * 30_000, session_id=None)
        for i in range(10)
    ]
    with CaptureWriter(path) as writer:
        for trace in traces:
            writer.write(trace)
    line = len(traces[0].to_json()) + 1  # every line has this size
    assert path.stat().st_size == 10 * line and 3 * line < 100_000 <= 4 * line
    for embedder in (None, _RemoteEmbedder()):
        batches = _BatchSizes()
        report = replay(path, [batches, "coherence"], embedder=embedder)
        # the line that reaches the budget ends its batch, in both kinds of batch
        assert report.traces == 10 and batches.seen == [4, 4, 2]


def _two_turn_sessions(path: Path, count: int, looping: range) -> None:
    """``count`` sessions of two turns; in those of ``looping`` the agent says the same
    thing twice."""
    with CaptureWriter(path) as writer:
        for n in range(count):
            answers = (
                ["Your parcel is still on its way, please wait."] * 2
                if n in looping
                else [f"Order {n} shipped on Monday.", f"Refund {n} was approved today."]
            )
            for turn, answer in enumerate(answers):
                writer.write(
                    Trace(
                        id=f"s{n:04d}-{turn}",
                        input=f"question {turn}",
                        output=answer,
                        session_id=f"s{n:04d}",
                    )
                )


def test_cli_shows_the_lowest_scoring_sessions_of_a_large_replay(tmp_path: Path) -> None:
    # 30 sessions of two turns; in five of them the agent says the same thing twice
    path = tmp_path / "c.jsonl"
    _two_turn_sessions(path, 30, looping=range(0, 30, 6))
    result = CliRunner().invoke(
        cli,
        ["replay", str(path), "--metrics", "loop_detection,agent_reliability"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if re.search(r"│ s\d{4} ", line)]
    assert len(rows) == 20
    # the looping sessions score lowest and come first
    assert [re.search(r"s\d{4}", row).group() for row in rows[:5]] == [  # type: ignore[union-attr]
        "s0000",
        "s0006",
        "s0012",
        "s0018",
        "s0024",
    ]
    assert "the 20 lowest-scoring of 30 are shown" in result.output


def test_the_sessions_shown_are_the_lowest_of_all_not_of_the_first_thousand(
    tmp_path: Path,
) -> None:
    # 1,050 sessions, the agent looping in the last 30: the table showed "the 20
    # lowest-scoring of the first 1000", none of them looping, and the looping ones nowhere
    path = tmp_path / "c.jsonl"
    _two_turn_sessions(path, 1050, looping=range(1020, 1050))
    metrics = "loop_detection,agent_reliability"
    result = CliRunner().invoke(
        cli, ["replay", str(path), "--metrics", metrics], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    rows = re.findall(r"│ (s\d{4}) +│ +([\d.]+) │", result.output)
    assert [session for session, _ in rows] == [f"s{n}" for n in range(1020, 1040)]
    looping = float(rows[0][1])
    assert looping < 0.5 and {score for _, score in rows} == {rows[0][1]}
    assert "the 20 lowest-scoring of 1050 are shown" in result.output
    assert "s1020 flagged: s1020-1 “question 1”" in result.output
    # the kept sessions are the 1,000 lowest, the same with workers (the parts' kept
    # sessions merged); the 50 given up are sessions that did not loop
    one = replay(path, metrics.split(","))
    two = replay(path, metrics.split(","), workers=2)
    for report in (one, two):
        assert len(report.session_results) == 1000
        assert {f"s{n}" for n in range(1020, 1050)} <= set(report.session_results)
        assert set(report.flagged_inputs) == {f"s{n}-1" for n in range(1020, 1050)}
    assert [r.model_dump(exclude={"latency_ms"}) for r in two.session_results["s1049"]] == [
        r.model_dump(exclude={"latency_ms"}) for r in one.session_results["s1049"]
    ]


def test_a_report_keeps_the_lowest_scoring_sessions() -> None:
    def scored(score: float | None, *flagged: str) -> list[MetricResult]:
        return [
            MetricResult(
                name="agent_reliability",
                version="1",
                score=score,
                threshold=0.5,
                success=None if score is None else score >= 0.5,
                skipped=score is None,
                metadata={"flagged_traces": list(flagged)},
            )
        ]

    report = ReplayReport(path="c.jsonl", keep_sessions=2)
    inputs = {"a1": "Where is A?", "b1": "Where is B?", "d1": "Where is D?"}
    report.keep("a", scored(0.9), inputs)
    report.keep("unscored", scored(None), inputs)
    report.keep("b", scored(0.3, "b1"), inputs)
    assert list(report.session_results) == ["a", "b"]  # no score: given up first
    report.keep("c", scored(0.7), inputs)
    assert list(report.session_results) == ["b", "c"]
    report.keep("d", scored(0.3, "d1"), inputs)  # equals b: c, the highest, goes
    report.keep("e", scored(0.3), inputs)  # equals the highest kept: the first scored stay
    assert list(report.session_results) == ["b", "d"]
    assert report.flagged_inputs == {"b1": "Where is B?", "d1": "Where is D?"}
    # a session cut in two keeps its lower part; its higher part's entry is stale
    report.keep("d", scored(0.6), inputs)
    assert report.session_results["d"][0].score == 0.3
    report.keep("b", scored(0.1), inputs)
    assert [(s, r[0].score) for s, r in report.session_results.items()] == [
        ("d", 0.3),
        ("b", 0.1),
    ]
    assert report.flagged_inputs == {"d1": "Where is D?"}
    report.keep("f", scored(0.2), inputs)
    assert [(s, r[0].score) for s, r in report.session_results.items()] == [
        ("b", 0.1),
        ("f", 0.2),
    ]
    assert report.flagged_inputs == {}


def test_results_file_writes_metadata_json_has_no_type_for(tmp_path: Path) -> None:
    # a metric's metadata may hold a numpy number, a date or raw bytes: the line is still
    # written (each as its str(), bytes as base64), never lost
    class Odd(Metric):
        name = "odd_metadata"
        kind = MetricKind.DETERMINISTIC

        def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
            return Score(
                1.0,
                "ok",
                {"count": np.int64(3), "day": date(2026, 11, 23), "raw": b"\xff", "ü": "é"},
            )

    path = tmp_path / "c.jsonl"
    with CaptureWriter(path) as writer:
        writer.write(Trace(id="t0", input="q", output="a", session_id=None))
    out = tmp_path / "results.jsonl"
    replay(path, [Odd()], output=out)
    (line,) = [json.loads(text) for text in out.read_text(encoding="utf-8").splitlines()]
    assert line["trace_id"] == "t0" and line["results"][0]["score"] == 1.0
    assert line["results"][0]["metadata"] == {
        "count": "3",
        "day": "2026-11-23",
        "raw": "_w==",
        "ü": "é",
    }


def test_results_lines_are_written_and_read_by_one_versioned_model(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    replay(EXAMPLE, output=out)
    lines = out.read_text(encoding="utf-8").splitlines()
    parsed = [ResultsLine.model_validate_json(line) for line in lines]
    assert [line.results_version for line in parsed] == [RESULTS_VERSION] * len(lines)
    assert sum(line.results is not None for line in parsed) == 9  # one per trace
    assert sum(line.session_results is not None for line in parsed) == 3  # one per session
    # a line from a newer agenteval is refused with what to do; one from before the version
    # field reads as version 1
    newer = json.loads(lines[0]) | {"results_version": RESULTS_VERSION + 1}
    (tmp_path / "newer.jsonl").write_text(json.dumps(newer) + "\n")
    with pytest.raises(CaptureError, match="newer than this agenteval understands"):
        load_results(tmp_path / "newer.jsonl")
    older = {k: v for k, v in json.loads(lines[0]).items() if k != "results_version"}
    assert ResultsLine.model_validate(older).results_version == 1


def test_replay_options_are_defined_once_and_a_misspelt_one_is_refused(tmp_path: Path) -> None:
    from typing import get_type_hints

    from agenteval_core import ReplayOptions, areplay

    # the sync and async drivers take the same options, from one definition
    assert set(get_type_hints(ReplayOptions)) == {
        "judge", "embedder", "concurrency", "output", "sinks", "on_trace", "on_bad_line",
        "on_progress", "max_open_sessions",
    }  # fmt: skip
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'outptu'"):
        replay(EXAMPLE, outptu=tmp_path / "r.jsonl")  # type: ignore[call-arg]
    import asyncio

    with pytest.raises(TypeError, match=r"'concurency'"):
        asyncio.run(areplay(EXAMPLE, concurency=2))  # type: ignore[call-arg]
    report = replay(EXAMPLE, ["coherence"], output=tmp_path / "r.jsonl", concurrency=2)
    assert report.traces == 9 and len((tmp_path / "r.jsonl").read_text().splitlines()) == 9


def test_the_summary_names_a_few_flagged_traces_per_session(tmp_path: Path) -> None:
    from ray_helpers import a_trace, write_capture

    capture = tmp_path / "c.jsonl"
    # every run of "busy" failed (risk 1: all six flagged); "calm" flags one of two; a
    # request in a script written without spaces is one word: it is cut at 80 characters
    # (it was printed whole, and held whole until its session closed)
    chinese = a_trace("zh", 0, failed=True).model_copy(update={"input": "我的订单在哪里？" * 200})
    write_capture(
        capture,
        [a_trace("busy", turn, failed=True) for turn in range(6)]
        + [a_trace("calm", 0, failed=True), a_trace("calm", 1), chinese],
    )
    result = CliRunner().invoke(
        cli, ["replay", str(capture), "--metrics", "agent_reliability"], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if " flagged: " in line]
    assert notes == [
        "busy flagged: busy-0 “where is order 0 of busy?”, busy-1 “where is order 1 of "
        "busy?”, busy-2 “where is order 2 of busy?” and 3 more (agenteval report lists every "
        "one)",
        "calm flagged: calm-0 “where is order 0 of calm?”",
        f"zh flagged: zh-0 “{'我的订单在哪里？' * 10}…”",
    ]


def test_a_run_too_large_for_one_line_is_captured_cut_so_it_reads_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # an agent reading 700 pages, each result cut to the redactor's 100,000 characters,
    # wrote a 70 MB line, over the 64 MiB every reader (replay, cases, report) takes: the
    # run was captured, and no command could read it back
    from agenteval_core import OnlineEvaluator
    from agenteval_core.schema._capture import MAX_LINE_BYTES

    page = ("lorem ipsum dolor sit amet " * 6000)[:150_000]
    steps = [
        AgentStep(
            thought=f"read page {i}",
            tool_calls=[ToolCall(id=f"c{i}", name="read", arguments={"page": i}, result=page)],
        )
        for i in range(700)
    ]
    run = Trace.from_steps("Read every page.", steps, output="Done.", session_id="s")
    capture = tmp_path / "capture.jsonl"
    with OnlineEvaluator(capture=capture, metrics=[], log=False) as evaluator:
        evaluator.submit(run)
    assert capture.stat().st_size <= MAX_LINE_BYTES
    [back] = read_capture(capture)  # raises for a line it refuses
    calls = back.tool_calls()
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        (f"c{i}", "read", {"page": i}) for i in range(700)
    ]
    # all cut to one length, the longest that fits, each saying how long it was
    kept = {len(c.result) - len("…[truncated: 150000 characters in all]") for c in calls}
    assert len(kept) == 1 and 90_000 < kept.pop() < 100_000
    assert all(c.result.endswith("…[truncated: 150000 characters in all]") for c in calls)
    assert all(page.startswith(c.result.partition("…")[0]) for c in calls)
    assert (back.id, back.input, back.output, back.session_id) == (
        run.id,
        "Read every page.",
        "Done.",
        "s",
    )
    assert [s.thought for s in back.steps()] == [f"read page {i}" for i in range(700)]
    [warning] = [r.getMessage() for r in caplog.records if "a reader takes" in r.getMessage()]
    assert warning.startswith(f"trace {run.id}: its capture line of ")
    assert "its 700 longest strings are cut to about " in warning


@settings(max_examples=60)
@given(
    st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=12),
    st.integers(min_value=2_000, max_value=20_000),
)
def test_a_line_is_cut_to_fit_at_the_longest_length_that_fits(
    lengths: list[int], limit: int
) -> None:
    from agenteval_core.schema._capture import SHORTEST_CUT, fit_line

    texts = [("é" if index % 2 else "a") * n for index, n in enumerate(lengths)]
    data = {"id": "t1", "spans": [{"id": f"s{i}", "output": t} for i, t in enumerate(texts)]}
    line = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    fitted = fit_line(line, limit)
    cut = json.loads(fitted)
    outputs = [span["output"] for span in cut["spans"]]
    assert [span["id"] for span in cut["spans"]] == [f"s{i}" for i in range(len(texts))]
    assert cut["id"] == "t1"
    changed = [(t, o) for t, o in zip(texts, outputs, strict=True) if t != o]
    for text, output in changed:  # cut: a prefix, and the marker with the original size
        prefix, marker = output.split("…")
        assert text.startswith(prefix) and marker == f"[truncated: {len(text)} characters in all]"
    if changed:
        # every string cut is cut to one size in bytes, and none left whole is longer
        level = max(len(o.split("…")[0].encode()) for _, o in changed)
        whole = [t for t, o in zip(texts, outputs, strict=True) if t == o]
        assert all(len(t.encode()) <= level + 2 for t in whole)
        assert all(len(o.split("…")[0].encode()) >= level - 3 for _, o in changed)
    # it fits, unless even SHORTEST_CUT bytes of every long string are too many
    floor = len(line) - sum(max(0, len(t.encode()) - SHORTEST_CUT - 50) for t in texts)
    assert len(fitted) <= limit or floor > limit
