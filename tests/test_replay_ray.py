"""Replay on Ray Data, in Ray's local mode (the same code runs on a cluster): results equal
one process's trace by trace and metric by metric, with and without a judge; history is
exactly the session's earlier traces; a worker lost mid-task loses and doubles nothing."""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from judge_server import JudgeServer, Reply

from agenteval_core import (
    CaptureError,
    CaptureWriter,
    ResultsLine,
    Trace,
    UnknownMetricError,
    read_capture,
    replay,
)
from agenteval_core.cli import cli
from agenteval_core.judges import OpenAIJudge
from agenteval_core.offline._ray import replay_on_ray
from agenteval_core.schema._capture import line_session

ray = pytest.importorskip(
    "ray", reason="Ray Data is not installed (pip install 'agenteval[ray]'): Ray tests skipped"
)
from ray_helpers import (  # noqa: E402  (after the skip)
    CrashOnce,
    HistoryIds,
    a_trace,
    index_elsewhere,
    timeless,
    write_capture,
)
from replay_helpers import (  # noqa: E402
    assert_one_limit_spaced,
    assert_the_budget_held_for_two,
    four_calls_budget,
    session_parts,
    sessions_taking_turns,
    shipped_twice,
    twenty_a_second,
)

TESTS = str(Path(__file__).parent)
STORE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "agenteval", "AWS_SECRET_ACCESS_KEY": "agenteval"}
"""The local S3-compatible store's (any pair works): the workers read with them too."""


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    # the workers import the helper metrics from this directory, as the driver does
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": TESTS, **STORE_CREDENTIALS}},
    )
    yield
    ray.shutdown()


def sharded_capture(directory: Path, shards: int, traces: int, sessions: int) -> Path:
    """A capture directory of ``traces`` turns over ``sessions`` sessions (turn 7 a failed
    run), with a line that is not JSON at the end of shard 1; returns that shard."""
    with CaptureWriter(directory, shards=shards) as writer:
        for turn in range(traces):
            writer.write(a_trace(f"s{turn % sessions}", turn, failed=turn == 7))
    shard = directory / f"part-00001-of-{shards:05d}.jsonl"
    shard.write_bytes(shard.read_bytes() + b"this is not json\n")
    return shard


def bad_lines_of(report: Any) -> list[tuple[str, int, str, bool]]:
    return [(e.path, e.line, e.problem, e.truncated) for e in report.bad_lines]


@pytest.fixture
def captures(tmp_path: Path) -> list[Path]:
    """Two capture files: sessions spread through each, a trace with no session, a failed
    run; the first also holds a blank line, a line that is not JSON, a torn fragment with a
    whole trace glued to it, and a truncated last line."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_capture(
        first,
        [a_trace(f"s{turn % 3}", turn, failed=turn == 4) for turn in range(9)] + [a_trace(None, 0)],
    )
    glued = a_trace("s1", 9).model_dump_json()
    with first.open("ab") as handle:
        handle.write(b"\n")
        handle.write(b"this is not json\n")
        handle.write(b'{"schema_version":1,"id":"torn","session_id":"s2","inp' + glued.encode())
        handle.write(b"\n")
        handle.write(a_trace("s0", 10).model_dump_json().encode()[:-7])
    write_capture(second, [a_trace(f"t{turn % 2}", turn) for turn in range(6)])
    return [first, second]


@pytest.mark.parametrize("in_place", [True, False], ids=["lines-read-in-place", "lines-grouped"])
def test_ray_equals_one_process_trace_by_trace(
    tmp_path: Path, captures: list[Path], monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    names = ["loop_detection", "tool_call_loops", "coherence", HistoryIds(), "agent_reliability"]
    from agenteval_core.offline import _ray

    if in_place:  # a.jsonl (6 KB) is indexed in two byte ranges at once, b.jsonl (2 KB) in one
        monkeypatch.setattr(_ray, "RANGE_BYTES", 3000)
        cut = _ray.byte_ranges
        ranges: list[int] = []

        def counted(path: str, count: int) -> list[tuple[int, int | None]]:
            ranges.append(count)
            return cut(path, count)

        monkeypatch.setattr(_ray, "byte_ranges", counted)
        files = [str(c) for c in captures]
        tasks = ray.get(_ray.line_tasks(files, 4, 2))
        assert ranges == [2, 1] and len(tasks) == 4
        # every line of both files in exactly one task (blank ones too: the reader skips
        # them), at its place in its file, each task's lines in capture order
        places = [
            (file, number, start, size)
            for task in tasks
            for file, lines in task
            for number, start, size in zip(
                lines.numbers.tolist(), lines.starts.tolist(), lines.sizes.tolist(), strict=True
            )
        ]
        expected_places = []
        for file, capture in enumerate(captures):
            start = 0
            for number, line in enumerate(capture.read_bytes().splitlines(keepends=True), 1):
                expected_places.append((file, number, start, len(line)))
                start += len(line)
        assert sorted(places) == expected_places
        for task in tasks:
            ordered = [(file, n) for file, lines in task for n in lines.numbers.tolist()]
            assert ordered == sorted(ordered)
        # a session's lines all in one task, whichever file holds them
        lines_at = {
            (file, number): line
            for file, capture in enumerate(captures)
            for number, line in enumerate(capture.read_bytes().splitlines(), 1)
        }
        holders: dict[bytes, set[int]] = {}
        for index, task in enumerate(tasks):
            for file, lines in task:
                for number in lines.numbers.tolist():
                    session = line_session(lines_at[file, number])
                    if session is not None:
                        holders.setdefault(session, set()).add(index)
        assert sorted(holders) == [b"s0", b"s1", b"s2", b"t0", b"t1"]
        assert all(len(tasks_of) == 1 for tasks_of in holders.values())
    else:  # files in an object store take this path: each read whole, then the groupby
        monkeypatch.setattr(_ray, "reads_in_place", lambda files: False)
    with monkeypatch.context() as driver:  # it writes results lines; the scorers report them

        def parsed(*args: object, **kwargs: object) -> None:
            raise AssertionError("the driver parsed a results line")

        driver.setattr(ResultsLine, "model_validate_json", parsed)
        on_ray = replay(
            [str(tmp_path / "*.jsonl")], names, engine="ray", output=tmp_path / "ray.results"
        )
    expected: list[dict[str, Any]] = []
    bad: list[tuple[str, int, str, bool]] = []
    flagged: dict[str, str] = {}
    traces = sessions = 0
    for index, capture in enumerate(captures):
        one = replay(capture, names, output=tmp_path / f"one-{index}.results")
        expected += timeless(tmp_path / f"one-{index}.results")
        bad += bad_lines_of(one)
        flagged |= one.flagged_inputs
        traces, sessions = traces + one.traces, sessions + one.sessions
    # 10 + the glued one in a.jsonl, 6 in b.jsonl; sessions s0-s2 and t0-t1
    assert (on_ray.traces, on_ray.sessions) == (traces, sessions) == (17, 5)
    # the report shows a flagged trace by its input's first words, as one process does:
    # agent_reliability flags s1's failed run (turn 4)
    assert on_ray.flagged_inputs == flagged
    assert flagged["s1-4"] == "where is order 4 of s1?"
    assert timeless(tmp_path / "ray.results") == sorted(
        expected, key=lambda r: json.dumps(r, sort_keys=True)
    )
    # bad, torn and glued lines reported as one process reports them, in file and line order
    assert (
        bad_lines_of(on_ray)
        == bad
        == [
            (str(captures[0]), 12, bad[0][2], False),
            (str(captures[0]), 13, bad[1][2], True),
            (str(captures[0]), 14, "truncated last line (the writer stopped mid-line)", True),
        ]
    )
    assert bad[0][2].startswith("not valid JSON")
    assert bad[1][2].startswith("a fragment torn by a writer")
    # the summaries add up to the same figures
    for name, summary in on_ray.summary.metrics.items():
        assert summary.scored == sum(
            1
            for r in expected
            for m in r.get("results", [])
            if m["name"] == name and m["score"] is not None
        )


def test_without_a_results_file_the_report_is_the_same_and_ray_settings_stay_the_callers(
    tmp_path: Path, captures: list[Path]
) -> None:
    """With no results file the scorers make no results lines: the report must come out as
    with one. The replay's own Ray Data settings (no progress bars, the sort-based shuffle)
    go on its dataset's copy of the caller's DataContext, never on the caller's."""
    context = ray.data.DataContext.get_current()
    settings = ("shuffle_strategy", "enable_progress_bars", "print_on_execution_start")
    before = {name: getattr(context, name) for name in settings}
    names = ["loop_detection", "coherence", "agent_reliability"]
    paths = [str(tmp_path / "*.jsonl")]
    bare = replay(paths, names, engine="ray")
    written = replay(paths, names, engine="ray", output=tmp_path / "ray.results")
    assert {name: getattr(context, name) for name in settings} == before
    assert before["enable_progress_bars"] is True  # Ray's default, left alone
    assert (bare.traces, bare.sessions) == (written.traces, written.sessions) == (17, 5)
    assert bare.flagged_inputs == written.flagged_inputs != {}
    assert bad_lines_of(bare) == bad_lines_of(written) != []
    for summary in (bare.summary, bare.session_summary):
        other = written.summary if summary is bare.summary else written.session_summary
        assert list(summary.metrics) == list(other.metrics) != []
        for name, ours in summary.metrics.items():
            theirs = other.metrics[name]
            assert ours.total == pytest.approx(theirs.total)  # added up in another order
            assert replace(ours, total=0.0) == replace(theirs, total=0.0)


def test_scorers_hold_the_open_sessions_limit_and_count_the_cuts_as_workers_do(
    tmp_path: Path,
) -> None:
    # the capture of test_workers_hold_the_open_sessions_limit_each_and_count_the_cuts: each
    # shard scored whole by one scorer call, in batches of 64, as a worker scores it
    directory = tmp_path / "capture"
    directory.mkdir()
    sessions_taking_turns(directory / "part-00000-of-00002.jsonl", 100, "ab")
    sessions_taking_turns(directory / "part-00001-of-00002.jsonl", 100, "cd")
    out = tmp_path / "results.jsonl"
    report = replay(
        [directory], ["agent_reliability"], engine="ray", max_open_sessions=1, output=out
    )
    assert (report.traces, report.sessions, report.sessions_cut) == (400, 10, 6)
    assert session_parts(out) == [
        *[("a", 4)] + [("a", 32)] * 3,
        ("b", 100),
        *[("c", 4)] + [("c", 32)] * 3,
        ("d", 100),
    ]


def test_history_is_the_sessions_earlier_traces_across_files(tmp_path: Path) -> None:
    write_capture(tmp_path / "1.jsonl", [a_trace("s", turn) for turn in range(3)])
    write_capture(tmp_path / "2.jsonl", [a_trace("s", turn) for turn in range(3, 5)])
    output = tmp_path / "ray.results"
    report = replay([tmp_path], [HistoryIds(), "agent_reliability"], engine="ray", output=output)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    seen = {line["trace_id"]: line["results"][0]["metadata"]["history"] for line in lines[:-1]}
    assert seen == {f"s-{turn}": [f"s-{earlier}" for earlier in range(turn)] for turn in range(5)}
    # the session's traces in capture order (file order, then line order), then its line
    assert [line.get("trace_id") for line in lines] == [f"s-{t}" for t in range(5)] + [None]
    assert report.traces == 5 and report.sessions == 1


def test_a_session_written_by_several_processes_is_read_in_the_order_its_runs_started(
    tmp_path: Path,
) -> None:
    # a service's two processes each write their own capture, and a conversation's turns
    # alternate between them: turn 1 (in 2.jsonl) comes between turns 0 and 2 (in 1.jsonl)
    def turn(session: str, number: int, started: float) -> Trace:
        return a_trace(session, number).model_copy(update={"start_time": 1_790_000_000 + started})

    write_capture(tmp_path / "1.jsonl", [turn("s", 0, 0), turn("s", 2, 2)])
    write_capture(tmp_path / "2.jsonl", [turn("s", 1, 1), turn("s", 3, 3)])
    # a session in one file whose second line started first
    write_capture(tmp_path / "3.jsonl", [turn("t", 0, 9), turn("t", 1, 8)])
    output = tmp_path / "ray.results"
    replay([tmp_path], [HistoryIds()], engine="ray", output=output)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    seen = {
        line["trace_id"]: line["results"][0]["metadata"]["history"]
        for line in lines
        if "trace_id" in line
    }
    assert seen == {
        "s-0": [],
        "s-1": ["s-0"],
        "s-2": ["s-0", "s-1"],
        "s-3": ["s-0", "s-1", "s-2"],
        "t-0": [],  # a session in one file keeps its line order, as one process reads it
        "t-1": ["t-0"],
    }


def test_a_worker_lost_mid_task_loses_and_doubles_nothing(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    write_capture(capture, [a_trace(f"s{turn % 4}", turn) for turn in range(24)])
    marker = tmp_path / "crashed"
    output = tmp_path / "ray.results"
    report = replay(
        capture,
        [CrashOnce(victim="s2-10", marker=str(marker)), "coherence", "agent_reliability"],
        engine="ray",
        output=output,
    )
    assert marker.read_text() == "crashed"  # the worker really died mid-session
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    traced = sorted(line["trace_id"] for line in lines if "trace_id" in line)
    assert traced == sorted(f"s{turn % 4}-{turn}" for turn in range(24))  # each exactly once
    assert sorted(line["session_id"] for line in lines if "trace_id" not in line) == [
        "s0",
        "s1",
        "s2",
        "s3",
    ]
    assert report.traces == 24 and report.summary.metrics["crash_once"].scored == 24


def test_a_trace_read_twice_in_its_session_is_scored_once_on_ray(tmp_path: Path) -> None:
    # a repeated capture line is a repeat on Ray as in one process: scored once, its
    # repeat's results skipped, the session as it was (see the one-process test)
    _, twice = shipped_twice(tmp_path)
    names = ["loop_detection", "agent_reliability"]
    one = replay(twice, names, output=tmp_path / "one.results")
    on_ray = replay([twice], names, engine="ray", output=tmp_path / "ray.results")
    assert (on_ray.traces, on_ray.repeated_traces) == (one.traces, one.repeated_traces) == (5, 2)
    assert timeless(tmp_path / "ray.results") == timeless(tmp_path / "one.results")


def test_a_capture_file_named_twice_is_read_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a directory and a file in it, or overlapping globs: each file was read as often as it
    # was named, so its traces counted twice and each repeated itself in its session (to
    # loop_detection, a perfect repeat: a loop the agent never made)
    directory = tmp_path / "capture"
    shard = sharded_capture(directory, 2, 12, 4)
    with caplog.at_level(logging.WARNING, logger="agenteval"):
        twice = replay(
            [directory, shard, str(directory / "*.jsonl")],
            [HistoryIds(), "agent_reliability"],
            engine="ray",
            output=tmp_path / "twice.results",
        )
    once = replay(directory, [HistoryIds(), "agent_reliability"], output=tmp_path / "once.results")
    assert (twice.traces, twice.sessions) == (once.traces, once.sessions) == (12, 4)
    assert timeless(tmp_path / "twice.results") == timeless(tmp_path / "once.results")
    assert "3 capture file(s) were named more than once; each is read once" in caplog.text


def test_a_capture_directory_is_scored_shard_by_shard_as_one_process_scores_it(
    tmp_path: Path,
) -> None:
    directory, shard = tmp_path / "capture", sharded_capture(tmp_path / "capture", 3, 30, 7)
    marker = tmp_path / "crashed"
    names = [HistoryIds(), CrashOnce(victim="s3-10", marker=str(marker)), "agent_reliability"]
    on_ray = replay([directory], names, engine="ray", output=tmp_path / "ray.results")
    assert marker.read_text() == "crashed"  # a worker died mid-shard; Ray ran the task again
    one = replay(directory, names, output=tmp_path / "one.results")
    assert (on_ray.traces, on_ray.sessions) == (one.traces, one.sessions) == (30, 7)
    assert on_ray.flagged_inputs == one.flagged_inputs
    assert one.flagged_inputs["s0-7"] == "where is order 7 of s0?"  # the failed run
    # every line once, each trace with exactly the earlier traces of its session as history
    assert timeless(tmp_path / "ray.results") == timeless(tmp_path / "one.results")
    histories = {
        line["trace_id"]: line["results"][0]["metadata"]["history"]
        for line in map(json.loads, (tmp_path / "ray.results").read_text().splitlines())
        if "trace_id" in line
    }
    assert histories == {
        f"s{turn % 7}-{turn}": [f"s{turn % 7}-{t}" for t in range(turn % 7, turn, 7)]
        for turn in range(30)
    }
    lines = len(shard.read_bytes().splitlines())
    assert (
        bad_lines_of(on_ray)
        == bad_lines_of(one)
        == [(str(shard), lines, bad_lines_of(one)[0][2], False)]
    )
    # into a results directory: one results shard per capture shard, the same lines in all
    replay([directory], names[:1], engine="ray", output=f"{tmp_path / 'results'}/")
    replay(directory, names[:1], output=tmp_path / "one-history.results")
    shards = sorted((tmp_path / "results").iterdir())
    assert [p.name for p in shards] == [f"results-0000{i}-of-00003.jsonl" for i in range(3)]
    for index, results in enumerate(shards):  # each holds its capture shard's traces
        traced = [line["trace_id"] for line in map(json.loads, results.read_text().splitlines())]
        captured = directory / f"part-0000{index}-of-00003.jsonl"
        assert traced == [t.id for t in read_capture(captured, on_error=lambda e: None)]
    merged = tmp_path / "merged.results"
    merged.write_text("".join(p.read_text() for p in shards))
    assert timeless(merged) == timeless(tmp_path / "one-history.results")


def test_a_capture_in_an_s3_compatible_store_replays_as_the_same_files_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moto_server = pytest.importorskip(
        "moto.server", reason="moto is not installed (nox installs it): S3 test skipped"
    )
    from pyarrow import fs

    from agenteval_core.offline import _ray

    for name, value in STORE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    directory, shard = tmp_path / "capture", sharded_capture(tmp_path / "capture", 2, 12, 4)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        store = fs.S3FileSystem(
            endpoint_override=f"{host}:{port}",
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
            access_key=STORE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_key=STORE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        store.create_dir("captures")
        for local in sorted(directory.iterdir()):
            with store.open_output_stream(f"captures/day/{local.name}") as remote:
                remote.write(local.read_bytes())
        options = f"endpoint_override={host}:{port}&scheme=http&region=us-east-1"
        names = [HistoryIds(), "coherence", "agent_reliability"]
        on_ray = replay(
            [f"s3://captures/day?{options}"], names, engine="ray", output=tmp_path / "s3.results"
        )
        # a plain capture file in the store: read by lines and grouped by session, in
        # partitions as many as its size asks for
        plain = tmp_path / "plain.jsonl"
        write_capture(plain, [a_trace(f"s{turn % 3}", turn) for turn in range(9)])
        with store.open_output_stream("captures/plain.jsonl") as remote:
            remote.write(plain.read_bytes())
        plain_url = f"s3://captures/plain.jsonl?{options}"
        assert _ray._total_bytes([plain_url, str(plain)]) == 2 * plain.stat().st_size
        replay([plain_url], names, engine="ray", output=tmp_path / "s3-plain.results")
    finally:
        server.stop()
    replay(plain, names, output=tmp_path / "one-plain.results")
    assert timeless(tmp_path / "s3-plain.results") == timeless(tmp_path / "one-plain.results")
    one = replay(directory, names, output=tmp_path / "one.results")
    assert (on_ray.traces, on_ray.sessions) == (one.traces, one.sessions) == (12, 4)
    assert timeless(tmp_path / "s3.results") == timeless(tmp_path / "one.results")
    # the bad line, named by the file it is in: the store's URL (with its options)
    lines = len(shard.read_bytes().splitlines())
    problem = bad_lines_of(one)[0][2]
    assert bad_lines_of(on_ray) == [
        (f"s3://captures/day/part-00001-of-00002.jsonl?{options}", lines, problem, False)
    ]


def test_a_judge_on_every_worker_shares_one_rate_limit(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    judge_server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    capture = tmp_path / "c.jsonl"
    write_capture(capture, [a_trace(f"s{turn % 6}", turn) for turn in range(24)])
    judge = OpenAIJudge(
        "judge-model",
        base_url=judge_server.base_url,
        cache=None,
        requests_per_period=8,
        period=1.0,
        max_concurrency=4,
    )
    output = tmp_path / "ray.results"
    # two scorers: a capture this small would get one by default
    report = replay_on_ray(
        [capture], ["confidence", "agent_reliability"], judge=judge, output=output, scorers=2
    )
    replay(capture, ["confidence", "agent_reliability"], judge=judge, output=tmp_path / "one")
    assert report.summary.metrics["confidence"].scored == 24
    assert timeless(output) == timeless(tmp_path / "one")
    # 24 scoring requests through one limiter at 8 per second, from two workers: the
    # limiter lets them through 1/8 s apart, so the first and the last leave at least
    # 23/8 s apart; two workers each at their own 8 per second would take 11/8 s. The
    # bound is halfway between: a request delayed on its way (a busy core) arrives later
    # than the limiter let it go, and a late first one shortens the span it is measured by
    ray_arrivals = sorted(judge_server.arrivals)[: len(judge_server.arrivals) - 24]
    assert len(ray_arrivals) == 24
    assert ray_arrivals[-1] - ray_arrivals[0] >= (23 / 8 + 11 / 8) / 2


def test_the_cli_replays_a_directory_on_ray(tmp_path: Path, captures: list[Path]) -> None:
    output = tmp_path / "cli.results"
    done = CliRunner().invoke(
        cli,
        [
            "replay",
            str(tmp_path),
            "--engine",
            "ray",
            "--metrics",
            "coherence",
            "--json",
            str(output),
        ],
    )
    # the bad lines are said and make the exit code 1, as for one process
    assert done.exit_code == 1, done.output
    assert "3 bad line(s) skipped; the other 17 were scored" in done.output
    assert "coherence" in done.output
    assert len(output.read_text().splitlines()) == 17
    assert CliRunner().invoke(cli, ["replay", *map(str, captures)]).exit_code == 2


def test_the_cli_ends_a_ray_replay_as_it_ends_one_process(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    """Results the judge left unscored fail the run (exit 1, with what will help), and the
    judge's spend is said, with the budget the whole replay shares, as one process says."""
    capture, results = tmp_path / "c.jsonl", tmp_path / "r.jsonl"
    write_capture(capture, [a_trace(f"s{turn % 2}", turn) for turn in range(4)])
    answered: list[dict[str, Any]] = []

    def first_only(request: dict[str, Any]) -> Reply:
        answered.append(request)
        if len(answered) == 1:
            return Reply(json.dumps({"score": 0.9, "reason": "ok"}))
        return Reply(status=503, content="gone", headers={"Retry-After": "0"})

    judge_server.responder = first_only
    command = ["replay", str(capture), "--engine", "ray", "--metrics", "confidence", "-q"]
    command += ["--json", str(results), "--judge-model", "gpt-4o-mini", "--no-cache"]
    command += ["--judge-base-url", judge_server.base_url, "--judge-api-key", "k"]
    command += ["--judge-budget-usd", "5"]
    done = CliRunner().invoke(cli, command)
    assert done.exit_code == 1, done.output
    lines = done.output.strip().splitlines()
    # the one scored result's tokens (the server's 100 in, 20 out) at gpt-4o-mini's price
    # ($0.15 and $0.60 a million: $0.000027)
    assert "judge gpt-4o-mini: 120 tokens, $0.0000 of a $5.0000 budget" in lines
    assert lines[-1] == (
        "agenteval: error: judge unavailable: 3 result(s) not scored (see the table); the "
        f"rest is in {results}; replay again to score them (raise --judge-timeout for a "
        "slow server)"
    )
    scores = sorted(
        (line["results"][0]["score"] is not None)
        for line in map(json.loads, results.read_text().splitlines())
        if "trace_id" in line
    )
    assert scores == [False, False, False, True]


def test_a_results_directory_holds_each_session_beside_its_last_trace(tmp_path: Path) -> None:
    """Three sessions in one partition (their ids' CRC-32 agree modulo 64, so for any
    power-of-two count of partitions up to it), over two capture files: each session's
    line goes to the results shard of the file that holds its last trace."""
    assert len({zlib.crc32(s.encode()) % 64 for s in ("conv-0", "conv-51", "conv-133")}) == 1
    (tmp_path / "captures").mkdir()
    write_capture(
        tmp_path / "captures" / "a.jsonl",
        [a_trace("conv-0", 0), a_trace("conv-51", 1), a_trace("conv-0", 2)],
    )
    write_capture(
        tmp_path / "captures" / "b.jsonl", [a_trace("conv-133", 3), a_trace("conv-51", 4)]
    )
    replay([tmp_path / "captures"], ["tool_failures", "agent_reliability"], engine="ray",
           output=f"{tmp_path / 'results'}/")  # fmt: skip
    shards = sorted((tmp_path / "results").iterdir())
    held = [
        [line.get("trace_id") or f"session {line['session_id']}" for line in map(json.loads, f.read_text().splitlines())]
        for f in shards
    ]  # fmt: skip
    assert held == [
        ["conv-0-0", "conv-51-1", "conv-0-2", "session conv-0"],
        ["conv-133-3", "conv-51-4", "session conv-133", "session conv-51"],
    ]  # sessions close least recently active first, as in one process


def test_large_traces_are_read_in_blocks_bounded_by_bytes_and_scored_as_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Traces of megabytes (a large tool result each): a read task (of a file in an object
    store) hands them on in blocks bounded by bytes, not only by lines, and Ray scores them
    as one process does, read that way or where they lie."""
    from agenteval_core.offline import _ray

    big = [a_trace(f"s{turn % 2}", turn) for turn in range(5)]
    for turn, trace in enumerate(big):
        call = trace.spans[0].tool_call
        assert call is not None
        call.result = f"record {turn}: " + "x" * (2 << 20)  # 2 MiB each
    capture = tmp_path / "big.jsonl"
    write_capture(capture, big)
    sizes = [len(line) for line in capture.read_bytes().splitlines(keepends=True)]
    # one block of two lines, then two: each block ends once it holds 4 MiB
    monkeypatch.setattr(_ray, "READ_BYTES", 4 << 20)
    listed = {"file": np.array([0]), "uri": np.array([str(capture)])}
    blocks = list(_ray._read_files(listed, partitions=3))
    assert [block["number"] for block in blocks] == [[1, 2], [3, 4], [5]]
    assert [len(line) for block in blocks for line in block["line"]] == sizes
    # each line in its session's partition: a stable hash (CRC-32) of the session id
    s0, s1 = zlib.crc32(b"s0") % 3, zlib.crc32(b"s1") % 3
    assert [g for block in blocks for g in block["group"]] == [s0, s1, s0, s1, s0]
    names = ["tool_failures", "coherence", "loop_detection", "agent_reliability"]
    replay(capture, names, output=tmp_path / "one.results")
    # read where they lie, by their offsets, and read by a task and grouped (as in an
    # object store)
    replay([capture], names, engine="ray", output=tmp_path / "in-place.results")
    assert timeless(tmp_path / "in-place.results") == timeless(tmp_path / "one.results")
    monkeypatch.setattr(_ray, "reads_in_place", lambda files: False)
    replay([capture], names, engine="ray", output=tmp_path / "grouped.results")
    assert timeless(tmp_path / "grouped.results") == timeless(tmp_path / "one.results")


def test_a_capture_a_worker_cannot_read_is_said_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the driver sees the capture; the worker that indexes it does not (a path on the
    # driver's disk, not a shared volume): the replay says which file, where, and what to
    # do, not Ray's traceback
    from agenteval_core.offline import _ray

    capture = tmp_path / "c.jsonl"
    write_capture(capture, [a_trace("s", turn) for turn in range(3)])
    monkeypatch.setattr(_ray, "_index", index_elsewhere)
    node = ray.util.get_node_ip_address()
    said = (
        f"{capture}.elsewhere: a Ray worker on {node} cannot read it (No such file or "
        "directory); every node must see it at this path (a shared volume), or put the "
        "captures in an object store"
    )
    with pytest.raises(CaptureError) as raised:
        replay([capture], ["coherence"], engine="ray")
    assert str(raised.value) == said
    done = CliRunner().invoke(cli, ["replay", str(capture), "--engine", "ray", "-q"])
    assert done.exit_code != 0 and f"agenteval: error: {said}" in " ".join(done.output.split())


def test_replay_on_ray_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    write_capture(tmp_path / "c.jsonl", [a_trace("s", 0)])
    with pytest.raises(ValueError, match="engine='ray' takes no workers"):
        replay(tmp_path / "c.jsonl", engine="ray", workers=2)
    with pytest.raises(ValueError, match="engine must be 'local' or 'ray'"):
        replay(tmp_path / "c.jsonl", engine="spark")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="several files"):
        replay([tmp_path / "c.jsonl"])
    from agenteval_core import CaptureError

    with pytest.raises(CaptureError, match="no capture file matches"):
        replay([str(tmp_path / "*.nothing")], engine="ray")


def test_a_small_capture_starts_fewer_scorers_than_cpus_but_one_on_every_node() -> None:
    from agenteval_core.offline._ray import SCORER_BYTES, scorer_count

    # one per 16 MiB of captures (rounded up), up to one per CPU
    assert SCORER_BYTES == 16 << 20
    assert scorer_count([16.0], 700_000) == 1
    assert scorer_count([16.0], 5 * SCORER_BYTES + 1) == 6
    assert scorer_count([16.0], 737_000_000) == 16  # 44 wanted, 16 CPUs
    assert scorer_count([2.0], 73_000_000) == 2
    # at least one on every node with a whole CPU, so that every node scores
    assert scorer_count([1.0, 1.0], 10_000) == 2
    assert scorer_count([0.0, 4.0, 4.0, 4.0], 10_000) == 3  # a head node with no CPU
    # a node with no CPU at all, or nothing to read: still one
    assert scorer_count([0.5], 0) == 1


def test_scorers_start_with_the_replay_only_where_the_shuffle_keeps_a_whole_cpu() -> None:
    from agenteval_core.offline._ray import scorers_at_start

    # 16 scorers of half a CPU on one 16-CPU node leave 8 free: all start, if the shuffle
    # hands on blocks enough for each
    assert scorers_at_start([16.0], 16, 0.5, blocks=32) == 16
    assert scorers_at_start([16.0], 16, 0.5, blocks=5) == 5
    assert scorers_at_start([16.0], 16, 0.5, blocks=0) == 1
    # four 4-CPU nodes: 8 CPUs free over 4 nodes, so some node keeps a whole one
    assert scorers_at_start([4.0] * 4, 16, 0.5, blocks=64) == 16
    # two one-CPU nodes: one scorer on each would leave each half a CPU, and the shuffle's
    # tasks (a whole CPU each) would wait for ever; so one scorer, and the pool grows later
    assert scorers_at_start([1.0, 1.0], 2, 0.5, blocks=64) == 1
    # more scorers asked for than the CPUs hold
    assert scorers_at_start([16.0], 64, 0.5, blocks=64) == 1
    # scorers that reserve nothing (a single one-CPU node) never hold a CPU back
    assert scorers_at_start([1.0], 1, 0.0, blocks=64) == 1
    assert scorers_at_start([2.0, 2.0], 8, 0.0, blocks=64) == 8


def test_a_metric_the_caller_registered_is_scored_by_name_on_every_worker(
    tmp_path: Path, callers_metric: Any
) -> None:
    # a metric registered in the caller's script or notebook: no Ray worker imports it, so
    # replaying it by name failed on every worker ("unknown metric 'answer_words'")
    capture = tmp_path / "c.jsonl"
    write_capture(capture, [a_trace(f"s{turn % 2}", turn) for turn in range(6)])
    replay(capture, ["answer_words"], output=tmp_path / "one.results")
    replay([capture], ["answer_words"], engine="ray", output=tmp_path / "ray.results")
    assert timeless(tmp_path / "ray.results") == timeless(tmp_path / "one.results")
    scores = [
        result["score"]
        for line in (tmp_path / "ray.results").read_text().splitlines()
        for result in json.loads(line).get("results", [])
    ]
    assert scores == [0.6] * 6  # "order 3 ships on day 0": 6 words of 10


def test_a_misspelt_metric_is_refused_before_ray_runs_anything(tmp_path: Path) -> None:
    # it was refused by every worker as it started, and reached the caller as Ray's
    # UnserializableException (the command: 370 lines of tracebacks, exit 1)
    capture = tmp_path / "c.jsonl"
    write_capture(capture, [a_trace("s", 0)])
    with pytest.raises(UnknownMetricError) as raised:
        replay([capture], ["tool_failurez"], engine="ray")
    assert str(raised.value) == "unknown metric 'tool_failurez'; did you mean tool_failures?"
    done = CliRunner().invoke(
        cli, ["replay", str(capture), "--engine", "ray", "--metrics", "tool_failurez"]
    )
    assert (done.exit_code, done.output) == (
        2,
        "agenteval: error: unknown metric 'tool_failurez'; did you mean tool_failures?\n",
    )


def test_a_judge_ray_cannot_send_is_refused_before_ray_starts(tmp_path: Path) -> None:
    # a LangChainJudge's chat model holds its HTTP client: Ray refused it as "Could not
    # serialize the put value <...MapTransformer object at 0x...>", naming nothing of ours
    from langchain_openai import ChatOpenAI

    from agenteval_core.judges import LangChainJudge

    capture = tmp_path / "c.jsonl"
    write_capture(capture, [a_trace("s", 0)])
    model = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError) as refused:
        replay([capture], ["task_completion"], engine="ray", judge=LangChainJudge(model))
    assert str(refused.value) == (
        "replay on Ray: the metrics, embedder or judge cannot be sent to Ray's workers "
        "(TypeError: cannot pickle '_thread.RLock' object); each is sent pickled with its "
        "attributes, so none may hold a lock or an open client (a LangChain chat model "
        "holds its HTTP client: judge with OpenAIJudge(model, base_url=...) on its "
        "OpenAI-compatible API instead); or replay in one process"
    )


def test_a_judge_budget_holds_for_the_whole_cluster(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    # each scorer had the whole budget: a $5 budget on 64 scorers could spend $320
    judge_server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    capture = tmp_path / "c.jsonl"
    write_capture(capture, [a_trace(f"s{turn % 6}", turn) for turn in range(24)])
    judge = four_calls_budget(judge_server.base_url)
    report = replay_on_ray([capture], ["confidence"], judge=judge, scorers=2)
    assert_the_budget_held_for_two(report, len(judge_server.requests), 24)


def test_an_http_embedders_rate_limit_holds_for_the_whole_cluster(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    capture = tmp_path / "c.jsonl"  # 24 texts
    write_capture(capture, [a_trace(f"s{turn % 4}", turn) for turn in range(12)])
    embedder = twenty_a_second(judge_server.base_url)
    report = replay_on_ray([capture], ["coherence"], embedder=embedder, scorers=2)
    assert report.summary.metrics["coherence"].scored == 12
    assert_one_limit_spaced(judge_server.embedding_arrivals, 24)
